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
    from bert4long.tokenizers import Tokenizer

    return Tokenizer(find_vocab(args), do_lower_case=True)
