"""`finetune --class-weight`: the weighted loss is PyTorch's ``CrossEntropyLoss(weight=w)`` (checked against numpy),
``balanced`` is scikit-learn's, and a weights file is refused in one line before the model is built."""
import json

import keras
import numpy as np
import pytest

from bert4long.cli import finetune, main
from bert4long.training import make_optimizer
from bert4long.training.finetune import balanced_class_weights, compile_finetune


def test_the_weighted_loss_is_the_weighted_mean_of_the_examples_losses_and_accuracy_is_not_weighted(rng):
    """An imbalanced batch (six of class 0, two of 1, one of 2): the compiled loss equals sum(w[y] * l) / sum(w[y])
    of numpy's per-example cross-entropy, and accuracy counts every example once."""
    x = rng.normal(size=(9, 4)).astype("float32")
    y = np.array([0, 0, 0, 0, 0, 0, 1, 1, 2])
    weights = np.array([0.5, 1.5, 4.0])
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    compile_finetune(model, make_optimizer(1e-3, 4), jit_compile=False, class_weight=weights.tolist())
    result = model.evaluate(x, y, batch_size=len(x), verbose=0, return_dict=True)
    logits = model.predict(x, verbose=0).astype("float64")
    log_probs = logits - logits.max(1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(1, keepdims=True))
    losses = -log_probs[np.arange(len(y)), y]
    np.testing.assert_allclose(result["loss"], (weights[y] * losses).sum() / weights[y].sum(), rtol=1e-5)
    assert abs(result["loss"] - losses.mean()) > 1e-3   # (the weights change it)
    assert result["accuracy"] == pytest.approx((logits.argmax(1) == y).mean())


def test_balanced_weights_are_scikit_learns():
    sklearn_weights = pytest.importorskip("sklearn.utils.class_weight")
    y = np.array([0] * 7 + [1] * 2 + [3] * 1)   # label 2 has no example: weight 1, never used
    expected = sklearn_weights.compute_class_weight("balanced", classes=np.array([0, 1, 3]), y=y)
    np.testing.assert_allclose(balanced_class_weights(y, 4)[[0, 1, 3]], expected)
    assert balanced_class_weights(y, 4)[2] == 1.0


def _write(path, lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


@pytest.fixture
def imbalanced(tmp_path):
    return _write(tmp_path / "train.jsonl", [{"text": f"w{i} w{i + 1} w3", "label": "a" if i < 5 else "b"}
                                             for i in range(7)])


def _finetune(checkpoint, train, out, *extra):
    return ["finetune", "--checkpoint", checkpoint, "--train", train, "--seq-len", "8", "--batch-size", "2",
            "--no-xla", "--quiet", "--out", str(out), *extra]


@pytest.mark.slow
def test_balanced_class_weights_are_recorded_and_resume_refuses_others(tiny_bert, imbalanced, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(_finetune(tiny_bert[1], imbalanced, out, "--steps", "2", "--class-weight", "balanced")) == 0
    record = json.loads((out / "finetune.json").read_text())
    assert record["class_weight_option"] == "balanced"
    assert record["class_weight"] == pytest.approx({"a": 7 / (2 * 5), "b": 7 / (2 * 2)})
    weights = tmp_path / "weights.json"
    weights.write_text('{"b": 3}')
    capsys.readouterr()
    assert main(_finetune(tiny_bert[1], imbalanced, out, "--steps", "3", "--class-weight", str(weights))) == 1
    assert "class_weight" in capsys.readouterr().err   # a change of the training loss is no silent resume


@pytest.mark.parametrize("text, message", [
    ('{"a": 1, "c": 2}', "names label(s) ['c'] the run does not have"),
    ('{"a": 0}', "label 'a' has weight 0; give a positive number"),
    ('{"a": -1.5}', "label 'a' has weight -1.5"),
    ('{"a": "2"}', "label 'a' has weight '2'"),
    ('{"a": true}', "label 'a' has weight True"),
    ('[1, 2]', "holds list, not an object"),
    ("{a: 1}", "is not JSON"),
])
def test_a_bad_weights_file_is_refused_in_one_line(tiny_bert, imbalanced, tmp_path, capsys, text, message):
    weights = tmp_path / "weights.json"
    weights.write_text(text)
    assert main(_finetune(tiny_bert[1], imbalanced, tmp_path / "run", "--class-weight", str(weights))) == 1
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "run" / "finetune.json").exists()


def test_class_weights_are_refused_for_token_labelling_and_a_missing_file(tiny_bert, tmp_path, capsys):
    tags = _write(tmp_path / "tags.jsonl", [{"tokens": ["w1", "w2"], "tags": ["B-X", "O"]}])
    assert main(["finetune", "--task", "tokens", "--checkpoint", tiny_bert[1], "--train", tags,
                 "--class-weight", "balanced", "--out", str(tmp_path / "run")]) == 1
    assert "--class-weight is for --task classify" in capsys.readouterr().err
    assert main(_finetune(tiny_bert[1], tags, tmp_path / "run", "--class-weight", str(tmp_path / "none.json"))) == 1
    assert "none.json': no such file; pass balanced, or a JSON file" in capsys.readouterr().err


@pytest.mark.slow
def test_class_weights_large_enough_to_overflow_the_loss_are_named_as_its_likely_cause(tiny_bert, imbalanced, tmp_path,
                                                                                       capsys):
    """A loss that became NaN/inf under huge --class-weight weights names them (was: "Lower --learning-rate" alone);
    with no weights the message stays the learning rate's."""
    weights = tmp_path / "weights.json"
    weights.write_text('{"a": 1e39, "b": 2}')   # past float32's 3.4e38: inf / inf in the loss
    assert main(_finetune(tiny_bert[1], imbalanced, tmp_path / "run", "--steps", "2", "--class-weight",
                          str(weights))) == 1
    err = capsys.readouterr().err
    assert "The loss became NaN/inf at step 1" in err and len(err.strip().splitlines()) == 1, err
    assert err.rstrip().endswith("The likely cause is --class-weight: its weights reach 1e+39, and a loss weighed that "
                                 "heavily can overflow; give weights nearer 1 (such as --class-weight balanced) and run "
                                 "again (or lower --learning-rate)."), err
    assert finetune._class_weight_cause(None) is None and finetune._class_weight_cause([1.0, 9.0]) is None
