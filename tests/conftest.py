import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from dataclasses import dataclass  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

# --doctest-modules (pytest.ini) imports every module here; this helper imports torch, which the tests
# that use it import only after pytest.importorskip("torch").
collect_ignore = ["torch_reference.py"]


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory):
    """A tiny BERT checkpoint in the Google layout: (config_path, checkpoint_prefix, vocab_path)."""
    from bert4long.testing import write_tiny_checkpoint

    return write_tiny_checkpoint(str(tmp_path_factory.mktemp("tiny_bert")), model="bert", seed=1)


@pytest.fixture(scope="session")
def tiny_albert(tmp_path_factory):
    from bert4long.testing import write_tiny_checkpoint

    return write_tiny_checkpoint(str(tmp_path_factory.mktemp("tiny_albert")), model="albert", seed=2)


# ------------------------------------------------------------------ every family's tiny checkpoint
# English text for the Hugging Face folders' own tokenizers (trained on it here) and their pretrain runs.
CORPUS = [
    "The quick brown fox jumps over the lazy dog. Long documents need long models, and long models need data.",
    "Paris and Berlin are cities; Rome is one too. A city has streets, and streets have long names.",
    "Numbers such as 2048 tokens and 4096 positions appear in papers about long documents.",
    "A dog and a fox met in the city. The fox was quick, the dog was lazy, the city was big.",
] * 3
ROBERTA_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]      # ids 0-4: pad 1, as RoBERTa's
MODERN_SPECIALS = ["<|endoftext|>", "<|padding|>", "[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]
NEZHA_MAX_RELATIVE = 5  # tiny max_relative_position, so that NEZHA's clipping is exercised at short lengths


@dataclass(frozen=True)
class TinyFamily:
    """A family's tiny checkpoint. ``config``: the Google ``bert_config.json`` (None: a Hugging Face folder,
    ``checkpoint``, with ``config.json`` and its tokenizer); ``first_id``: the lowest id that is no special
    token; ``cls_id`` / ``pad_id``: the ids a row starts and is padded with; ``corpus``: text its tokenizer reads."""

    name: str
    checkpoint: str
    config: str | None
    vocab_size: int
    first_id: int
    cls_id: int
    pad_id: int
    corpus: str

    @property
    def google(self):
        return self.config is not None

    def build(self, **kwargs):
        """``build_transformer_model`` of this checkpoint (``model=`` named for the Google layout)."""
        from bert4long.models import build_transformer_model

        if self.google:
            return build_transformer_model(self.config, self.checkpoint, model=self.name, **kwargs)
        return build_transformer_model(checkpoint_path=self.checkpoint, **kwargs)


def _google(layout, seed, **overrides):
    def write(name, folder):
        from bert4long.testing import write_tiny_checkpoint

        config, prefix, vocab = write_tiny_checkpoint(str(folder), model=layout, seed=seed, **overrides)
        size = sum(1 for _ in open(vocab, encoding="utf-8"))
        words = np.random.default_rng(seed).integers(0, size - 5, 600)
        corpus = "\n\n".join(" ".join(f"w{i}" for i in words[k:k + 30]) for k in range(0, 600, 30))
        return TinyFamily(name, prefix, config, size, 5, 2, 0, corpus)
    return write


def _bpe(specials):
    import tokenizers

    bpe = tokenizers.ByteLevelBPETokenizer()
    bpe.train_from_iterator(CORPUS, vocab_size=300, min_frequency=1, special_tokens=specials, show_progress=False)
    return bpe


def _roberta_style(model_class, config_class, **config):
    """A RoBERTa-style folder: vocab.json + merges.txt (saved by RobertaTokenizer) and the model, saved by
    transformers' ``model_class`` with its weights perturbed (`torch_reference.perturbed`)."""
    def write(name, folder):
        import torch
        import transformers
        from torch_reference import perturbed

        _bpe(ROBERTA_SPECIALS).save_model(str(folder))
        tokenizer = transformers.RobertaTokenizer(vocab=str(folder / "vocab.json"), merges=str(folder / "merges.txt"))
        tokenizer.save_pretrained(folder)
        torch.manual_seed(0)
        size = len(tokenizer)
        model = getattr(transformers, model_class)(getattr(transformers, config_class)(
            vocab_size=size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
            pad_token_id=1, bos_token_id=0, eos_token_id=2, **config))
        perturbed(model, 1).save_pretrained(folder)
        return TinyFamily(name, str(folder), None, size, 5, 0, 1, "\n\n".join(CORPUS))
    return write


def _modernbert(name, folder):
    """tokenizer.json with [CLS]/[SEP] templates, and ModernBertForMaskedLM (3 layers, a padded vocabulary)."""
    import tokenizers
    import torch
    import transformers
    from torch_reference import perturbed

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
        vocab_size=len(fast) + 3, hidden_size=32, intermediate_size=40, num_hidden_layers=3,
        num_attention_heads=2, local_attention=8, global_attn_every_n_layers=2, max_position_embeddings=128,
        pad_token_id=ids["[PAD]"], cls_token_id=ids["[CLS]"], sep_token_id=ids["[SEP]"],
        bos_token_id=ids["[CLS]"], eos_token_id=ids["[SEP]"])
    perturbed(transformers.ModernBertForMaskedLM(config), 1).save_pretrained(folder)
    return TinyFamily(name, str(folder), None, len(fast), len(MODERN_SPECIALS), ids["[CLS]"], ids["[PAD]"],
                      "\n\n".join(CORPUS))


def _xlm_roberta(name, folder):
    """sentencepiece.bpe.model trained here (fairseq's ids) and XLMRobertaForMaskedLM (66 = 64 + 2 positions)."""
    import sentencepiece
    import torch
    import transformers
    from torch_reference import perturbed

    spm = folder / "spm"
    spm.mkdir()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS), model_prefix=str(spm / "sentencepiece.bpe"), vocab_size=120,
        hard_vocab_limit=False, minloglevel=2)
    tokenizer = transformers.XLMRobertaTokenizer.from_pretrained(spm)
    torch.manual_seed(0)
    config = transformers.XLMRobertaConfig(
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
        max_position_embeddings=66, type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2)
    perturbed(transformers.XLMRobertaForMaskedLM(config), 1).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return TinyFamily(name, str(folder), None, len(tokenizer), 4, 0, 1, "\n\n".join(CORPUS))


# One writer per declared family (tests/test_family_suite.py fails for a family missing here).
TINY_FAMILIES = {
    "bert": _google("bert", 1),
    "albert": _google("albert", 2),
    "albert_unshared": _google("albert", 2),
    "nezha": _google("nezha", 11, max_relative_position=NEZHA_MAX_RELATIVE),
    "roformer": _google("roformer", 12),
    "electra": _google("electra", 13),
    "roberta": _roberta_style("RobertaForMaskedLM", "RobertaConfig", max_position_embeddings=66, type_vocab_size=1),
    "xlm-roberta": _xlm_roberta,
    "longformer": _roberta_style("LongformerForMaskedLM", "LongformerConfig", attention_window=[4, 8],
                                 max_position_embeddings=66, type_vocab_size=1),
    "big_bird": _roberta_style("BigBirdForMaskedLM", "BigBirdConfig", block_size=2, num_random_blocks=1,
                               max_position_embeddings=64, sep_token_id=2),
    "modernbert": _modernbert,
}


@pytest.fixture(scope="session")
def tiny_family(tmp_path_factory):
    """``tiny_family(name)``: the `TinyFamily` of declared family ``name``, written once per session (Google
    layout by `bert4long.testing.write_tiny_checkpoint`, Hugging Face folders by transformers' own classes)."""
    written = {}

    def get(name):
        if name not in TINY_FAMILIES:
            raise LookupError(f"No tiny checkpoint for family {name!r}: add its writer to TINY_FAMILIES in "
                              "tests/conftest.py.")
        if name not in written:
            written[name] = TINY_FAMILIES[name](name, tmp_path_factory.mktemp(name.replace("-", "_")))
        return written[name]
    return get


def pytest_collection_modifyitems(config, items):
    """Mark ``slow`` the tests `slow_tests.txt` lists (measured times; ``-m "not slow"`` is the fast lane):
    a listed ``path::name`` marks every case of the function, a listed ``path::name[case]`` that case."""
    from slow_tests import function_of, slow_functions

    slow = slow_functions()
    for item in items:
        if function_of(item.nodeid) in slow or item.nodeid in slow:
            item.add_marker(pytest.mark.slow)
