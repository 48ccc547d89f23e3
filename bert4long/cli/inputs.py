"""Finding what a command reads: the config and vocabulary beside a checkpoint, and the tokenizer."""
import os


def default_config(args):
    """--config defaults to bert_config.json beside a Google checkpoint (HF folders carry config.json)."""
    checkpoint = getattr(args, "checkpoint", None)
    if getattr(args, "config", "given") is None and checkpoint and args.command != "info":
        folder = checkpoint if os.path.isdir(checkpoint) else os.path.dirname(checkpoint)
        candidate = os.path.join(folder, "bert_config.json")
        if os.path.isfile(candidate):
            args.config = candidate


def find_vocab(args):
    if args.vocab:
        return args.vocab
    for base in (args.checkpoint, args.config):
        if base:
            folder = base if os.path.isdir(base) else os.path.dirname(base)
            candidate = os.path.join(folder, "vocab.txt")
            if os.path.isfile(candidate):
                return candidate
    raise SystemExit("error: no vocab.txt next to --checkpoint/--config: pass --vocab PATH")


def tokenizer_for(args):
    """The WordPiece tokenizer of --vocab, refused up front if its size is not the checkpoint's vocabulary."""
    from bert4long.models import check_vocab_size
    from bert4long.tokenizers import Tokenizer

    vocab = find_vocab(args)
    tokenizer = Tokenizer(vocab, do_lower_case=True)
    check_vocab_size(tokenizer.vocab_size, args.config, args.checkpoint, vocab_path=vocab)
    return tokenizer
