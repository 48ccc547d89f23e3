"""The smaller cases of issue 27: predict's temporary file cannot collide with an input, an existing --output
is refused without --overwrite, and export's --run counts as an input (--out R and --out R/served refused)."""
import json

import pytest
from safety_files import snapshot

from bert4long.cli import main


@pytest.fixture
def docs(tmp_path):
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "out.jsonl.tmp").write_text("a short document of text that predict reads whole")
    return folder


def _predict(tiny_bert, given, output, *extra):
    return main(["predict", "--checkpoint", tiny_bert[1], "--config", tiny_bert[0], "--vocab", tiny_bert[2],
                 "--input", str(given), "--output", str(output), "--quiet", *extra])


def test_predict_output_whose_temporary_name_is_the_input_keeps_the_input(tiny_bert, docs, capsys):
    given, output = docs / "out.jsonl.tmp", docs / "out.jsonl"
    before = snapshot(docs)
    assert _predict(tiny_bert, given, output) == 0, capsys.readouterr().err   # was: the input truncated
    after = snapshot(docs)
    assert after["out.jsonl.tmp"] == before["out.jsonl.tmp"] and sorted(after) == ["out.jsonl", "out.jsonl.tmp"]
    assert len(output.read_text().splitlines()) == 1 and oct(output.stat().st_mode & 0o777) != oct(0o600)


def test_predict_refuses_an_existing_output_file_unless_overwrite(tiny_bert, docs, capsys):
    given, output = docs / "out.jsonl.tmp", docs / "mine.jsonl"
    output.write_text("my results\n")
    before = snapshot(docs)
    assert _predict(tiny_bert, given, output) == 1   # was: replaced without a word
    err = capsys.readouterr().err.strip()
    assert f"Output file '{output}' exists already: pass --overwrite" in err and len(err.splitlines()) == 1, err
    assert snapshot(docs) == before
    assert _predict(tiny_bert, given, output, "--overwrite") == 0, capsys.readouterr().err
    assert [json.loads(line)["source"] for line in output.read_text().splitlines()] == ["out.jsonl.tmp"]


@pytest.mark.parametrize("inside", ["", "served"])
def test_export_out_may_not_be_or_sit_in_its_run(tiny_bert, tmp_path, capsys, inside):
    run = tmp_path / "run"
    run.mkdir()
    (run / "finetune.json").write_text("{}")
    (run / "NOTES.txt").write_text("mine")
    before = snapshot(tmp_path)
    out = run / inside if inside else run
    assert main(["export", "--run", str(run), "--out", str(out), "--overwrite"]) == 1
    err = capsys.readouterr().err.strip()
    expected = "is inside the input folder" if inside else "is the folder of the input"
    assert expected in err and len(err.splitlines()) == 1, err   # was: the run replaced by the SavedModel
    assert snapshot(tmp_path) == before


def test_float_ids_and_empty_sequences_are_refused_before_an_xla_step(tiny_bert):
    import numpy as np

    from bert4long.models import build_transformer_model
    from bert4long.models.checked import check_inputs

    model = build_transformer_model(tiny_bert[0], tiny_bert[1])
    segments = np.zeros((1, 3), "int32")
    with pytest.raises(ValueError, match=r"'Input-Token' holds .*5\.7.* not a whole number.*dtype='int32'"):
        check_inputs(model, [np.array([[2.0, 5.7, 3.0]]), segments])   # was: read as 5
    check_inputs(model, [np.array([[2.0, 5.0, 3.0]]), segments])       # whole floats are ids as before
    with pytest.raises(ValueError, match=r"has 0 tokens per sequence"):
        check_inputs(model, [np.zeros((1, 0), "int32"), np.zeros((1, 0), "int32")])


def test_float_ids_that_are_not_whole_are_refused_eagerly_in_tf_function_and_fit(tiny_bert):
    import numpy as np
    import tensorflow as tf

    from bert4long.models import build_transformer_model

    model = build_transformer_model(tiny_bert[0], tiny_bert[1])
    tokens, whole, segments = np.array([[2.0, 5.7, 3.0]]), np.array([[2.0, 5.0, 3.0]]), np.zeros((1, 3))
    refused = pytest.raises(tf.errors.InvalidArgumentError,
                            match=r"Input \\?'Input-Token\\?' holds a value that is not a whole number.*int32")
    expected = model([whole.astype("int32"), segments.astype("int32")])
    np.testing.assert_array_equal(model([whole, segments]), expected)   # whole floats are ids as before
    with refused:
        model([tokens, segments])   # was: read as 5 (eager)
    with refused:
        tf.function(lambda t, s: model([t, s]))(tf.constant(tokens), tf.constant(segments))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"Input-Segment\\?' holds a value that is not a whole"):
        model([whole, segments + 0.5])
    model.compile(optimizer="sgd", loss="mse", jit_compile=False)
    target = np.zeros(expected.shape)
    model.fit([whole, segments], target, verbose=0)
    with refused:
        model.fit([tokens, segments], target, verbose=0)
