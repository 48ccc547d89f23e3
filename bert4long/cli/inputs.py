"""Finding what a command reads: the checkpoint, the config and vocabulary beside it, the casing, the
tokenizer. Every error names the path it looked at and the option that fixes it."""
import os
from dataclasses import dataclass


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


def config_beside(args):
    """The bert_config.json beside a Google --checkpoint, --config's default (None: given, none there, or ``info``,
    which reads its checkpoint's own; a Hugging Face folder carries config.json)."""
    checkpoint = getattr(args, "checkpoint", None)
    if getattr(args, "config", "given") is None and checkpoint and args.command != "info":
        candidate = os.path.join(_folder_of(checkpoint), "bert_config.json")
        if os.path.isfile(candidate):
            return candidate
    return None


def check_model_name(model):
    """Refuse a --model that names no family read from a Google-layout checkpoint (None: not given)."""
    from bert4long.families import google_layout_families

    names = sorted(name for f in google_layout_families() for name in f.names)
    if model is not None and model.lower() not in names:
        raise ValueError(f"--model {model!r} is unknown: choose one of {names}")


# The files of a non-WordPiece tokenizer a run copies beside its model (and a sentencepiece *.model).
COPIED_TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "merges.txt", "added_tokens.json", "tokenizer_config.json",
                          "special_tokens_map.json")


def _has_tokenizer_files(folder):
    names = set(os.listdir(folder)) if os.path.isdir(folder) else set()
    return ("tokenizer.json" in names or {"vocab.json", "merges.txt"} <= names
            or any(name.endswith(".model") for name in names))


def tokenizer_folder(args):
    """The checkpoint's folder when its tokenizer is not a WordPiece vocab.txt (a Hugging Face tokenizer.json,
    vocab.json + merges.txt, or a sentencepiece .model: read by `bert4long.tokenizers.load_tokenizer`), else
    None (WordPiece: `find_vocab`). --vocab always means WordPiece."""
    from bert4long.tokenizers.folders import is_wordpiece_folder

    if getattr(args, "vocab", None):
        return None
    for base in (getattr(args, "checkpoint", None), getattr(args, "config", None)):
        if base:
            folder = _folder_of(base) or "."
            if is_wordpiece_folder(folder):
                return None
            if _has_tokenizer_files(folder):
                return folder
    return None


def find_vocab(args):
    """The WordPiece vocab.txt: --vocab, else the one beside --checkpoint/--config."""
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
    raise FileNotFoundError(f"no tokenizer in {', '.join(map(repr, dict.fromkeys(looked)))} (beside "
                            "--checkpoint/--config): expected a WordPiece vocab.txt, a tokenizer.json, vocab.json + "
                            "merges.txt or a sentencepiece .model; pass --vocab PATH for a WordPiece vocab.txt")


def tokenizer_files(args):
    """The files the command's tokenizer is read from (what a run records and copies beside its model)."""
    folder = tokenizer_folder(args)
    if folder is None:
        return [find_vocab(args)]
    names = sorted(os.listdir(folder))
    return [os.path.join(folder, n) for n in names if n in COPIED_TOKENIZER_FILES or n.endswith(".model")]


def lower_case_for(args, vocab_path, recorded=None):
    """--uncased/--cased, else ``recorded`` (the casing a fine-tuned run records; None: none), else
    `bert4long.tokenizers.casing.lower_case_of` on the vocab.txt's folder (the rule `load_tokenizer` follows: its
    tokenizer_config.json's ``do_lower_case``, else whether the vocab is cased)."""
    from bert4long.tokenizers import load_vocab
    from bert4long.tokenizers.casing import lower_case_of

    for chosen in (getattr(args, "lower_case", None), recorded):
        if chosen is not None:
            return chosen
    return lower_case_of(os.path.dirname(vocab_path) or ".", load_vocab(vocab_path))


@dataclass(frozen=True)
class ChosenTokenizer:
    """The tokenizer a command reads with (`choose_tokenizer`): ``lower_case``, the casing of a WordPiece vocab (None:
    the tokenizer decides its own), and ``where`` it was read from (a vocab.txt, or a folder)."""

    tokenizer: object
    lower_case: bool | None
    where: str

    def describe(self):
        r"""One line naming the tokenizer and where it came from.

        >>> import os, tempfile
        >>> from bert4long.tokenizers import Tokenizer
        >>> path = os.path.join(tempfile.mkdtemp(), "vocab.txt")
        >>> _ = open(path, "w").write("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n")
        >>> ChosenTokenizer(Tokenizer(path), True, path).describe()
        'tokenizer: WordPiece, uncased, 5 entries (.../vocab.txt); [CLS] 2, [SEP] 3, pad 0, mask 4'
        """
        from bert4long.tokenizers import Tokenizer

        tokenizer = self.tokenizer
        kind = (f"WordPiece, {'un' if self.lower_case else ''}cased" if isinstance(tokenizer, Tokenizer)
                else type(tokenizer).__name__)
        names = [(tokenizer.id_to_token(i) if i is not None else None) for i in (tokenizer.cls_id, tokenizer.sep_id)]
        return (f"tokenizer: {kind}, {tokenizer.vocab_size} entries ({self.where}); {names[0]} {tokenizer.cls_id}, "
                f"{names[1]} {tokenizer.sep_id}, pad {tokenizer.pad_id}, mask {tokenizer.mask_id}")


def choose_tokenizer(args, source=None, vocab_path=None, recorded_case=None):
    """The `ChosenTokenizer` of the checkpoint (``source``: its `bert4long.checkpoints.source.Source`; None: no
    checkpoint), refused up front if its size is not the checkpoint's vocabulary (a tokenizer.json's table may be
    padded: `bert4long.checkpoints.layout.check_vocab_size`).

    A folder whose tokenizer is not WordPiece (`tokenizer_folder`) gets `bert4long.tokenizers.load_tokenizer`'s (the
    casing is the tokenizer's own, and --cased/--uncased are refused); otherwise the WordPiece tokenizer of
    ``vocab_path`` (default `find_vocab`), cased as `lower_case_for` decides (``recorded_case``: a run's casing)."""
    from bert4long.checkpoints.layout import check_vocab_size
    from bert4long.tokenizers import HuggingFaceTokenizer, Tokenizer, load_tokenizer

    folder = None if vocab_path else tokenizer_folder(args)
    if folder is not None:
        if getattr(args, "lower_case", None) is not None:
            raise ValueError(f"--{'un' if args.lower_case else ''}cased applies to WordPiece vocabularies; the "
                             f"tokenizer of {folder!r} decides its own casing: leave the option out")
        tokenizer = load_tokenizer(folder)   # the file it read names it (vocab.json + merges.txt: the folder)
        chosen = ChosenTokenizer(tokenizer, None, folder)
        named = repr(tokenizer.path) if tokenizer.path else f"the tokenizer of {folder!r}"
    else:
        vocab_path = vocab_path or find_vocab(args)
        lower_case = lower_case_for(args, vocab_path, recorded_case)
        chosen = ChosenTokenizer(Tokenizer(vocab_path, do_lower_case=lower_case), lower_case, vocab_path)
        named = repr(vocab_path)
    if source is not None:
        check_vocab_size(chosen.tokenizer.vocab_size, source.model_vocab_size(), vocab_path=named,
                         allow_padded=isinstance(chosen.tokenizer, HuggingFaceTokenizer))
        check_pad_id(chosen.tokenizer, source, named)
    return chosen


def check_pad_id(tokenizer, resolved, source):
    """Refuse a tokenizer whose padding id is not the model's ``pad_token_id`` (the model finds padding by it):
    for a Hugging Face folder read with its own config.json (``resolved``: its `bert4long.checkpoints.source.Source`)."""
    if resolved.from_folder:
        model_pad = resolved.pad_id
        if None not in (model_pad, tokenizer.pad_id) and model_pad != tokenizer.pad_id:
            raise ValueError(f"{source} pads with id {tokenizer.pad_id} but the model's config.json in "
                             f"{resolved.checkpoint!r} says pad_token_id={model_pad}: padding would be read as text. "
                             "Use the tokenizer that came with this checkpoint (or fix pad_token_id).")


def check_utf8(path, option, fix="save it as UTF-8"):
    r"""Refuse a text file that is not UTF-8, or holds a NUL byte (a binary file, or UTF-16 text), in one line naming
    the option, the file, the line and ``fix``.

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "labels.txt")
    >>> _ = open(path, "wb").write(b"good\nb\xe9d\n")
    >>> check_utf8(path, "labels")
    Traceback (most recent call last):
    ValueError: --labels '...labels.txt': line 2 is not UTF-8 (byte b'\xe9' at column 2): save it as UTF-8
    """
    with open(path, "rb") as f:
        for number, line in enumerate(f, start=1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as error:
                raise ValueError(f"--{option} {path!r}: line {number} is not UTF-8 (byte "
                                 f"{line[error.start:error.start + 1]!r} at column {error.start + 1}): {fix}") from None
            if b"\0" in line:
                raise ValueError(f"--{option} {path!r}: line {number} holds a NUL byte (column {line.index(0) + 1}), "
                                 f"so it is no UTF-8 text (UTF-16, or a binary file?): {fix}")


def read_labels(path):
    """The labels of a --labels file, one a line (blank lines and a UTF-8 byte-order mark ignored), refused in one
    line naming the file when it is missing, not UTF-8, empty or lists a label twice."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"--labels {path!r}: no such file; give one label per line, or leave --labels out "
                                "to use the labels of --train")
    check_utf8(path, "labels")
    with open(path, encoding="utf-8-sig") as f:
        labels = [line.strip() for line in f if line.strip()]
    if not labels:
        raise ValueError(f"--labels {path!r} holds no labels: write one label per line")
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise ValueError(f"--labels {path!r} lists {', '.join(map(repr, repeated))} more than once: each label on "
                         "one line only (the head gets one output per line)")
    return labels
