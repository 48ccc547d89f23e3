"""The settings a resumed training run must share with its start (or be told ``--accept-changes``)."""
import hashlib
import os


def run_settings(args, data_option, *data):
    """The learning rate, the data file (``args.<data_option>``) with a fingerprint of the ``data`` arrays read
    from it, and the vocabulary (path and content), as `fit_resumable`'s ``config`` entries."""
    from bert4long.cli.inputs import find_vocab
    from bert4long.training.resume import fingerprint

    source = getattr(args, data_option)
    vocab = find_vocab(args)
    with open(vocab, "rb") as f:
        vocab_hash = hashlib.sha256(f.read()).hexdigest()[:16]
    return {"learning_rate": args.learning_rate, data_option: os.path.abspath(source) if source else "demo",
            "data_fingerprint": fingerprint(*data), "vocab": os.path.abspath(vocab), "vocab_fingerprint": vocab_hash}
