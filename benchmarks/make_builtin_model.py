"""Remake bert4long's built-in masked LM (bert4long/pretrained/austen-wiki-mini/) from random weights.

Text (public domain / CC BY-SA, offline): Jane Austen's six novels from the Debian package
r-cran-janeaustenr (read from its R lazy-load database; `apt-get download` fetches it) and
gensim's 106 Wikipedia test articles minus the 13 HELD_OUT_ARTICLES (never seen, not even by
the vocabulary). An uncased WordPiece vocabulary is trained on the same text (Hugging Face
`tokenizers`), then a 4-layer BERT (hidden 128) learns MLM at 128 tokens with bert4long's own
training code (AdamW, warmup + linear decay, fixed seeds). Ends with the Google-layout folder
(bert_config.json, bert_model.ckpt.*, vocab.txt) and its accuracy on the held-out articles.

    python -m benchmarks.make_builtin_model                 # ~31 min on 2 shared CPU cores
    python -m benchmarks.make_builtin_model --steps 20 --out /tmp/mini   # a smoke run
"""
import argparse
import glob
import json
import os
import struct
import subprocess
import tempfile
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(ROOT, "bert4long", "pretrained", "austen-wiki-mini")
RDB = "usr/lib/R/site-library/janeaustenr/data/Rdata.rdb"
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
MAX_FILE_BYTES = 4 * 2**20   # each committed data file stays under the project's 5 MB limit (the checkpoint is sharded)


def _r_strings(blob):
    """The character vector in one serialized R object (XDR format 3: a STRSXP of CHARSXPs)."""
    i = 2 + 12
    i += 4 + struct.unpack(">i", blob[i:i + 4])[0]          # the native-encoding name
    flags, length = struct.unpack(">ii", blob[i:i + 8])
    i += 8
    if flags & 0xFF != 16:
        raise ValueError(f"expected a character vector, got R type {flags & 0xFF}")
    lines = []
    for _ in range(length):
        flags, n = struct.unpack(">ii", blob[i:i + 8])
        i += 8
        lines.append("" if n < 0 else blob[i:i + n].decode("utf-8" if flags & (1 << 15) else "latin-1"))
        i += max(n, 0)
    return lines


def austen_novels(deb_dir):
    """Austen's six novels (one string each) from r-cran-janeaustenr, downloaded into ``deb_dir`` if absent."""
    rdb = os.path.join(deb_dir, "out", RDB)
    if not os.path.exists(rdb):
        subprocess.run(["apt-get", "download", "r-cran-janeaustenr"], cwd=deb_dir, check=True)
        deb = sorted(glob.glob(os.path.join(deb_dir, "r-cran-janeaustenr_*.deb")))[-1]
        subprocess.run(["dpkg-deb", "-x", deb, os.path.join(deb_dir, "out")], check=True)
    data = open(rdb, "rb").read()
    novels, pos = [], 0
    while pos < len(data):       # records: 4-byte length, then a zlib stream
        stream = zlib.decompressobj()
        blob = stream.decompress(data[pos + 4:])
        pos = len(data) - len(stream.unused_data)
        paragraphs = " ".join(line if line.strip() else "\n" for line in _r_strings(blob)).split("\n")
        novels.append("\n".join(" ".join(p.split()) for p in paragraphs if p.strip()))
    return novels


def train_vocab(texts, size, folder):
    os.environ["TOKENIZERS_PARALLELISM"] = "false"   # the parallel trainer breaks ties differently run to run
    from tokenizers import BertWordPieceTokenizer

    wordpiece = BertWordPieceTokenizer(clean_text=True, handle_chinese_chars=True, strip_accents=True, lowercase=True)
    wordpiece.train_from_iterator(texts, vocab_size=size, min_frequency=3, limit_alphabet=120,
                                  special_tokens=SPECIALS, show_progress=False)
    wordpiece.save_model(folder)


def config(vocab_size, args):
    return {"vocab_size": vocab_size, "hidden_size": args.hidden, "num_hidden_layers": args.layers,
            "num_attention_heads": args.hidden // 32, "intermediate_size": 4 * args.hidden, "hidden_act": "gelu",
            "max_position_embeddings": args.seq_len, "type_vocab_size": 2, "hidden_dropout_prob": args.dropout,
            "attention_probs_dropout_prob": args.dropout, "initializer_range": 0.02}


def sinusoidal_positions(length, width, scale):
    """Transformer sinusoids (Vaswani et al. 2017) times ``scale``: a start for the position table whose dot
    products depend on distance, so attention can find neighbours early (from random rows a small BERT
    stays a bag of words for thousands of steps). Training then moves the rows freely.

    >>> sinusoidal_positions(4, 6, 1.0)[0].tolist()
    [0.0, 1.0, 0.0, 1.0, 0.0, 1.0]
    """
    import numpy as np

    angles = np.arange(length)[:, None] / 10000 ** (np.arange(0, width, 2) / width)[None, :]
    table = np.zeros((length, width), "float32")
    table[:, 0::2], table[:, 1::2] = np.sin(angles), np.cos(angles)
    return scale * table


def held_out_windows(tokenizer, length):
    """The 13 held-out articles cut into ``[CLS] + length-2 tokens + [SEP]`` windows, and each window's article."""
    import numpy as np

    from bert4long.pretrained import HELD_OUT_ARTICLES, wikipedia_articles

    articles = wikipedia_articles()
    windows, groups = [], []
    for index, ids in zip(HELD_OUT_ARTICLES, tokenizer.encode_documents([articles[i] for i in HELD_OUT_ARTICLES])):
        for start in range(0, len(ids) - (length - 2) + 1, length - 2):
            windows.append([tokenizer.cls_id, *ids[start:start + length - 2], tokenizer.sep_id])
            groups.append(index)
    return np.asarray(windows, "int32"), np.asarray(groups)


def measure(model, tokenizer, length, most_frequent):
    """Held-out MLM accuracy at ``length`` (all predictions, [MASK] only), the most-frequent-token baseline, and the
    accuracy with the position rows shuffled (a model that reads word order loses most of it)."""
    import numpy as np

    from bert4long.training import masker_for, mlm_batches
    from bert4long.training.position_eval import accuracy_with_error, masked_counts

    windows, groups = held_out_windows(tokenizer, length)
    masker = masker_for(tokenizer, length)
    counts = masked_counts(model, windows, masker, boundary=length, batch_size=32)
    result = {"windows": len(windows), "predictions": int(counts["n_lt_all"].sum())}
    for kind in ("all", "mask"):
        result[f"accuracy_{kind}"] = accuracy_with_error(counts[f"n_lt_{kind}"], counts[f"correct_lt_{kind}"], groups)
    hits = total = 0
    for (_tokens, _segments, _positions), labels, weights in mlm_batches(windows, masker, 32, seed=12345,
                                                                         shuffle=False).take(len(windows) // 32):
        hits += int(((labels.numpy() == most_frequent) & (weights.numpy() > 0)).sum())
        total += int((weights.numpy() > 0).sum())
    result["most_frequent_token_baseline"] = hits / total
    positions = model.get_layer("Embedding-Position")
    trained = positions.get_weights()
    positions.set_weights([rows[np.random.default_rng(0).permutation(len(rows))] for rows in trained])
    shuffled = masked_counts(model, windows, masker, boundary=length, batch_size=32)   # does it read word order?
    positions.set_weights(trained)
    for kind in ("all", "mask"):
        result[f"accuracy_{kind}_positions_shuffled"] = accuracy_with_error(
            shuffled[f"n_lt_{kind}"], shuffled[f"correct_lt_{kind}"], groups)
    return result


def write_readme(folder, summary):
    """The model folder's README: what it is, how it was made, how well it reads at its trained length."""
    c, s, held = summary["config"], summary["settings"], summary["held_out"]
    (acc, acc_se), (mask, mask_se) = held["accuracy_all"], held["accuracy_mask"]
    shuffled, shuffled_se = held["accuracy_mask_positions_shuffled"]
    start = ("- position table: BERT's random rows." if not s.get("sinusoid_start") else
             f"- position table: started at sinusoids × {s['sinusoid_start']:g} (then trained like every weight). From "
             "BERT's random rows a model this small stayed a bag of words (a pilot run: 4,000 steps at the same "
             "settings ended at loss 5.73 and 4.4% on `[MASK]`, and shuffling its position rows moved its held-out "
             "accuracy by less than 0.1 point).")
    text = f"""# austen-wiki-mini: bert4long's built-in masked LM

A small uncased BERT in the original Google layout (`bert_config.json`, `bert_model.ckpt.*` with
`cls/predictions/*`, `vocab.txt`), trained by bert4long from random weights so that the main job
(`bert4long pretrain` with no arguments) and the README's example have a real masked LM that installs
with the package. It is a demonstration model: {c['num_hidden_layers']} layers, hidden {c['hidden_size']}, \
{c['num_attention_heads']} heads, {c['max_position_embeddings']} trained positions, {c['vocab_size']:,} WordPiece pieces.

## How it was made
`python -m benchmarks.make_builtin_model` (fixed seeds; {summary['minutes']:.0f} minutes on 2 shared CPU cores):
- text: Jane Austen's six novels (public domain; the Debian package r-cran-janeaustenr) and 93 of the
  106 English Wikipedia articles in gensim's test data (CC BY-SA), {summary['train_tokens']:,} tokens; the 13
  articles `bert4long.pretrained.HELD_OUT_ARTICLES` were left out of the vocabulary and the training;
- vocabulary: WordPiece trained on that text (Hugging Face `tokenizers`, lower-cased, accents stripped);
- training: masked LM (15%, 80/10/10) on {summary['train_sequences']:,} packed sequences of {s['seq_len']} tokens, \
{s['steps']:,} steps of {s['batch']} ({summary['epochs_of_text']:.1f} passes over the text), AdamW at {s['learning_rate']:g} \
with 10% warmup and linear decay, dropout {s['dropout']:g}, float32; final training loss {summary['final_train_loss']:.2f};
{start}

## How well it does at {s['seq_len']} tokens
On the 13 held-out articles cut into {held['windows']:,} windows of {s['seq_len']} tokens ({held['predictions']:,} masked \
positions, masking seed 12345; ± standard error over the articles):

| | MLM accuracy |
|---|---|
| all masked positions | {100 * acc:.1f}% ± {100 * acc_se:.1f} |
| `[MASK]`-replaced positions only | {100 * mask:.1f}% ± {100 * mask_se:.1f} |
| always predicting the most frequent token (`{summary['most_frequent_token']}`) | \
{100 * held['most_frequent_token_baseline']:.1f}% |
| `[MASK]` positions, the position rows shuffled | {100 * shuffled:.1f}% ± {100 * shuffled_se:.1f} |

Read the `[MASK]` row against the baseline: most of the "all" figure comes from the 10% of masked
positions left unchanged, which a model can copy. The last row shows whether it reads word order: with its
position rows shuffled (seed 0), `[MASK]` accuracy goes from {100 * mask:.1f}% to {100 * shuffled:.1f}%.
A demonstration model, far weaker than a real BERT.
What it is for: showing, in minutes on a CPU, what reading beyond its {s['seq_len']} trained positions
with `hierarchical_position=True` does (`bert4long pretrain` with no arguments; the README's example).

Licence: the weights are derived from public-domain novels and CC BY-SA 3.0 Wikipedia text; share alike.
"""
    with open(os.path.join(folder, "README.md"), "w") as f:
        f.write(text)


def remeasure(folder):
    """Measure the model in ``folder`` again (held-out accuracy as `measure`), keep the rest of its made.json."""
    from bert4long.tokenizers import load_tokenizer
    from bert4long.training import build_mlm_model

    with open(os.path.join(folder, "made.json")) as f:
        summary = json.load(f)
    tokenizer = load_tokenizer(folder)
    model, _, _ = build_mlm_model(os.path.join(folder, "bert_config.json"), os.path.join(folder, "bert_model.ckpt"))
    most_frequent = tokenizer.token_to_id(summary["most_frequent_token"])
    summary["held_out"] = measure(model, tokenizer, summary["settings"]["seq_len"], most_frequent)
    print(json.dumps(summary["held_out"], indent=2))
    with open(os.path.join(folder, "made.json"), "w") as f:
        json.dump(summary, f, indent=2, default=str)
    write_readme(folder, summary)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=OUT)
    parser.add_argument("--vocab-size", type=int, default=4096)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--sinusoid-start", type=float, default=0.05,
                        help="start the position table at sinusoids times this scale (0: BERT's random rows)")
    parser.add_argument("--log-every", type=int, default=250, help="steps between printed training losses")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--deb-dir", default=os.path.join(tempfile.gettempdir(), "bert4long_janeaustenr"))
    parser.add_argument("--remeasure", action="store_true",
                        help="no training: measure the model already in --out again, rewrite made.json and README.md")
    args = parser.parse_args(argv)
    if args.remeasure:
        return remeasure(args.out)
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.deb_dir, exist_ok=True)
    begin = time.time()

    import keras
    import numpy as np

    from bert4long.data import pack_documents
    from bert4long.pretrained import HELD_OUT_ARTICLES, wikipedia_articles
    from bert4long.tokenizers import load_tokenizer
    from bert4long.training import build_mlm_model, compile_mlm, make_optimizer, masker_for, mlm_batches

    novels = austen_novels(args.deb_dir)
    wiki = [a for i, a in enumerate(wikipedia_articles()) if i not in HELD_OUT_ARTICLES]
    texts = novels + wiki
    train_vocab(texts, args.vocab_size, args.out)
    tokenizer = load_tokenizer(args.out)
    documents = tokenizer.encode_documents(texts)
    counts = np.bincount(np.concatenate(documents), minlength=len(tokenizer.token_dict))
    most_frequent = int(counts.argmax())
    sequences = pack_documents(documents, args.seq_len, cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id,
                               drop_remainder=True)
    print(f"{len(novels)} novels + {len(wiki)} articles: {counts.sum()} tokens, {len(sequences)} sequences of "
          f"{args.seq_len}; vocabulary {len(tokenizer.token_dict)}", flush=True)
    settings = config(len(tokenizer.token_dict), args)
    config_path = os.path.join(args.out, "bert_config.json")
    with open(config_path, "w") as f:
        json.dump(settings, f, indent=2)
    keras.utils.set_random_seed(args.seed)
    model, builder, _ = build_mlm_model(config_path, None)
    if args.sinusoid_start:
        positions = model.get_layer("Embedding-Position")
        positions.set_weights([sinusoidal_positions(args.seq_len, args.hidden, args.sinusoid_start)])
    compile_mlm(model, make_optimizer(args.learning_rate, args.steps, weight_decay=0.01), jit_compile=True)
    batches = mlm_batches(sequences, masker_for(tokenizer, args.seq_len), args.batch, seed=args.seed)
    log_every = min(args.log_every, args.steps)
    history = model.fit(batches, steps_per_epoch=log_every, epochs=max(1, args.steps // log_every), verbose=2)
    builder.save_weights_as_checkpoint(os.path.join(args.out, "bert_model.ckpt"), max_shard_bytes=MAX_FILE_BYTES)
    result = measure(model, tokenizer, args.seq_len, most_frequent)
    summary = {"settings": vars(args), "config": settings, "train_tokens": int(counts.sum()),
               "train_sequences": len(sequences), "epochs_of_text": args.steps * args.batch / len(sequences),
               "most_frequent_token": tokenizer.id_to_token(most_frequent),
               "final_train_loss": float(history.history["loss"][-1]), "held_out": result,
               "minutes": (time.time() - begin) / 60}
    print(json.dumps(summary, indent=2, default=str))
    with open(os.path.join(args.out, "made.json"), "w") as f:
        json.dump(summary, f, indent=2, default=str)
    write_readme(args.out, summary)


if __name__ == "__main__":
    main()
