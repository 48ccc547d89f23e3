"""What a training command leaves in --out besides its checkpoints, and the summary it prints."""


def write_bert_config(builder, path):
    """The Google ``bert_config.json`` of the trained model (so --out is a complete checkpoint folder)."""
    builder.write_config(path)


def print_summary(rows):
    width = max(len(k) for k, _ in rows)
    print("\n" + "\n".join(f"  {k.ljust(width)}  {v}" for k, v in rows), flush=True)
