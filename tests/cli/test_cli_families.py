"""The bert4long command on Hugging Face folders of RoBERTa, Longformer, ModernBERT and BigBird, with their own
tokenizers.

The folders are the shared tiny ones (`conftest.tiny_family`): a tiny random model saved by transformers' own
class and a byte-level BPE tokenizer trained with the `tokenizers` library (vocab.json + merges.txt for RoBERTa /
Longformer / BigBird (block-sparse attention at 24 tokens, blocks of 2), a tokenizer.json with [CLS]/[SEP]
templates for ModernBERT). The commands run in-process through `bert4long.cli.main`: finetune on a Longformer
must give the first token global attention, export must serve the Python model's numbers (that pretrain feeds
each tokenizer's own ids: tests/families/test_family_suite.py).
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import CORPUS

import bert4long.training
from bert4long.cli import main
from bert4long.models import build_transformer_model
from bert4long.tokenizers import load_tokenizer

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
SEQ_LEN = 24


@pytest.fixture(scope="module")
def folders(tiny_family):
    """The shared tiny folders (`conftest.tiny_family`)."""
    return {name: tiny_family(name).checkpoint for name in ("roberta", "longformer", "modernbert", "big_bird")}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("family_data")
    corpus = root / "corpus.txt"
    corpus.write_text("\n\n".join(CORPUS), encoding="utf-8")
    train = root / "train.jsonl"
    train.write_text("".join(json.dumps({"text": text, "label": "city" if "city" in text else "other"}) + "\n"
                             for text in CORPUS[:4] + ["A short one.", "Rome."]), encoding="utf-8")
    tagged = root / "tagged.jsonl"
    tagged.write_text("".join(json.dumps({"tokens": words, "tags": ["LOC" if w[0].isupper() else "O" for w in words]})
                              + "\n" for words in (["Paris", "is", "a", "city"], ["the", "fox", "saw", "Rome"],
                                                   ["Berlin", "and", "Rome"])), encoding="utf-8")
    return {"corpus": str(corpus), "train": str(train), "tagged": str(tagged)}


def run(argv, capsys):
    status = main(argv)
    out, err = capsys.readouterr()
    assert status == 0, out[-2000:] + err[-3000:]
    return out, err


@pytest.mark.slow
def test_longformer_finetune_global_cls_predict_export_info(folders, data, tmp_path, capsys, monkeypatch):
    import keras
    import tensorflow as tf

    folder = folders["longformer"]
    common = ["finetune", "--checkpoint", folder, "--train", data["train"], "--seq-len", str(SEQ_LEN), "--steps", "1",
              "--batch-size", "2", "--save-every", "1", "--no-xla", "--quiet"]
    run(common + ["--out", str(tmp_path / "global")], capsys)
    model = keras.models.load_model(str(tmp_path / "global" / "classifier.keras"))
    mask = model.get_layer("Global-Attention-Mask")
    assert mask.positions == [0] and mask.pad_token_id == 1
    ids = np.array([[0, 50, 51, 2, 1, 1]], "int32")
    assert np.asarray(mask(ids)).tolist() == [[2, 1, 1, 1, 0, 0]]
    assert {"vocab.json", "merges.txt", "finetune.json"} <= set(os.listdir(tmp_path / "global"))
    asked = []

    def stop(*args, **kwargs):   # --no-global-cls reaches build_classifier (whose off switch the test below checks)
        asked.append(kwargs["global_tokens"])
        raise ValueError("stopped")

    with monkeypatch.context() as patch:
        patch.setattr(bert4long.training, "build_classifier", stop)
        assert main(common + ["--out", str(tmp_path / "local"), "--no-global-cls"]) == 1
    assert asked == [None] and "stopped" in capsys.readouterr().err

    predictions = tmp_path / "predictions.jsonl"
    run(["predict", "--run", str(tmp_path / "global"), "--input", data["train"], "--output", str(predictions),
         "--quiet"], capsys)
    rows = [json.loads(line) for line in predictions.read_text().splitlines()]
    assert len(rows) == 6 and {row["predicted_label"] for row in rows} <= {"city", "other"}
    embeddings = tmp_path / "embeddings.jsonl"
    run(["predict", "--checkpoint", folder, "--input", data["train"], "--output", str(embeddings), "--seq-len", "16",
         "--quiet"], capsys)
    assert len(json.loads(embeddings.read_text().splitlines()[0])["embedding"]) == 32

    out, _ = run(["info", folder], capsys)
    assert "longformer.encoder.layer.0.attention.self.query_global.weight [32, 32]" in out
    assert "tokenizer: HuggingFaceTokenizer" in out and "<s> 0, </s> 2, pad 1, mask 4" in out and "MLM" in out

    run(["finetune", "--task", "tokens", "--checkpoint", folder, "--train", str(data["tagged"]), "--seq-len", "16",
         "--steps", "1", "--batch-size", "2", "--save-every", "1", "--no-xla", "--quiet",
         "--out", str(tmp_path / "tagger")], capsys)
    tagger = keras.models.load_model(str(tmp_path / "tagger" / "tagger.keras"))
    assert tagger.get_layer("Global-Attention-Mask").positions == [0]
    tags = tmp_path / "tags.jsonl"
    out, _ = run(["predict", "--run", str(tmp_path / "tagger"), "--input", str(data["tagged"]), "--output",
                  str(tags), "--quiet"], capsys)
    first = json.loads(tags.read_text().splitlines()[0])
    assert len(first["predicted_tags"]) == len(first["tags"]) == len(first["tokens"]) == 4
    assert "entity F1" in out and "token accuracy" in out   # labelled input: scored

    served = tmp_path / "served"
    out, _ = run(["export", "--checkpoint", folder, "--out", str(served)], capsys)
    assert "sequence_output" in out
    status = main(["export", "--checkpoint", folder, "--out", str(tmp_path / "text"), "--raw-text"])
    err = capsys.readouterr().err
    assert status == 1 and "--raw-text tokenizes in the graph with WordPiece only" in err and "load_tokenizer" in err
    tokenizer = load_tokenizer(folder)
    ids = np.full((2, 20), tokenizer.pad_id, "int32")
    for row, text in enumerate(["A city and a fox.", CORPUS[0]]):
        encoded = tokenizer.encode(text, maxlen=20)[0]
        ids[row, :len(encoded)] = encoded
    expected = np.asarray(build_transformer_model(checkpoint_path=folder).predict([ids, ids * 0], verbose=0))
    np.save(tmp_path / "ids.npy", ids)
    script = ("import sys, numpy as np, tensorflow as tf\n"
              "serve = tf.saved_model.load(sys.argv[1]).signatures['serving_default']\n"
              "ids = tf.constant(np.load(sys.argv[2]))\n"
              "np.save(sys.argv[3], serve(token_ids=ids, segment_ids=ids * 0)['sequence_output'].numpy())\n")
    done = subprocess.run([sys.executable, "-c", script, str(served), str(tmp_path / "ids.npy"),
                           str(tmp_path / "served.npy")], capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    assert np.abs(np.load(tmp_path / "served.npy") - expected).max() < 1e-5

    # the fine-tuned classifier itself, global <s> included, served from its run folder
    run(["export", "--run", str(tmp_path / "global"), "--out", str(tmp_path / "served_run")], capsys)
    logits = tf.saved_model.load(str(tmp_path / "served_run")).signatures["serving_default"](
        token_ids=tf.constant(ids), segment_ids=tf.constant(ids * 0))["logits"]
    assert np.abs(logits.numpy() - model.predict([ids, ids * 0], verbose=0)).max() < 1e-5


def test_longformer_classifier_global_tokens_reach_the_model(folders):
    """build_classifier's default on a Longformer equals the encoder fed mask 2 on <s> (and not the local one)."""
    import keras

    from bert4long.training import build_classifier

    folder = folders["longformer"]
    ids = np.array([[0, 40, 41, 42, 43, 44, 45, 46, 47, 48, 2, 1, 1]], "int32")
    cls_state = {}
    for name, tokens in (("auto", "auto"), ("none", None)):
        classifier = build_classifier(None, folder, num_labels=2, global_tokens=tokens)
        probe = keras.Model(classifier.inputs, classifier.get_layer("Classifier-CLS").output)
        cls_state[name] = np.asarray(probe([ids, ids * 0]))
    encoder = build_transformer_model(checkpoint_path=folder, attention_mask_input=True)
    mask = np.where(ids == 1, 0, 1)
    mask[:, 0] = 2
    expected = np.asarray(encoder([ids, ids * 0, mask]))[:, 0]
    assert np.abs(cls_state["auto"] - expected).max() < 1e-5
    assert np.abs(cls_state["none"] - expected).max() > 1e-3
    with pytest.raises(ValueError, match="needs a Longformer"):
        build_classifier(None, folders["roberta"], num_labels=2, global_tokens=[0])


@pytest.mark.slow
def test_modernbert_finetune_and_predict_without_segment_ids(folders, data, tmp_path, capsys):
    folder = folders["modernbert"]
    run(["finetune", "--checkpoint", folder, "--train", data["train"], "--seq-len", str(SEQ_LEN), "--steps", "2",
         "--batch-size", "2", "--save-every", "2", "--no-xla", "--quiet", "--pooling", "chunks", "--chunks", "2",
         "--out", str(tmp_path / "run")], capsys)
    assert "tokenizer.json" in os.listdir(tmp_path / "run")
    predictions = tmp_path / "predictions.jsonl"
    run(["predict", "--run", str(tmp_path / "run"), "--input", data["train"], "--output", str(predictions),
         "--quiet"], capsys)
    assert len(predictions.read_text().splitlines()) == 6
    out, err = run(["evaluate", "--checkpoint", folder, "--corpus", data["corpus"], "--seq-len", str(SEQ_LEN),
                    "--max-sequences", "4", "--batch-size", "2"], capsys)
    assert "tokenizer: HuggingFaceTokenizer" in err and json.loads(out.splitlines()[-1])["predictions"] > 0
    out, _ = run(["info", folder], capsys)
    assert "tokenizer: HuggingFaceTokenizer" in out and "[CLS]" in out and "heads: MLM" in out


def test_a_tokenizer_that_pads_with_another_id_is_refused(folders, data, tmp_path, capsys):
    import shutil

    folder = tmp_path / "mismatched"
    shutil.copytree(folders["longformer"], folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "pad_token_id": 0}))
    status = main(["pretrain", "--checkpoint", str(folder), "--corpus", data["corpus"], "--seq-len", "16",
                   "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert status == 1 and "pads with id 1" in err and "pad_token_id=0" in err
    status = main(["pretrain", "--checkpoint", folders["longformer"], "--corpus", data["corpus"], "--seq-len", "80",
                   "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert status == 1 and "use --seq-len 64 or less" in err and "hierarchical" not in err
    status = main(["pretrain", "--checkpoint", folders["longformer"], "--corpus", data["corpus"], "--uncased", "--seq-len", "16",
                   "--out", str(tmp_path / "run")])
    assert status == 1 and "--uncased applies to WordPiece vocabularies" in capsys.readouterr().err


def test_window_pooling_skips_windows_of_the_models_padding_id():
    from bert4long.training.finetune import MeanOverChunks

    vectors = np.array([[1.0], [3.0], [100.0]], "float32")
    ids = np.array([[[0, 5], [0, 6], [1, 1]]], "int32")          # the last window is RoBERTa padding (id 1)
    assert np.asarray(MeanOverChunks(pad_token_id=1)([vectors, ids])).tolist() == [[2.0]]   # (1 + 3) / 2: exact
    assert np.asarray(MeanOverChunks()([vectors, ids]))[0, 0] > 30   # a BERT pad id (0) would count it


def test_masker_of_a_sentencepiece_folder_never_masks_its_specials(tmp_path):
    """An ALBERT-style folder (a sentencepiece .model alone): the masker keeps [CLS]/[SEP]/<pad> out."""
    import io

    spm = pytest.importorskip("sentencepiece")
    from bert4long.data.masking import MLMMasker

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(CORPUS * 4), model_writer=model, vocab_size=60,
                                   user_defined_symbols=["[CLS]", "[SEP]", "[MASK]"], pad_id=3, minloglevel=2)
    (tmp_path / "spiece.model").write_bytes(model.getvalue())
    tokenizer = load_tokenizer(tmp_path)
    masker = MLMMasker.from_tokenizer(tokenizer, max_predictions=4)
    specials = [tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id, tokenizer.pad_id]
    assert masker.mask_id == tokenizer.token_to_id("[MASK]") and masker.special[specials].all()
    assert not np.isin(masker.random_pool, specials).any()


def test_token_labelling_pieces_are_the_words_read_inside_a_text(folders):
    """Words of a tagged text get the pieces they have inside the text (each after a space): transformers'
    is_split_into_words pieces for RoBERTa (which needs add_prefix_space=True for it)."""
    from bert4long.data.tagging import encode_tagged

    words = ["Paris", "and", "Berlin", "are", "cities", ";", "naïve", "😀", "<mask>"]
    encoded = {}
    for family in ("roberta", "modernbert"):
        tokenizer = load_tokenizer(folders[family])
        ids, _, weights, _ = encode_tagged(tokenizer, [words], [["O"] * len(words)], ["O"], 64)
        inside = [tokenizer.cls_id, *tokenizer.content_ids(" " + " ".join(words)), tokenizer.sep_id]
        encoded[family] = ids[0][: len(inside)].tolist()
        assert encoded[family] == inside and int(weights.sum()) == len(words), family
    reference = transformers.AutoTokenizer.from_pretrained(folders["roberta"], add_prefix_space=True)
    assert reference(words, is_split_into_words=True, split_special_tokens=True)["input_ids"] == encoded["roberta"]
