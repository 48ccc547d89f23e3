"""``bert4long predict``: a fine-tuned run (--run) or an encoder (--checkpoint: one embedding per document) over a
folder of text files or a .jsonl, one JSON line a document in input order, and the scores where the input is
labelled. Documents are read in batches sorted by length, each padded to a bucket length that suits the model's
attention kernels."""
import json
import os
import sys

from bert4long.cli.inputs import ChosenTokenizer, check_checkpoint, check_utf8, choose_tokenizer
from bert4long.cli.options import add_reading_arguments, positive_int, window_length
from bert4long.cli.run_folder import load_run_model, read_run_settings
from bert4long.output_folders import atomic_write, write_text_atomically
from bert4long.prediction import model_inputs, sigmoid

# Where a labelled input holds its gold answer, and where the output line puts the prediction, by task.
GOLD_KEYS = {"classify": "label", "tokens": "tags", "multilabel": "labels"}
PREDICTED_KEYS = {"classify": "predicted_label", "tokens": "predicted_tags", "multilabel": "predicted_labels"}


def add_predict_arguments(parser):
    parser.description = (
        "Run a fine-tuned model (--run: the --out folder of `bert4long finetune`) or an encoder (--checkpoint: "
        "one embedding per document, the mean of its token states over every window) over a folder of text "
        "files or a .jsonl ('text' per line; 'tokens' per line for a token labeller) and write one JSON line "
        "per document to --output, in input order: the input's JSON object (and 'source') with the prediction under "
        "'predicted_label' or 'predicted_tags'. A document with no text is answered too (the model reads [CLS] "
        "[SEP] alone); --errors skip, which would leave documents out, is refused. Documents are read in batches of "
        "similar length. On labelled input "
        "(a 'label', or 'tags', on every line) it also prints the scores: accuracy, macro-F1, per-class "
        "precision/recall/F1, confusion matrix, majority baseline; entity F1 and token accuracy for tags.")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--run", help="folder written by `bert4long finetune` (model, finetune.json, tokenizer)")
    source.add_argument("--checkpoint", help="encoder checkpoint (prefix or Hugging Face folder): embeddings")
    parser.add_argument("--config", help="bert_config.json for --checkpoint (default: beside it)")
    parser.add_argument("--vocab", help="vocab.txt for --checkpoint (default: beside it)")
    casing = parser.add_mutually_exclusive_group()
    casing.add_argument("--cased", dest="lower_case", action="store_false", default=None)
    casing.add_argument("--uncased", dest="lower_case", action="store_true")
    parser.add_argument("--input", required=True, help="folder of text files or a .jsonl file")
    parser.add_argument("--output", required=True, help="the .jsonl to write (an existing file only with --overwrite)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --output (or --metrics) file")
    parser.add_argument("--seq-len", type=window_length,
                        help="tokens read per window (default: a --run's fine-tuned length; a --checkpoint's trained "
                             "length, or 512; at least 3); shorter than a --run's reads each document cut there")
    parser.add_argument("--batch-size", type=positive_int, default=8, help="documents per batch (default 8)")
    add_reading_arguments(parser)
    parser.add_argument("--metrics", help="labelled input only: also write the scores (printed as a table) to this "
                                          ".json file (an existing file only with --overwrite)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")



def _check_input_utf8(args, task):
    """Refuse an --input file that is not UTF-8 naming it and the fix: a .jsonl always (--errors reads text files
    only), a text file under --errors strict."""
    from bert4long.data.corpus import is_jsonl, list_files

    for path in list_files(args.input):
        if task == "tokens" or is_jsonl(path):
            check_utf8(str(path), "input")
        elif args.errors == "strict":
            check_utf8(str(path), "input", "save it as UTF-8, or pass --errors replace (its bad bytes read as U+FFFD)")



def _read_inputs(args, task, settings):
    """``(items, gold, sources, records)``: texts, or word lists for a token labeller, one for every document (a
    document with no text too: `predict` answers every one); ``gold`` the labels (tags) when every document has one,
    else None; each document's JSON object (``{}`` for a text file); refuses input with no documents, labels the
    run does not know, and --metrics without labels."""
    from bert4long.data.corpus import read_documents
    from bert4long.data.tagging import read_tagged

    if not os.path.exists(args.input):
        raise FileNotFoundError(f"--input {args.input!r}: no such file or folder; pass a folder of text files or a "
                                ".jsonl file")
    if args.errors == "skip":
        raise ValueError("--errors skip would leave documents out of --output, which answers every input document: "
                         "pass --errors replace (bad bytes read as U+FFFD), or fix the files")
    _check_input_utf8(args, task)
    if task == "tokens":
        words, tags, sources, records = read_tagged(args.input, require_tags=False, with_records=True)
        gold = tags if all(record.get("tags") is not None for record in records) else None
        items = words
    else:
        items, labels, sources, _, records = read_documents(args.input, errors=args.errors, with_records=True,
                                                            keep_empty=True)
        if not items:
            raise ValueError(f"--input {args.input!r} holds no documents: add text files (one document each) or "
                             'pass a .jsonl with {"text": "..."} lines')
        gold = [str(label) for label in labels] if task == "classify" and None not in labels else None
        if task == "multilabel":
            gold = _gold_label_sets(args, records, sources, settings["labels"])
    if args.metrics and gold is None:
        raise ValueError(f"--metrics {args.metrics!r}: --input {args.input!r} is not labelled on every line (a "
                         f"{GOLD_KEYS.get(task, 'label')!r} in each), so there are no scores to write: add the labels "
                         "or leave --metrics out")
    unknown = sorted(set(gold) - set(settings["labels"])) if gold is not None and task == "classify" else []
    if unknown:
        raise ValueError(f"--input {args.input!r} holds label(s) {unknown[:10]} the run was not trained on "
                         f"({settings['labels']}): fix the labels, or drop the 'label' field to predict only")
    return items, gold, sources, records



def _gold_label_sets(args, records, sources, labels):
    """The 0/1 gold label sets of a multi-label --input when every line gives ``labels`` (else None), checked naming
    file:line (`bert4long.data.multilabel`)."""
    from bert4long.data.multilabel import label_sets, multi_hot

    if not all("labels" in record for record in records):
        return None
    folder = args.input if os.path.isdir(args.input) else os.path.dirname(os.path.abspath(args.input))
    where = [os.path.join(folder, source) for source in sources]
    return multi_hot(label_sets(records, where), labels, where,
                     "the run was trained on these alone; fix the labels, or drop the 'labels' fields to predict only")



def _check_output_folders(args):
    """Refuse an --output or --metrics file whose folder does not exist, before any work."""
    for option in ("output", "metrics"):
        path = getattr(args, option)
        folder = os.path.dirname(os.path.abspath(path)) if path else None
        if folder is not None and not os.path.isdir(folder):
            raise FileNotFoundError(f"--{option} {path!r}: no folder {folder!r} to write it in; create the folder, "
                                    "or name a file in an existing one")



def check_predict_arguments(args, given):
    """Refuse, before anything is read, an --output or --metrics with no folder to write it in, a --checkpoint
    that is not one, and a --seq-len a --run cannot read."""
    _check_output_folders(args)
    check_checkpoint(args)
    if args.run and args.seq_len:
        _check_run_seq_len(args, read_run_settings(args.run, "or --checkpoint for embeddings"))



def _check_run_seq_len(args, settings):
    """A --run reads a --seq-len up to the length it was fine-tuned at, except a model that pools --chunks windows."""
    trained = settings["seq_len"]
    if args.seq_len > trained:
        raise ValueError(f"--seq-len {args.seq_len} is longer than the {trained} tokens {args.run} was fine-tuned at: "
                         f"use --seq-len {trained} or less, or leave it out")
    if settings.get("pooling") == "chunks" and args.seq_len != trained:
        raise ValueError(f"{args.run} pools --chunks {settings['chunks']} windows of {trained} tokens inside the "
                         "model, which cannot read other windows: leave --seq-len out")



def _predict_settings(args, source):
    """``(task, settings, seq_len)`` of `predict`: a --run's (its finetune.json, and --seq-len or the length it was
    trained at: `_check_run_seq_len`), or ``('embed', None, seq_len)`` for --checkpoint (``source``): --seq-len, else
    its trained length or 512, refused beyond its positions."""
    if args.run:
        settings = read_run_settings(args.run, "or --checkpoint for embeddings")
        return settings["task"], settings, args.seq_len or settings["seq_len"]
    trained = source.trained_positions
    seq_len = args.seq_len or trained or 512
    if trained and seq_len > trained:
        raise ValueError(f"--seq-len {seq_len} is longer than the {trained} positions of --checkpoint: use "
                         f"--seq-len {trained} or less (a longer document is read in several windows)")
    return "embed", None, seq_len



def _predict_tokenizer(args, source, settings):
    """The `ChosenTokenizer` of `predict`: the checkpoint's (``source``), or a --run's (``settings``: its
    finetune.json): its vocab.txt, cased as recorded, or the tokenizer files finetune copied there."""
    from bert4long.tokenizers import load_tokenizer

    if settings is None:
        return choose_tokenizer(args, source)
    vocab = os.path.join(args.run, "vocab.txt")
    if os.path.isfile(vocab):
        return choose_tokenizer(args, vocab_path=vocab, recorded_case=settings["lower_case"])
    return ChosenTokenizer(load_tokenizer(args.run), None, args.run)



def run_predict(args, resolved):
    import keras

    import bert4long.layers
    import bert4long.training  # noqa: F401
    from bert4long.data.length_batches import SORT_WINDOW, buckets_for, sorted_batches
    from bert4long.training.loop import progress_verbosity

    task, settings, seq_len = _predict_settings(args, resolved.source)
    items, gold, sources, records = _read_inputs(args, task, settings)
    chosen = _predict_tokenizer(args, resolved.source, settings)
    tokenizer = chosen.tokenizer
    print(chosen.describe(), file=sys.stderr)
    if task == "embed":
        from bert4long.models import build_transformer_model

        model = build_transformer_model(resolved.source, sequence_length=None, hierarchical_position=None)
    else:
        model = load_run_model(args.run, settings)
    progress = None if args.quiet else keras.utils.Progbar(len(items), unit_name="document",
                                                           verbose=progress_verbosity())
    predicted = []
    documents = items if task == "tokens" else tokenizer.encode_documents(items)   # word lists, or content ids
    buckets = buckets_for(model, seq_len)

    def write(tmp):   # (`atomic_write`'s temporary is a new file, created exclusively: it cannot be an input)
        with open(tmp, "w", encoding="utf-8") as out:
            for begin in range(0, len(items), SORT_WINDOW):   # sorted by length inside, written in input order
                window = documents[begin:begin + SORT_WINDOW]
                results = [None] * len(window)
                for index in sorted_batches([len(document) for document in window], args.batch_size):
                    batch = [window[i] for i in index]
                    answers = _predict_batch(model, tokenizer, batch, task, seq_len, settings, buckets)
                    for i, result in zip(index, answers):
                        results[i] = result
                    if progress is not None:
                        progress.add(len(batch))
                predicted.extend(r[PREDICTED_KEYS[task]] for r in results if task in PREDICTED_KEYS)
                out.writelines(json.dumps({"source": source, **record, **result}, ensure_ascii=False) + "\n"
                               for source, record, result in zip(sources[begin:], records[begin:], results))

    atomic_write(args.output, write)
    empty = sum(len(document) == 0 for document in documents)
    print(f"wrote {len(items)} result(s) to {args.output}"
          + (f" ({empty} with no tokens: the model read [CLS] [SEP] alone)" if empty else ""), flush=True)
    if gold is not None and len(gold) and task in PREDICTED_KEYS:
        _print_scores(gold, predicted, settings["labels"], task, args.metrics)



def _print_scores(gold, predicted, labels, task, path):
    """The scores of a labelled input: a table on stdout, the JSON in ``path`` (--metrics) when given."""
    from bert4long.data.multilabel import multi_hot
    from bert4long.training.metrics import (
        classification_scores,
        format_scores,
        multilabel_scores,
        tagging_scores,
    )

    if task == "classify":   # (an integer label is scored by its name, as the run's labels are)
        scores = classification_scores(gold, [str(label) for label in predicted], labels)
    elif task == "multilabel":
        scores = multilabel_scores(gold, multi_hot([[str(label) for label in row] for row in predicted], labels),
                                   labels)
    else:
        scores = tagging_scores(gold, predicted)
    print(format_scores(scores), flush=True)
    if path:
        write_text_atomically(path, json.dumps(scores, indent=2))
        print(f"wrote the scores to {path}", flush=True)



def _predict_batch(model, tokenizer, batch, task, seq_len, settings, buckets):
    """The results of one batch of documents (content ids; word lists for a token labeller) read ``seq_len`` tokens at
    a time, its rows padded to the bucket length of the longest (`bert4long.data.length_batches`)."""
    import numpy as np

    from bert4long.data.chunking import chunk_documents
    from bert4long.data.length_batches import cut, padded_shapes
    from bert4long.data.rows import document_rows
    from bert4long.data.tagging import encode_tagged

    pad = tokenizer.pad_id or 0
    if task in ("classify", "multilabel"):
        x = document_rows(tokenizer, batch, seq_len, settings["chunks"] if settings["pooling"] == "chunks" else None)
        x = cut(x, padded_shapes(x, pad, buckets))
        logits = model.predict_on_batch(model_inputs(model, x)).astype("float64")
        labels = settings["labels"]
        answers = [int(label) for label in labels] if settings.get("label_type") == "integer" else labels
    if task == "multilabel":
        chosen = sigmoid(logits) >= np.asarray(settings["threshold"])
        return [{"predicted_labels": [answer for answer, on in zip(answers, row) if on],
                 "probabilities": dict(zip(labels, p.round(6).tolist()))} for row, p in zip(chosen, sigmoid(logits))]
    if task == "classify":
        probs = np.exp(logits - logits.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        return [{"predicted_label": answers[int(p.argmax())], "probabilities": dict(zip(labels, p.round(6).tolist()))}
                for p in probs]
    if task == "tokens":
        tags = settings["labels"]
        x, _, weights, owner = encode_tagged(tokenizer, batch, [[tags[0]] * len(w) for w in batch], tags, seq_len)
        shapes = padded_shapes(x, pad, buckets)
        x, weights = cut(x, shapes), cut(weights, shapes)
        best = model.predict_on_batch(model_inputs(model, x)).argmax(-1)
        firsts = [best[owner == doc][weights[owner == doc] > 0] for doc in range(len(batch))]
        return [{"predicted_tags": [tags[int(t)] for t in first]} for first in firsts]
    windows, _, owner = chunk_documents(batch, seq_len, cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id,
                                        pad_id=pad)
    windows = cut(windows, padded_shapes(windows, pad, buckets))
    states = np.asarray(model.predict_on_batch(model_inputs(model, windows)), "float64")
    real = (windows != pad)[..., None]
    results = []
    for doc in range(len(batch)):
        mine = owner == doc
        total = (states[mine] * real[mine]).sum((0, 1))
        results.append({"embedding": (total / max(real[mine].sum(), 1)).round(6).tolist()})
    return results
