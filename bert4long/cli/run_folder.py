"""What a training command leaves in --out besides its checkpoints, and the summary it prints."""
import json


def write_bert_config(builder, path):
    """The Google ``bert_config.json`` of the trained model (so --out is a complete checkpoint folder)."""
    config = {"vocab_size": builder.vocab_size, "hidden_size": builder.hidden_size,
              "num_hidden_layers": builder.num_hidden_layers, "num_attention_heads": builder.num_attention_heads,
              "intermediate_size": builder.intermediate_size, "hidden_act": builder.hidden_act,
              "max_position_embeddings": builder.max_position, "type_vocab_size": builder.segment_vocab_size,
              "hidden_dropout_prob": builder.dropout_rate,
              "attention_probs_dropout_prob": builder.attention_dropout_rate}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)


def print_summary(rows):
    width = max(len(k) for k, _ in rows)
    print("\n" + "\n".join(f"  {k.ljust(width)}  {v}" for k, v in rows), flush=True)


def saved_line(step, directory):
    """The line printed for every checkpoint saved (also under --quiet)."""
    print(f"checkpoint saved: step {step} ({directory})", flush=True)
