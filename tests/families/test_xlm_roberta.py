"""XLM-RoBERTa folders (one `Family` declaration on the BERT builder) against transformers' PyTorch classes.

Tiny random models are saved by transformers' own ``XLMRobertaForMaskedLM`` / ``XLMRobertaModel`` with a learned
table of 66 = 64 + 2 positions and pad id 1, beside a sentencepiece model trained here (fairseq's ids). Inputs have
padding (id 1) inside the batch; outputs are compared at the real tokens. Tolerance: 1e-4 max abs in float32
(measured ~1e-6).
"""
import json
import os
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
sentencepiece = pytest.importorskip("sentencepiece")

from torch_reference import perturbed

from bert4long.checkpoints.hf_folder import write_huggingface_folder
from bert4long.cli import main
from bert4long.models import build_transformer_model
from bert4long.tokenizers import XLMRobertaTokenizer, load_tokenizer

TOL = 1e-4
POSITIONS = 64
CORPUS = ["Paris and Berlin are cities; Rome is one too. A city has streets, and streets have long names.",
          "The quick brown fox jumps over the lazy dog. Long documents need long models, and long models need data.",
          "Numbers such as 2048 tokens and 4096 positions appear in papers about long documents."] * 4


def tiny_config(vocab_size):
    return transformers.XLMRobertaConfig(
        vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
        max_position_embeddings=POSITIONS + 2, type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """``spm``: sentencepiece.bpe.model alone; ``mlm``: XLMRobertaForMaskedLM + the tokenizer transformers saves;
    ``base``: XLMRobertaModel (with its pooler)."""
    root = tmp_path_factory.mktemp("xlm_roberta")
    (root / "spm").mkdir()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS), model_prefix=str(root / "spm" / "sentencepiece.bpe"), vocab_size=120,
        hard_vocab_limit=False, minloglevel=2)
    os.remove(root / "spm" / "sentencepiece.bpe.vocab")
    reference_tokenizer = transformers.XLMRobertaTokenizer.from_pretrained(root / "spm")
    torch.manual_seed(0)
    mlm = perturbed(transformers.XLMRobertaForMaskedLM(tiny_config(len(reference_tokenizer))), 1)
    mlm.save_pretrained(root / "mlm")
    reference_tokenizer.save_pretrained(root / "mlm")
    base = perturbed(transformers.XLMRobertaModel(tiny_config(len(reference_tokenizer))), 2)
    base.save_pretrained(root / "base")
    return {"root": root, "spm": str(root / "spm"), "mlm": (str(root / "mlm"), mlm),
            "base": (str(root / "base"), base), "tokenizer": reference_tokenizer}


def batch(vocab_size, length=20):
    rng = np.random.default_rng(0)
    ids = rng.integers(3, vocab_size - 1, (3, length)).astype("int32")
    ids[:, 0] = 0
    ids[1, 14:] = 1
    ids[2, 6:] = 1
    return ids


def differences(ours, theirs, ids):
    real = ids != 1
    return float(np.max(np.abs(np.asarray(ours)[real] - theirs[real])))


def torch_outputs(model, ids):
    with torch.no_grad():
        return model(torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(ids != 1, dtype=torch.long))


def test_hidden_states_mlm_logits_and_pooler_equal_transformers(folders):
    folder, mlm = folders["mlm"]
    ids = batch(mlm.config.vocab_size)
    segments = np.zeros_like(ids)
    logits = build_transformer_model(checkpoint_path=folder, with_mlm="linear")([ids, segments])
    assert differences(logits, torch_outputs(mlm, ids).logits.numpy(), ids) < TOL
    folder, base = folders["base"]
    hidden = build_transformer_model(checkpoint_path=folder, model="xlm-roberta")([ids, segments])
    pooled = build_transformer_model(checkpoint_path=folder, with_pool=True)([ids, segments])  # bert4keras: pooled only
    reference = torch_outputs(base, ids)
    assert differences(hidden, reference.last_hidden_state.numpy(), ids) < TOL
    assert float(np.max(np.abs(np.asarray(pooled) - reference.pooler_output.numpy()))) < TOL


def test_written_folder_loads_in_transformers_with_the_same_outputs(folders, tmp_path):
    folder, mlm = folders["mlm"]
    ids = batch(mlm.config.vocab_size)
    builder = build_transformer_model(checkpoint_path=folder, with_mlm="linear", return_keras_model=False)
    write_huggingface_folder(builder, str(tmp_path / "out"), model="xlm_roberta")
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["model_type"] == "xlm-roberta" and config["architectures"] == ["XLMRobertaForMaskedLM"]
    assert config["max_position_embeddings"] == POSITIONS + 2 and config["pad_token_id"] == 1
    reloaded = transformers.XLMRobertaForMaskedLM.from_pretrained(tmp_path / "out").eval()
    expected = torch_outputs(mlm, ids).logits.numpy()
    assert differences(torch_outputs(reloaded, ids).logits.numpy(), expected, ids) < TOL
    again = build_transformer_model(checkpoint_path=str(tmp_path / "out"), with_mlm="linear")
    # the same weights through the same layers on one processor: bit-identical
    assert np.array_equal(again([ids, np.zeros_like(ids)]), builder.model([ids, np.zeros_like(ids)]))


def test_tokenizer_from_tokenizer_json_or_sentencepiece_model_alone(folders):
    reference = folders["tokenizer"]
    alone = load_tokenizer(folders["spm"])
    assert type(alone) is XLMRobertaTokenizer
    saved = load_tokenizer(folders["mlm"][0])
    for text in CORPUS[:3] + ["Rome and Paris"]:
        want = reference(text)["input_ids"]
        assert alone.encode(text)[0] == want and saved.encode(text)[0] == want, text
    assert [alone.cls_id, alone.pad_id, alone.sep_id, alone.unk_id] == [0, 1, 2, 3]


def test_hierarchical_positions_extend_the_table_as_on_roberta(folders, tmp_path):
    folder, mlm = folders["mlm"]
    short = batch(mlm.config.vocab_size)
    extended = build_transformer_model(checkpoint_path=folder, with_mlm="linear", hierarchical_position=0.4)
    assert differences(extended([short, np.zeros_like(short)]), torch_outputs(mlm, short).logits.numpy(),
                       short) < TOL  # the trained positions are kept (offset rows left out)
    as_roberta = tmp_path / "as_roberta"
    shutil.copytree(folder, as_roberta)
    config = json.loads((as_roberta / "config.json").read_text())
    (as_roberta / "config.json").write_text(json.dumps({**config, "model_type": "roberta"}))
    long = np.concatenate([short] * 8, axis=1)[:, : POSITIONS * 2 + 5]
    long[:, POSITIONS * 2:] = 5
    ours = extended([long, np.zeros_like(long)])
    roberta = build_transformer_model(checkpoint_path=str(as_roberta), with_mlm="linear", hierarchical_position=0.4)
    # the same weights through the same layers on one processor: bit-identical
    assert np.isfinite(ours).all() and np.array_equal(ours, roberta([long, np.zeros_like(long)]))


def test_info(folders, capsys):
    """(A 2-step pretrain of this family: tests/families/test_family_suite.py.)"""
    assert main(["info", folders["mlm"][0]]) == 0
    out = capsys.readouterr().out
    assert "max_position: 64" in out and "tokenizer: " in out
