"""What a training command leaves in --out besides its checkpoints, and the summary it prints."""
import hashlib
import json
import os

from bert4long.outputs import write_text_atomically


def write_bert_config(builder, path):
    """The Google ``bert_config.json`` of the trained model (so --out is a complete checkpoint folder)."""
    config = {"vocab_size": builder.vocab_size, "hidden_size": builder.hidden_size,
              "num_hidden_layers": builder.num_hidden_layers, "num_attention_heads": builder.num_attention_heads,
              "intermediate_size": builder.intermediate_size, "hidden_act": builder.hidden_act,
              "max_position_embeddings": builder.max_position, "type_vocab_size": builder.segment_vocab_size,
              "hidden_dropout_prob": builder.dropout_rate,
              "attention_probs_dropout_prob": builder.attention_dropout_rate}
    write_text_atomically(path, json.dumps(config, indent=2))


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
