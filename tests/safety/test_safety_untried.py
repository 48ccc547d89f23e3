"""The untried cases (issue 52, item 4), each tried against the command line: links inside --out, --out that is the
checkpoint's folder, a marker edited to name files outside, two runs on one --out, kill -9 after a checkpoint,
--keep-checkpoints 0, --eval-every 0 or huge, every --threshold out of range, unknown and repeated multi-label
labels, CRLF / NUL / Latin-1 lines, a .keras file on another backend, bfloat16. Every input and a victim file
outside the run folder are hashed before and after."""
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
from paths import ROOT, child_env
from safety_files import snapshot
from tiny_runs import (
    QUICK,
    assert_same_arrays,
    finetune_args,
    keras_file_weights,
    pretrain_args,
    training_state,
    write_lines,
)

from bert4long.cli import main
from bert4long.output_folders import MARKER
from bert4long.training.lock import LOCK_NAME


@pytest.fixture(scope="module")
def runs(tiny_bert, data):
    """Finished runs the tests copy: a 2-step pretrain, a classifier (with --valid) and a multi-label classifier."""
    root = data["root"]
    assert main(pretrain_args(tiny_bert, data, root / "pretrain")) == 0
    assert main(finetune_args(tiny_bert, data["train"], root / "finetune", "--valid", str(data["train"]))) == 0
    assert main(finetune_args(tiny_bert, data["multi"], root / "multi", "--task", "multilabel")) == 0
    return {name: root / name for name in ("pretrain", "finetune", "multi")}


def _copy(run, tmp_path):
    shutil.copytree(run, tmp_path / run.name, symlinks=True)
    return tmp_path / run.name


def _untouched(data):
    """The hashes of every input and the victim (all under the data folder, the runs' copies aside)."""
    found = snapshot(data["root"])
    return {k: v for k, v in found.items() if k.split(os.sep)[0] not in ("pretrain", "finetune", "multi")}


def _refused(capsys, argv):
    """``main(argv)`` fails with one line naming the command, no traceback; returns that line."""
    assert main(argv) == 1, argv
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"bert4long {argv[0]}: error: "), err
    return err


# What a resume finds replaced by links to the user's copies outside --out, run by run: a folder, or files.
LINKED = {"pretrain": (("logs",), ("checkpoints",), ("model.keras", "vocab.txt", "summary.json")),
          "finetune": (("logs",), ("checkpoints",), ("metrics.json", "classifier.keras", "vocab.txt"))}


@pytest.mark.slow
@pytest.mark.parametrize("command", sorted(LINKED))
def test_a_resume_never_writes_through_a_link_inside_out(tiny_bert, data, runs, tmp_path, capsys, command):
    """A folder of the run replaced by a link to the user's copy outside is refused in one line before the run
    writes (was: the resume wrote TensorBoard events and checkpoints into the folder a ``logs`` or ``checkpoints``
    link points at, and pruned the checkpoints there); a link to a file is replaced, its target never written."""
    argv = {"pretrain": lambda out: pretrain_args(tiny_bert, data, out, steps=3),
            "finetune": lambda out: finetune_args(tiny_bert, data["train"], out, "--valid", str(data["train"]), steps=3)}
    for names in LINKED[command]:
        run = _copy(runs[command], tmp_path / names[0])
        outside = {name: tmp_path / names[0] / f"outside-{name}" for name in names}
        for name, target in outside.items():
            os.rename(run / name, target)
            os.symlink(target, run / name)
        before, inputs = snapshot(tmp_path / names[0]), _untouched(data)
        before = {k: v for k, v in before.items() if k.startswith("outside-")}
        if len(names) == 1:
            err = _refused(capsys, argv[command](run))
            assert f"{names[0]!r} in it is a link to {str(outside[names[0]])!r}" in err, err
            assert "never through a link" in err, err
        else:
            assert main(argv[command](run)) == 0, capsys.readouterr().err
        after = {k: v for k, v in snapshot(tmp_path / names[0]).items() if k.startswith("outside-")}
        assert after == before and _untouched(data) == inputs, names


@pytest.mark.slow
def test_out_may_not_be_the_folder_of_the_input_checkpoint(tiny_bert, data, runs, capsys):
    """--out naming the checkpoint's own folder (a prefix stands for its folder, a run folder for itself)."""
    config, checkpoint, _ = tiny_bert
    folder = os.path.dirname(checkpoint)
    shipped, inputs = snapshot(folder), _untouched(data)
    commands = [pretrain_args(tiny_bert, data, folder), finetune_args(tiny_bert, data["train"], folder),
                ["export", "--checkpoint", checkpoint, "--config", config, "--out", folder],
                ["extend", "--checkpoint", checkpoint, "--config", config, "--method", "copy", "--max-position", "32",
                 "--out", folder],
                ["convert", "--checkpoint", checkpoint, "--out", folder]]
    for argv in commands:
        for out in (folder, folder + os.sep):
            argv[argv.index("--out") + 1] = out
            assert "is the folder of the input" in _refused(capsys, [*argv, "--overwrite"]), argv
    assert snapshot(folder) == shipped and _untouched(data) == inputs
    run = runs["finetune"]
    finished = snapshot(run)
    err = _refused(capsys, ["finetune", "--checkpoint", str(run), "--train", str(data["train"]), *QUICK, "--out",
                            str(run)])
    assert "is the folder of the input" in err and snapshot(run) == finished


@pytest.mark.slow
def test_a_marker_naming_files_outside_out_never_reaches_them(tiny_bert, data, runs, tmp_path, capsys):
    """The marker edited to record ``../victim.txt``, the victim's absolute path and a path through a link (with
    the victim's true size and hash) as the run's files and temporaries: a resume and --overwrite delete and
    overwrite nothing outside --out."""
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's file")
    link_target = tmp_path / "elsewhere"
    link_target.mkdir()
    (link_target / "victim.txt").write_text("the user's file")
    run = _copy(runs["pretrain"], tmp_path)
    os.symlink(link_target, run / "through")
    marker = json.loads((run / MARKER).read_text())
    own = {"size": victim.stat().st_size, "sha256": hashlib.sha256(victim.read_bytes()).hexdigest()}
    for name in (os.path.join("..", "victim.txt"), str(victim), os.path.join("through", "victim.txt")):
        marker["files"][name] = own
        marker["temporaries"][name] = {"folder": False, "inode": os.stat(victim).st_ino}
    (run / MARKER).write_text(json.dumps(marker))
    theirs, inputs = (victim.read_bytes(), snapshot(link_target)), _untouched(data)
    for extra in ([], ["--overwrite"]):   # a folder it records files in is a link / the link is the user's
        assert "through" in _refused(capsys, pretrain_args(tiny_bert, data, run, *extra, steps=3))
        assert (victim.read_bytes(), snapshot(link_target)) == theirs
    os.remove(run / "through")
    for extra in ([], ["--overwrite"]):
        assert main(pretrain_args(tiny_bert, data, run, *extra, steps=3)) == 0, capsys.readouterr().err
        assert (victim.read_bytes(), snapshot(link_target)) == theirs and _untouched(data) == inputs


@pytest.mark.slow
def test_a_second_process_on_the_same_out_is_refused_while_the_first_runs(tiny_bert, data, tmp_path, capsys):
    """Two real processes on one --out: the second is refused in one line once the first holds the lock (waited for
    on the lock file), and changes nothing."""
    out = tmp_path / "run"
    first = subprocess.Popen([sys.executable, "-m", "bert4long.cli", *pretrain_args(tiny_bert, data, out, steps=100000)],
                             cwd=ROOT, env=child_env(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    try:
        while not (out / LOCK_NAME).exists():   # the first run holds --out from here to its end
            assert first.poll() is None, first.stderr.read()[-2000:]
            time.sleep(0.05)
        inputs = _untouched(data)
        for extra in ([], ["--overwrite"]):
            err = _refused(capsys, pretrain_args(tiny_bert, data, out, *extra))
            assert f"Another run is writing to {str(out)!r} (process {first.pid} on " in err, err
        assert _untouched(data) == inputs and first.poll() is None
    finally:
        first.kill()
        first.wait()


# A command run in a child that kills itself (SIGKILL, as kill -9) at a checkpoint: ``saved STEP`` just after the
# checkpoint of STEP is in place, ``writing STEP`` while it is being written (its files made, not yet renamed).
KILLED_AT = """
import os, signal, sys
from bert4long.cli import finetune, main, mlm
from bert4long.training import resume

point, step, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def die():
    os.kill(os.getpid(), signal.SIGKILL)
if point == "saved":
    for module in (mlm, finetune):
        module.saved_line = lambda s, folder, said=module.saved_line: (said(s, folder), s == step and die())
else:
    write = resume._write_state
    def _write(checkpoint, prefix):
        write(checkpoint, prefix)
        if f".tmp-step-{step:09d}-" in prefix:
            die()
    resume._write_state = _write
sys.exit(main(argv))
"""


KILLS = {"pretrain": (("saved", 2), ("writing", 3)), "finetune": (("saved", 2), ("writing", 3))}


@pytest.mark.slow
@pytest.mark.parametrize("command", ["pretrain", "finetune"])
def test_kill_9_after_a_checkpoint_resumes_to_the_uninterrupted_weights(tiny_bert, data, tmp_path, capsys, command):
    """kill -9 just after the checkpoint of step 2, and while writing the one of step 3 (--keep-checkpoints 0 for
    finetune: a resumable state is kept until the run ends): the same command run again finishes with the weights and
    training state of a run never interrupted."""
    argv = {"pretrain": lambda out, *extra: pretrain_args(tiny_bert, data, out, *extra, steps=4),
            "finetune": lambda out, *extra: finetune_args(tiny_bert, data["train"], out, "--valid", str(data["train"]),
                                                      *extra, steps=4)}[command]
    keep = ["--keep-checkpoints", "0"] if command == "finetune" else []
    final = "classifier.keras" if command == "finetune" else "model.keras"
    assert main(argv(tmp_path / "straight")) == 0, capsys.readouterr().err
    inputs = _untouched(data)
    for point, step in KILLS[command]:
        out = tmp_path / f"{point}-{step}"
        killed = subprocess.run([sys.executable, "-c", KILLED_AT, point, str(step), *argv(out, *keep)], cwd=ROOT,
                                env=child_env(), capture_output=True, text=True)
        assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
        assert (out / "checkpoints" / "latest").read_text().strip() == "step-000000002"
        capsys.readouterr()
        assert main(argv(out, *keep)) == 0, capsys.readouterr().err
        assert "resumed from step 2" in capsys.readouterr().out
        assert_same_arrays(keras_file_weights(tmp_path / "straight" / final), keras_file_weights(out / final))
        if keep:
            assert not (out / "checkpoints").exists()
        else:
            assert_same_arrays(training_state(tmp_path / "straight"), training_state(out))
        assert not [p for p in out.rglob("*.tmp-*")], "a killed run's temporary was left"
    assert _untouched(data) == inputs


@pytest.mark.slow
def test_keep_checkpoints_0_and_eval_every_0_are_refused_at_parse_time_and_a_huge_eval_every_runs(
        tiny_bert, data, tmp_path, capsys):
    """pretrain --keep-checkpoints 0 and finetune --eval-every 0 (or less) are refused by the parser in one line;
    an --eval-every past the end of training scores at the end of training alone."""
    for argv, option in ((pretrain_args(tiny_bert, data, tmp_path / "p", "--keep-checkpoints", "0"), "--keep-checkpoints"),
                         (finetune_args(tiny_bert, data["train"], tmp_path / "f", "--valid", str(data["train"]),
                                    "--eval-every", "0"), "--eval-every"),
                         (finetune_args(tiny_bert, data["train"], tmp_path / "f", "--valid", str(data["train"]),
                                    "--eval-every", "-3"), "--eval-every")):
        with pytest.raises(SystemExit) as stopped:
            main(argv)
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert stopped.value.code == 2 and f"argument {option}: must be a positive integer" in err, err
    assert not os.path.lexists(tmp_path / "p") and not os.path.lexists(tmp_path / "f")
    assert main(finetune_args(tiny_bert, data["train"], tmp_path / "f", "--valid", str(data["train"]), "--eval-every",
                          str(10 ** 20))) == 0, capsys.readouterr().err
    metrics = json.loads((tmp_path / "f" / "metrics.json").read_text())
    # (2 steps: half an epoch) no scoring within the run, the one at its end chose the weights
    assert metrics["evaluations"] == [] and metrics["selected_step"] == 2, metrics


@pytest.mark.slow
@pytest.mark.parametrize("threshold", ["0", "1", "-0.5", "1.5", "nan", "NaN", "inf", "-inf", "0.5x"])
def test_a_threshold_out_of_0_1_is_refused_by_finetune_and_in_a_runs_finetune_json(tiny_bert, data, runs, tmp_path,
                                                                                   capsys, threshold):
    """--threshold 0, 1, negative, above 1, NaN, infinite or no number: refused in one line before any work; the
    same in a run's finetune.json (hand-edited): refused by predict and export, naming the file."""
    err = _refused(capsys, finetune_args(tiny_bert, data["multi"], tmp_path / "new", "--task", "multilabel",
                                     f"--threshold={threshold}"))   # (= : argparse reads "-inf" as an option)
    assert f"--threshold {threshold!r} is not global, per-label or a number in (0, 1)" in err
    assert not os.path.lexists(tmp_path / "new")
    run = _copy(runs["multi"], tmp_path)
    settings = json.loads((run / "finetune.json").read_text())
    try:
        value = float(threshold)
    except ValueError:
        value = threshold
    for written in (value, [settings["threshold"], value]):
        (run / "finetune.json").write_text(json.dumps({**settings, "threshold": written}))
        finished, inputs = snapshot(run), _untouched(data)
        err = _refused(capsys, ["predict", "--run", str(run), "--input", str(data["multi"]), "--output",
                                str(tmp_path / "p.jsonl")])
        assert f"finetune.json: 'threshold' is {written!r}, not a number in (0, 1) or one per label" in err, err
        err = _refused(capsys, ["export", "--run", str(run), "--out", str(tmp_path / "served")])
        assert "'threshold'" in err and not os.path.lexists(tmp_path / "served")
        assert snapshot(run) == finished and _untouched(data) == inputs and not os.path.lexists(tmp_path / "p.jsonl")


@pytest.mark.slow
def test_unknown_and_repeated_multilabel_labels_in_valid_and_predict_input(tiny_bert, data, runs, tmp_path, capsys):
    """An unknown label in --valid or predict --input is refused naming file:line and a fix the command has (was, for
    predict: "add them to --labels", an option predict does not have); a label given twice in a line counts once."""
    unknown = write_lines(tmp_path / "unknown.jsonl", [{"text": "w1 w2", "labels": ["a"]}, {"text": "w3", "labels": ["a", "zz"]}])
    err = _refused(capsys, finetune_args(tiny_bert, data["multi"], tmp_path / "new", "--task", "multilabel", "--valid",
                                     str(unknown)))
    assert f"{unknown}:2: unknown label(s) ['zz']; the labels are ['a', 'b']: fix the data, or add them to --labels" in err
    assert not os.path.lexists(tmp_path / "new")
    predict = ["predict", "--run", str(runs["multi"]), "--output", str(tmp_path / "p.jsonl"), "--metrics",
               str(tmp_path / "m.json"), "--quiet", "--overwrite", "--input"]
    err = _refused(capsys, [*predict, str(unknown)])
    assert f"{unknown}:2: unknown label(s) ['zz']; the labels are ['a', 'b']: the run was trained on these alone; " \
           "fix the labels, or drop the 'labels' fields to predict only" in err, err
    assert not os.path.lexists(tmp_path / "p.jsonl") and not os.path.lexists(tmp_path / "m.json")
    once = write_lines(tmp_path / "once.jsonl", [{"text": "w1 w2", "labels": ["a"]}, {"text": "w3", "labels": ["a", "b"]}])
    twice = write_lines(tmp_path / "twice.jsonl", [{"text": "w1 w2", "labels": ["a", "a"]},
                                              {"text": "w3", "labels": ["b", "a", "b"]}])
    scores = []
    for given in (once, twice):
        assert main([*predict, str(given)]) == 0, capsys.readouterr().err
        scores.append(json.loads((tmp_path / "m.json").read_text()))
    assert scores[0] == scores[1] and scores[1]["per_class"]["a"]["support"] == 2


def _encoded(tmp_path, name, lines, newline=b"\n"):
    path = tmp_path / name
    path.write_bytes(b"".join(line + newline for line in lines))
    return path


@pytest.mark.slow
def test_crlf_lines_just_work_and_nul_or_latin1_bytes_are_one_line_naming_option_file_and_line(
        tiny_bert, data, runs, tmp_path, capsys):
    """CRLF line ends in --train, --valid and predict --input read as LF ones (the same predictions); a NUL byte (a
    file saved as UTF-16 without its byte-order mark, a binary file) and a Latin-1 byte are refused in one line
    naming the option, the file and the line (was for NUL: "not a JSON object (Invalid control character ...)"
    naming no option, or "Expecting value" for UTF-16)."""
    lines = [json.dumps({"text": f"w{i} w{i + 1} w{i + 2}", "label": "ab"[i % 2]}).encode() for i in range(8)]
    crlf = _encoded(tmp_path, "crlf.jsonl", lines, b"\r\n")
    out = tmp_path / "run"
    assert main(finetune_args(tiny_bert, crlf, out, "--valid", str(crlf))) == 0, capsys.readouterr().err
    predictions = {}
    for given in (data["train"], crlf):
        assert main(["predict", "--run", str(runs["finetune"]), "--input", str(given), "--output",
                     str(tmp_path / f"{given.stem}.out"), "--quiet"]) == 0, capsys.readouterr().err
        predictions[given] = [{k: v for k, v in json.loads(line).items() if k != "source"}
                              for line in (tmp_path / f"{given.stem}.out").read_text().splitlines()]
    assert predictions[crlf] == predictions[data["train"]]
    capsys.readouterr()
    utf16 = tmp_path / "utf16.jsonl"
    utf16.write_bytes((b"\n".join(lines) + b"\n").decode().encode("utf-16-le"))
    bad = {"nul.jsonl": (_encoded(tmp_path, "nul.jsonl", [*lines[:3], b'{"text": "w1\0 w2", "label": "a"}', *lines[3:]]),
                         "line 4 holds a NUL byte (column 13)"),
           "utf16.jsonl": (utf16, "line 1 holds a NUL byte (column 2)"),
           "latin1.jsonl": (_encoded(tmp_path, "latin1.jsonl", [*lines[:3], b'{"text": "caf\xe9", "label": "a"}',
                                                                *lines[3:]]), "line 4 is not UTF-8 (byte b'\\xe9'")}
    inputs = _untouched(data)
    for path, says in bad.values():
        for option, argv in (("train", finetune_args(tiny_bert, path, tmp_path / "new")),
                             ("valid", finetune_args(tiny_bert, data["train"], tmp_path / "new", "--valid", str(path))),
                             ("input", ["predict", "--run", str(runs["finetune"]), "--input", str(path), "--output",
                                        str(tmp_path / "bad.out")])):
            err = _refused(capsys, argv)
            assert f"--{option} {str(path)!r}: {says}" in err and "save it as UTF-8" in err, err
    assert not os.path.lexists(tmp_path / "new") and not os.path.lexists(tmp_path / "bad.out")
    assert _untouched(data) == inputs


BACKEND_PREDICT = """
import json, sys, numpy as np, keras, bert4long
bert4long.register_keras_classes()
model = keras.models.load_model(sys.argv[1])
ids = np.array([[2, 10, 11, 12, 3, 0, 0, 0], [2, 20, 21, 3, 0, 0, 0, 0]], "int32")
print(json.dumps([keras.backend.backend(), np.asarray(model.predict([ids, np.zeros_like(ids)], verbose=0)).tolist()]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_a_classifier_saved_on_tensorflow_loads_on_another_backend_as_the_cli_says(tiny_bert, data, runs, tmp_path,
                                                                                   capsys, backend):
    """predict under KERAS_BACKEND=jax or torch is refused in one line naming the Python API; that API (as the line
    says: register_keras_classes first; was: keras.models.load_model alone, which fails on bert4long's classes) loads
    the classifier.keras finetune wrote on TensorFlow and gives TensorFlow's logits."""
    pytest.importorskip(backend)
    run = runs["finetune"]
    finished, inputs = snapshot(run), _untouched(data)
    env = child_env(KERAS_BACKEND=backend)
    refused = subprocess.run([sys.executable, "-m", "bert4long.cli", "predict", "--run", str(run), "--input",
                              str(data["train"]), "--output", str(tmp_path / "p.jsonl")], cwd=ROOT, env=env,
                             capture_output=True, text=True)
    err = refused.stderr.strip().splitlines()
    assert refused.returncode == 1 and err[-1].startswith("bert4long predict: error: "), refused.stderr[-2000:]
    assert f"(this process runs {backend})" in err[-1] and "bert4long.register_keras_classes()" in err[-1], err[-1]
    loaded = subprocess.run([sys.executable, "-c", BACKEND_PREDICT, str(run / "classifier.keras")], cwd=ROOT, env=env,
                            capture_output=True, text=True)
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    name, logits = json.loads(loaded.stdout.strip().splitlines()[-1])
    import keras

    from bert4long.cli.run_folder import load_final_model

    ids = np.array([[2, 10, 11, 12, 3, 0, 0, 0], [2, 20, 21, 3, 0, 0, 0, 0]], "int32")
    expected = load_final_model(str(run / "classifier.keras")).predict([ids, np.zeros_like(ids)], verbose=0)
    assert name == backend and keras.backend.backend() == "tensorflow"
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-5)
    assert snapshot(run) == finished and _untouched(data) == inputs and not os.path.lexists(tmp_path / "p.jsonl")


@pytest.mark.slow
def test_bfloat16_is_a_serving_precision_not_a_training_one(tiny_bert, data, runs, tmp_path, capsys):
    """finetune --precision bfloat16 is refused by the parser (its training precisions are mixed_*); export
    --precision bfloat16 serves a fine-tuned classifier whose probabilities stay float32 and near float32's."""
    with pytest.raises(SystemExit):
        main(finetune_args(tiny_bert, data["train"], tmp_path / "new", "--precision", "bfloat16"))
    assert "invalid choice: 'bfloat16'" in capsys.readouterr().err and not os.path.lexists(tmp_path / "new")
    run = runs["finetune"]
    finished = snapshot(run)
    served = {}
    for precision in ("float32", "bfloat16"):
        assert main(["export", "--run", str(run), "--out", str(tmp_path / precision), "--precision", precision]) == 0, \
            capsys.readouterr().err
        signature = tf.saved_model.load(str(tmp_path / precision)).signatures["serving_default"]
        ids = tf.constant([[2, 10, 11, 12, 3, 0, 0, 0]], tf.int32)
        served[precision] = signature(**{k: ids if "token" in k.lower() else tf.zeros_like(ids)
                                         for k in signature.structured_input_signature[1]})
    assert served["bfloat16"]["probabilities"].dtype == tf.float32
    np.testing.assert_allclose(served["bfloat16"]["probabilities"], served["float32"]["probabilities"], atol=0.05)
    assert snapshot(run) == finished
