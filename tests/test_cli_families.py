"""The bert4long command on Hugging Face folders of RoBERTa, Longformer, ModernBERT and BigBird, with their own
tokenizers.

Each folder holds a tiny random model saved by transformers' own class and a byte-level BPE tokenizer trained
here with the `tokenizers` library (vocab.json + merges.txt for RoBERTa / Longformer / BigBird (block-sparse
attention at 24 tokens, blocks of 2; its released tokenizer is sentencepiece), a tokenizer.json with
[CLS]/[SEP] templates for ModernBERT), saved by transformers' tokenizer classes. The commands run in-process
through `bert4long.cli.main`: pretrain must feed the tokenizer's own ids (mask, padding, start), finetune on a
Longformer must give the first token global attention, export must serve the Python model's numbers.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import bert4long.training
from bert4long.cli import main
from bert4long.models import build_transformer_model
from bert4long.tokenizers import load_tokenizer

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
CORPUS = [
    "The quick brown fox jumps over the lazy dog. Long documents need long models, and long models need data.",
    "Paris and Berlin are cities; Rome is one too. A city has streets, and streets have long names.",
    "Numbers such as 2048 tokens and 4096 positions appear in papers about long documents.",
    "A dog and a fox met in the city. The fox was quick, the dog was lazy, the city was big.",
] * 3
ROBERTA_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]      # ids 0-4: pad 1, as RoBERTa's
MODERN_SPECIALS = ["<|endoftext|>", "<|padding|>", "[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]
SEQ_LEN = 24


def _bpe(specials):
    bpe = tokenizers.ByteLevelBPETokenizer()
    bpe.train_from_iterator(CORPUS, vocab_size=300, min_frequency=1, special_tokens=specials, show_progress=False)
    return bpe


def _roberta_style(folder, model_class, config_class, **config):
    """A RoBERTa-style folder: vocab.json + merges.txt tokenizer (saved by RobertaTokenizer) and the model."""
    folder.mkdir()
    _bpe(ROBERTA_SPECIALS).save_model(str(folder))
    tokenizer = transformers.RobertaTokenizer(vocab=str(folder / "vocab.json"), merges=str(folder / "merges.txt"))
    tokenizer.save_pretrained(folder)
    torch.manual_seed(0)
    size = len(tokenizer)
    model = getattr(transformers, model_class)(getattr(transformers, config_class)(
        vocab_size=size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
        pad_token_id=1, bos_token_id=0, eos_token_id=2, **config))
    model.save_pretrained(folder)
    return str(folder)


def _modernbert(folder):
    bpe = _bpe(MODERN_SPECIALS)
    ids = {t: bpe.token_to_id(t) for t in MODERN_SPECIALS}
    bpe._tokenizer.post_processor = tokenizers.processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])])
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer, cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]",
        unk_token="[UNK]", mask_token="[MASK]", bos_token="<|endoftext|>", eos_token="<|endoftext|>")
    fast.save_pretrained(folder)
    torch.manual_seed(0)
    config = transformers.ModernBertConfig(
        vocab_size=len(fast) + 3, hidden_size=32, intermediate_size=40, num_hidden_layers=3,  # a padded table
        num_attention_heads=2, local_attention=8, global_attn_every_n_layers=2, max_position_embeddings=128,
        pad_token_id=ids["[PAD]"], cls_token_id=ids["[CLS]"], sep_token_id=ids["[SEP]"],
        bos_token_id=ids["[CLS]"], eos_token_id=ids["[SEP]"])
    transformers.ModernBertForMaskedLM(config).save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    return {
        "roberta": _roberta_style(root / "roberta", "RobertaForMaskedLM", "RobertaConfig", max_position_embeddings=66,
                                  type_vocab_size=1),
        "longformer": _roberta_style(root / "longformer", "LongformerForMaskedLM", "LongformerConfig",
                                     attention_window=[4, 8], max_position_embeddings=66, type_vocab_size=1),
        "modernbert": _modernbert(root / "modernbert"),
        "big_bird": _roberta_style(root / "big_bird", "BigBirdForMaskedLM", "BigBirdConfig", block_size=2,
                                   num_random_blocks=1, max_position_embeddings=64, sep_token_id=2),
    }


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


@pytest.mark.parametrize("family", ["roberta", "longformer", "modernbert", "big_bird"])
def test_pretrain_feeds_the_tokenizers_ids(folders, data, family, tmp_path, capsys, monkeypatch):
    folder = folders[family]
    tokenizer = load_tokenizer(folder)
    fed = []
    original = bert4long.training.mlm_batches

    def recording(sequences, masker, *args, **kwargs):
        fed.append((np.asarray(sequences), masker, kwargs.get("segment_ids", True)))
        return original(sequences, masker, *args, **kwargs)

    monkeypatch.setattr(bert4long.training, "mlm_batches", recording)
    out_dir = str(tmp_path / "run")
    out, _ = run(["pretrain", "--checkpoint", folder, "--corpus", data["corpus"], "--seq-len", str(SEQ_LEN),
                  "--steps", "2", "--batch-size", "2", "--save-every", "2", "--holdout", "0", "--no-xla", "--quiet",
                  "--out", out_dir], capsys)
    assert "tokenizer: HuggingFaceTokenizer" in out and f"pad {tokenizer.pad_id}, mask {tokenizer.mask_id}" in out
    sequences, masker, segments = fed[0]
    assert segments == (family != "modernbert")
    assert masker.mask_id == tokenizer.token_to_id("<mask>" if family != "modernbert" else "[MASK]")
    assert all(masker.special[i] for i in (tokenizer.pad_id, tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id))
    assert not np.isin(masker.random_pool, [tokenizer.pad_id, tokenizer.cls_id, tokenizer.mask_id]).any()
    assert (sequences[:, 0] == tokenizer.cls_id).all()
    assert sequences[-1, -1] == tokenizer.pad_id and tokenizer.pad_id != 0  # the last row is padded with it
    x, _, weights = next(iter(original(sequences, masker, 2, segment_ids=segments)))
    assert (np.asarray(x[0]) == tokenizer.mask_id).any() and float(np.sum(weights)) > 0
    summary = json.load(open(os.path.join(out_dir, "summary.json")))
    assert np.isfinite(summary["logs"]["loss"])
    saved = os.listdir(out_dir)
    tokenizer_files = {"vocab.json", "merges.txt"} if family != "modernbert" else {"tokenizer.json"}
    assert tokenizer_files <= set(saved) and "model.keras" in saved
    if family == "roberta":
        assert "bert_model.ckpt.index" in saved
    else:  # a Hugging Face folder the next command (and transformers) reads, tokenizer included
        assert {"config.json", "model.safetensors"} <= set(saved)
        assert load_tokenizer(out_dir).encode("A city.") == tokenizer.encode("A city.")
        trained = build_transformer_model(checkpoint_path=out_dir, with_mlm="linear")
        ids = np.array([tokenizer.encode("A city and a fox.")[0]], "int32")
        logits = trained.predict([ids] if family == "modernbert" else [ids, ids * 0], verbose=0)
        assert logits.shape == (1, ids.shape[1], trained.output_shape[-1]) and np.isfinite(logits).all()


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
                           str(tmp_path / "served.npy")], capture_output=True, text=True, timeout=300,
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
    assert np.asarray(MeanOverChunks(pad_token_id=1)([vectors, ids])).tolist() == [[2.0]]
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
