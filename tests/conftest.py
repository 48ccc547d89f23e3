import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from dataclasses import dataclass  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tiny_runs  # noqa: E402

from bert4long.families import Family, family  # noqa: E402

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
FAIRSEQ_IDS = {"pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2}  # RoBERTa's and XLM-RoBERTa's
MODERN_SPECIALS = ["<|endoftext|>", "<|padding|>", "[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]
# The Hugging Face folders' model size, under each family's `TinyCheckpoint.config`.
HUGGING_FACE_TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 37}


@dataclass(frozen=True)
class TinyFamily:
    """A family's tiny checkpoint. ``family``: its `Family`; ``config``: the Google ``bert_config.json`` (None: a
    Hugging Face folder, ``checkpoint``, with ``config.json`` and its tokenizer); ``first_id``: the lowest id that is
    no special token; ``cls_id`` / ``pad_id``: the ids a row starts and is padded with; ``corpus``: text its
    tokenizer reads."""

    family: Family
    checkpoint: str
    config: str | None
    vocab_size: int
    first_id: int
    cls_id: int
    pad_id: int
    corpus: str

    @property
    def name(self):
        return self.family.name

    @property
    def google(self):
        return self.config is not None

    def build(self, **kwargs):
        """``build_transformer_model`` of this checkpoint (``model=`` named for the Google layout)."""
        from bert4long.models import build_transformer_model

        if self.google:
            return build_transformer_model(self.config, self.checkpoint, model=self.name, **kwargs)
        return build_transformer_model(checkpoint_path=self.checkpoint, **kwargs)


def _google(declared, folder):
    """`bert4long.testing.write_tiny_checkpoint` in the declared layout, and a text of its vocabulary's words."""
    from bert4long.testing import write_tiny_checkpoint

    spec = declared.tiny
    config, prefix, vocab = write_tiny_checkpoint(str(folder), model=spec.layout, seed=spec.seed, **dict(spec.config))
    size = sum(1 for _ in open(vocab, encoding="utf-8"))
    words = np.random.default_rng(spec.seed).integers(0, size - 5, 600)
    corpus = "\n\n".join(" ".join(f"w{i}" for i in words[k:k + 30]) for k in range(0, 600, 30))
    return TinyFamily(declared, prefix, config, size, 5, 2, 0, corpus)


def _bpe(specials):
    import tokenizers

    bpe = tokenizers.ByteLevelBPETokenizer()
    bpe.train_from_iterator(CORPUS, vocab_size=300, min_frequency=1, special_tokens=specials, show_progress=False)
    return bpe


# Tokenizer writers of the Hugging Face folders, by `TinyCheckpoint.writer`: each saves its files into ``folder``
# and returns (tokenizer size, first id that is no special token, start id, pad id, the model config's vocabulary
# size and special ids).
def _bpe_files(folder):
    """RoBERTa's vocab.json + merges.txt, saved by RobertaTokenizer."""
    import transformers

    _bpe(ROBERTA_SPECIALS).save_model(str(folder))
    tokenizer = transformers.RobertaTokenizer(vocab=str(folder / "vocab.json"), merges=str(folder / "merges.txt"))
    tokenizer.save_pretrained(folder)
    return len(tokenizer), 5, 0, 1, {"vocab_size": len(tokenizer), **FAIRSEQ_IDS}


def _sentencepiece_files(folder):
    """sentencepiece.bpe.model trained here (fairseq's ids), saved by XLMRobertaTokenizer."""
    import sentencepiece
    import transformers

    spm = folder / "spm"
    spm.mkdir()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS), model_prefix=str(spm / "sentencepiece.bpe"), vocab_size=120,
        hard_vocab_limit=False, minloglevel=2)
    tokenizer = transformers.XLMRobertaTokenizer.from_pretrained(spm)
    tokenizer.save_pretrained(folder)
    return len(tokenizer), 4, 0, 1, {"vocab_size": len(tokenizer), **FAIRSEQ_IDS}


def _tokenizer_json_files(folder):
    """tokenizer.json with [CLS]/[SEP] templates, as ModernBERT's; the model's vocabulary padded by 3 rows."""
    import tokenizers
    import transformers

    bpe = _bpe(MODERN_SPECIALS)
    ids = {t: bpe.token_to_id(t) for t in MODERN_SPECIALS}
    bpe._tokenizer.post_processor = tokenizers.processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])])
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer, cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]",
        unk_token="[UNK]", mask_token="[MASK]", bos_token="<|endoftext|>", eos_token="<|endoftext|>")
    fast.save_pretrained(folder)
    return len(fast), len(MODERN_SPECIALS), ids["[CLS]"], ids["[PAD]"], {
        "vocab_size": len(fast) + 3, "pad_token_id": ids["[PAD]"], "cls_token_id": ids["[CLS]"],
        "sep_token_id": ids["[SEP]"], "bos_token_id": ids["[CLS]"], "eos_token_id": ids["[SEP]"]}


TOKENIZER_FILES = {"bpe": _bpe_files, "sentencepiece": _sentencepiece_files, "tokenizer.json": _tokenizer_json_files}


def _huggingface(declared, folder):
    """The declared tokenizer's files and transformers' ``{architecture}ForMaskedLM`` (`HUGGING_FACE_TINY` under
    the declared config), saved with its weights perturbed (`torch_reference.perturbed`)."""
    import torch
    import transformers
    from torch_reference import perturbed

    size, first_id, cls_id, pad_id, ids = TOKENIZER_FILES[declared.tiny.writer](folder)
    declared_config = {key: list(value) if isinstance(value, tuple) else value   # a declaration's tuple: a JSON list
                       for key, value in declared.tiny.config}
    torch.manual_seed(0)
    config = getattr(transformers, declared.architecture + "Config")(**{**HUGGING_FACE_TINY, **ids, **declared_config})
    perturbed(getattr(transformers, declared.architecture + "ForMaskedLM")(config), 1).save_pretrained(folder)
    return TinyFamily(declared, str(folder), None, size, first_id, cls_id, pad_id, "\n\n".join(CORPUS))


# Tiny checkpoint writers, ``writer(declared, folder) -> TinyFamily``, by `TinyCheckpoint.writer`.
WRITERS = {"google": _google, **dict.fromkeys(TOKENIZER_FILES, _huggingface)}


def tiny_writer(declared):
    """The writer of family ``declared``'s tiny checkpoint, as its `TinyCheckpoint` says."""
    if declared.tiny is None or declared.tiny.writer not in WRITERS:
        raise LookupError(f"No tiny checkpoint for family {declared.name!r}: declare its tiny=TinyCheckpoint(...) "
                          f"in bert4long/families.py, with a writer of {sorted(WRITERS)}.")
    return WRITERS[declared.tiny.writer]


@pytest.fixture(scope="session")
def tiny_family(tmp_path_factory):
    """``tiny_family(name)``: the `TinyFamily` of declared family ``name``, written once per session by its
    `tiny_writer` (Google layout by `bert4long.testing.write_tiny_checkpoint`, Hugging Face folders by
    transformers' own classes)."""
    written = {}

    def get(name):
        declared = family(name)
        if declared.name not in written:
            folder = tmp_path_factory.mktemp(declared.name.replace("-", "_"))
            written[declared.name] = tiny_writer(declared)(declared, folder)
        return written[declared.name]
    return get


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The inputs of the tiny CLI runs (`tiny_runs`: a corpus folder, classify and multi-label .jsonl) and a victim
    folder outside every run; a module that defines its own ``data`` uses that."""
    root = tmp_path_factory.mktemp("untried")
    corpus = root / "corpus"
    corpus.mkdir()
    for d in range(6):
        (corpus / f"doc{d}.txt").write_text(" ".join(f"w{(i * (d + 3)) % 40}" for i in range(80)))
    victim = root / "victim"
    victim.mkdir()
    (victim / "victim.txt").write_text("the user's file")
    return {"root": root, "corpus": corpus, "victim": victim,
            "train": tiny_runs.write_lines(root / "train.jsonl", [{"text": f"w{i} w{i + 1} w{i + 2}",
                                                                   "label": "ab"[i % 2]} for i in range(8)]),
            "multi": tiny_runs.write_lines(root / "multi.jsonl", [{"text": f"w{i} w{i + 3}",
                                                                   "labels": [["a"], ["b"], ["a", "b"]][i % 3]}
                                                                  for i in range(9)])}


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true",
                     help="also run the tests marked slow (2 s or more on 2 CPU cores); CI passes it")


def pytest_collection_modifyitems(config, items):
    """Leave out the tests marked ``@pytest.mark.slow`` unless ``--slow`` is given (or ``-m`` names them):
    the README's test command is the edit loop's lane, and CI adds ``--slow -m slow``."""
    if config.getoption("--slow") or "slow" in (config.getoption("markexpr") or ""):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]
