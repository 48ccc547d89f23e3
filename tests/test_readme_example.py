"""The README's first screen runs as written: its Python example (built-in model, a [MASK] 1,000 tokens in) and
its install line (only what the main job needs)."""
import ast
import importlib.util
import json
import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def blocks(language):
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_the_first_command_installs_only_what_the_main_job_needs():
    first = blocks("bash")[0]
    assert "pip install -e . " in first and "[test]" not in first and "torch" not in first
    assert first.strip().splitlines()[-1].split("#")[0].strip() == "bert4long pretrain"


def test_the_python_example_runs_as_written(capsys):
    if importlib.util.find_spec("gensim") is None:   # its test data only (installed --no-deps: not importable)
        pytest.skip("needs gensim's test articles: pip install --no-deps gensim")
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
    assert namespace["token_ids"][1000] == namespace["tokenizer"].mask_id and 1000 > 4 * trained
    assert len(namespace["token_ids"]) == 1024
    # the README shows what the example printed
    assert printed in README.read_text(encoding="utf-8")
