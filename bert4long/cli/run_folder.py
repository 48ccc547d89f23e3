"""What a training command leaves in --out besides its checkpoints, and the summary it prints."""
import hashlib
import os


def run_settings(args, data_option, *data):
    """The settings a resumed run must share with its start (or be told `--accept-changes`): the learning
    rate, the data file and a fingerprint of what was read from it, and the vocabulary."""
    from bert4long.cli.inputs import find_vocab
    from bert4long.training.resume import fingerprint

    source = getattr(args, data_option)
    vocab = find_vocab(args)
    with open(vocab, "rb") as f:
        vocab_hash = hashlib.sha256(f.read()).hexdigest()[:16]
    return {"learning_rate": args.learning_rate, data_option: os.path.abspath(source) if source else "demo",
            "data_fingerprint": fingerprint(*data), "vocab": os.path.abspath(vocab), "vocab_fingerprint": vocab_hash}


def print_summary(rows):
    width = max(len(k) for k, _ in rows)
    print("\n" + "\n".join(f"  {k.ljust(width)}  {v}" for k, v in rows), flush=True)


def saved_line(step, directory):
    """The line printed for every checkpoint saved (also under --quiet)."""
    print(f"checkpoint saved: step {step} ({directory})", flush=True)
