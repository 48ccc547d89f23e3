"""Finding what a command reads: the checkpoint, the config and vocabulary beside it, the casing, the
tokenizer. Every error names the path it looked at and the option that fixes it."""
import json
import os

CASED_SHARE = 0.02  # a vocab whose word pieces hold capitals this often is cased (uncased ones hold none)


def _folder_of(path):
    return path if os.path.isdir(path) else os.path.dirname(path)


def check_checkpoint(args):
    """Refuse a --checkpoint that is neither a folder nor a checkpoint prefix, naming the path."""
    path = getattr(args, "checkpoint", None)
    if path is None or os.path.isdir(path) or os.path.isfile(path + ".index"):
        return
    name = os.path.basename(path)
    prefix = path.split(".data-")[0] if ".data-" in name else path.rsplit(".", 1)[0] if name.endswith(".index") else None
    hint = f"; pass the prefix {prefix!r} without the suffix" if prefix else ""
    raise FileNotFoundError(f"--checkpoint {path!r}: no such checkpoint (expected a folder, or a prefix such as "
                            f".../bert_model.ckpt with its .index file){hint}")


def default_config(args):
    """--config defaults to bert_config.json beside a Google checkpoint (HF folders carry config.json)."""
    checkpoint = getattr(args, "checkpoint", None)
    if getattr(args, "config", "given") is None and checkpoint and args.command != "info":
        candidate = os.path.join(_folder_of(checkpoint), "bert_config.json")
        if os.path.isfile(candidate):
            args.config = candidate


def max_position_of(args):
    """The trained number of positions of the checkpoint's config, or None if there is no config to read."""
    from bert4long.config_keys import trained_positions
    from bert4long.huggingface import is_huggingface_folder

    if getattr(args, "config", None):
        if not os.path.isfile(args.config):
            raise FileNotFoundError(f"--config {args.config!r}: no such file; pass the model's bert_config.json")
        with open(args.config, encoding="utf-8") as f:
            return trained_positions(json.load(f))
    if is_huggingface_folder(getattr(args, "checkpoint", None)):
        with open(os.path.join(args.checkpoint, "config.json"), encoding="utf-8") as f:
            return trained_positions(json.load(f))
    return None


def find_vocab(args):
    if args.vocab:
        if not os.path.isfile(args.vocab):
            raise FileNotFoundError(f"--vocab {args.vocab!r}: no such file")
        return args.vocab
    looked = []
    for base in (args.checkpoint, args.config):
        if base:
            folder = _folder_of(base)
            candidate = os.path.join(folder, "vocab.txt")
            if os.path.isfile(candidate):
                return candidate
            looked.append(folder or ".")
            if os.path.isfile(os.path.join(folder, "merges.txt")):
                raise ValueError(f"{folder!r} holds a byte-level BPE vocabulary (vocab.json + merges.txt, as RoBERTa "
                                 "and GPT-2 ship), which the command line's WordPiece tokenizer cannot read; pass a "
                                 "WordPiece vocab.txt with --vocab")
    raise FileNotFoundError(f"no vocab.txt in {', '.join(map(repr, dict.fromkeys(looked)))} "
                            "(beside --checkpoint/--config): pass --vocab PATH")


def vocab_is_cased(tokens):
    """True when word pieces of the vocabulary hold capitals (an uncased BERT vocab holds none).

    >>> vocab_is_cased(["[CLS]", "[SEP]", "paris", "##is"]), vocab_is_cased(["[CLS]", "Paris", "paris", "##is"])
    (False, True)
    """
    words = [t for t in tokens if not (t.startswith("[") and t.endswith("]"))]
    capitals = sum(any(c.isupper() for c in t) for t in words)
    return capitals > max(0, CASED_SHARE * len(words)) if len(words) >= 100 else capitals > 0


def lower_case_for(args, vocab_path):
    """--uncased/--cased, else the checkpoint's ``do_lower_case`` (Hugging Face tokenizer_config.json), else
    whether the vocabulary holds capitals."""
    if getattr(args, "lower_case", None) is not None:
        return args.lower_case
    folder = _folder_of(args.checkpoint) if getattr(args, "checkpoint", None) else None
    if folder:
        settings = os.path.join(folder, "tokenizer_config.json")
        if os.path.isfile(settings):
            with open(settings, encoding="utf-8") as f:
                lower = json.load(f).get("do_lower_case")
            if isinstance(lower, bool):
                return lower
    with open(vocab_path, encoding="utf-8") as f:
        return not vocab_is_cased(line.rstrip("\n") for line in f)


def tokenizer_for(args, vocab_path=None):
    """The WordPiece tokenizer of the checkpoint's vocab, refused up front if its size is not the checkpoint's
    vocabulary; sets ``args.lower_case`` to the casing chosen."""
    from bert4long.checkpoint_layout import check_vocab_size
    from bert4long.tokenizers import Tokenizer

    vocab_path = vocab_path or find_vocab(args)
    args.lower_case = lower_case_for(args, vocab_path)
    tokenizer = Tokenizer(vocab_path, do_lower_case=args.lower_case)
    if getattr(args, "checkpoint", None) or getattr(args, "config", None):
        check_vocab_size(tokenizer.vocab_size, args.config, args.checkpoint, vocab_path=vocab_path)
    return tokenizer
