"""Command-line options shared by several commands, and the model keyword arguments they select."""


def add_model_arguments(parser, checkpoint_required=True):
    parser.add_argument("--config", help="bert_config.json (not needed for a Hugging Face folder)")
    parser.add_argument("--checkpoint", required=checkpoint_required,
                        help="Google checkpoint prefix (.../bert_model.ckpt) or a Hugging Face model folder")
    parser.add_argument("--vocab", help="vocab.txt (default: next to --checkpoint or --config)")
    parser.add_argument("--seq-len", type=int, default=512, help="tokens per sequence (default 512)")
    parser.add_argument("--hierarchical-position", action="store_true",
                        help="place up to n^2 positions by hierarchical decomposition (needed above n)")


def add_training_arguments(parser):
    parser.add_argument("--batch-size", type=int, default=8, help="global batch size (default 8)")
    parser.add_argument("--steps", type=int, default=1000, help="total training steps (default 1000)")
    parser.add_argument("--save-every", type=int, default=100, help="checkpoint every N steps (default 100)")
    parser.add_argument("--out", default="bert4long_run", help="output folder; rerun to resume (default bert4long_run)")
    parser.add_argument("--learning-rate", type=float, default=5e-5, help="peak learning rate (default 5e-5)")
    parser.add_argument("--warmup-steps", type=int, help="linear warmup steps (default 10%% of --steps)")
    parser.add_argument("--weight-decay", type=float, default=0.01, help="AdamW decay, not on LayerNorm/bias")
    parser.add_argument("--clipnorm", type=float, default=1.0, help="global gradient-norm clip (default 1.0)")
    parser.add_argument("--accumulate", type=int, default=1, help="gradient accumulation steps (default 1)")
    parser.add_argument("--precision", default="float32",
                        choices=["float32", "mixed_bfloat16", "mixed_float16", "auto"],
                        help="auto = mixed_float16 on GPU, mixed_bfloat16 on CPU (default float32)")
    parser.add_argument("--no-xla", action="store_true", help="do not jit-compile the training step")
    parser.add_argument("--recompute", action="store_true",
                        help="gradient checkpointing: recompute each layer in the backward pass (less memory)")
    parser.add_argument("--distribute", default="none", choices=["none", "mirrored", "multiworker", "tpu"],
                        help="tf.distribute strategy (multiworker reads TF_CONFIG)")
    parser.add_argument("--seed", type=int, default=0, help="seed of data order, masking and dropout")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument("--overwrite", action="store_true",
                        help="start over in an --out that holds an earlier bert4long run (not another folder)")
    parser.add_argument("--accept-changes", action="store_true",
                        help="resume a run although settings changed (learning rate, data, vocab, lengths, batch)")


def model_kwargs(args):
    """The `build_transformer_model` keyword arguments the model options select."""
    kwargs = {"sequence_length": None}
    if args.hierarchical_position:
        kwargs["hierarchical_position"] = True
    if getattr(args, "recompute", False):
        kwargs["recompute"] = True
    return kwargs
