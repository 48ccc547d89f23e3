"""What computing in bfloat16 costs in accuracy, with the same weights: masked-LM accuracy and a classifier's macro-F1.

- Masked LM: MiniLM-MLM (``../shared/models/minilm-mlm``, trained on every shipped Wikipedia article but the 13 held
  out) on those 13 articles, packed at 512 tokens and at 1,536 (hierarchical positions), one fixed masking
  (`bert4long.training.evaluate_mlm`): accuracy over the masked positions with the model built in float32 and in
  ``mixed_bfloat16``.
- Classifier: a `bert4long finetune` run (``--classifier RUN``, trained in float32) exported twice as a raw-text
  SavedModel (`bert4long export --run RUN --raw-text`, ``--precision float32`` and ``bfloat16``), the run's
  validation documents sent as text: macro-F1 and accuracy of each, and how many labels differ.

    python -m benchmarks.precision_accuracy --classifier /work/finetune_cw/512-seed0
    python -m benchmarks.precision_accuracy --quick        # tiny random model and a tiny fine-tune (a smoke run)

Writes benchmarks/results/precision_accuracy.json (precision_accuracy_quick.json with --quick).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

from benchmarks.common import ROOT, machine_stamp, write_json
from benchmarks.finetune_lengths import MINILM_MLM

HERE = os.path.dirname(os.path.abspath(__file__))
PRECISIONS = ("float32", "mixed_bfloat16")


def mlm_rows(checkpoint, lengths, quick):
    """Masked-LM accuracy of ``checkpoint`` on the held-out articles at each length, per precision."""
    from bert4long.data.packing import pack_for
    from bert4long.pretrained import HELD_OUT_ARTICLES, wikipedia_articles
    from bert4long.tokenizers import load_tokenizer
    from bert4long.training import build_mlm_model, evaluate_mlm, masker_for

    tokenizer = load_tokenizer(os.path.dirname(checkpoint))
    articles = [wikipedia_articles()[i] for i in HELD_OUT_ARTICLES[:2 if quick else None]]
    documents = [tokenizer.encode(text)[0][1:-1] for text in articles]
    rows = []
    for length in lengths:
        sequences = pack_for(tokenizer, documents, length)
        row = {"task": "masked LM", "length": length, "sequences": len(sequences)}
        for precision in PRECISIONS:
            model, _, _ = build_mlm_model(os.path.join(os.path.dirname(checkpoint), "bert_config.json"), checkpoint,
                                          precision=precision, hierarchical_position=length > 512)
            scores = evaluate_mlm(model, sequences, masker_for(tokenizer, length), batch_size=2)
            row[f"{precision} accuracy"] = round(scores["mlm_accuracy"], 4)
            row["predictions"] = scores["predictions"]
        row["difference"] = round(row["mixed_bfloat16 accuracy"] - row["float32 accuracy"], 4)
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def served_labels(run, precision, texts, work):
    """The labels the raw-text SavedModel of ``run`` exported in ``precision`` gives ``texts``."""
    import tensorflow as tf

    folder = os.path.join(work, precision)
    command = [sys.executable, "-m", "bert4long.cli", "export", "--run", run, "--raw-text", "--precision", precision,
               "--out", folder]
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"})
    if result.returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr[-2000:]}")
    serve = tf.saved_model.load(folder).signatures["serving_default"]
    return [label.decode() for text in texts for label in serve(texts=tf.constant([text]))["label"].numpy()]


def classifier_row(run, work):
    """Macro-F1 and accuracy of ``run``'s classifier served in float32 and in bfloat16, on its validation file."""
    from bert4long.cli.run_folder import read_run_settings
    from bert4long.training.metrics import classification_scores

    settings = read_run_settings(run, "a `bert4long finetune --task classify` run folder")
    with open(settings["valid"]) as f:
        documents = [json.loads(line) for line in f if line.strip()]
    texts, gold = [d["text"] for d in documents], [str(d["label"]) for d in documents]
    row = {"task": "classifier", "run": run, "length": settings["seq_len"], "documents": len(texts)}
    labels = {}
    for precision in ("float32", "bfloat16"):
        labels[precision] = served_labels(run, precision, texts, work)
        scores = classification_scores(gold, labels[precision], settings["labels"])
        row[f"{precision} macro_f1"], row[f"{precision} accuracy"] = (round(scores["macro_f1"], 4),
                                                                      round(scores["accuracy"], 4))
    row["labels changed"] = sum(a != b for a, b in zip(labels["float32"], labels["bfloat16"]))
    print(json.dumps(row), flush=True)
    return row


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", default=MINILM_MLM, help="a Google-layout MLM checkpoint (default MiniLM-MLM)")
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 1536])
    parser.add_argument("--classifier", help="a `bert4long finetune --task classify` run folder")
    parser.add_argument("--quick", action="store_true", help="the shipped tiny model, 2 articles, 128 tokens")
    parser.add_argument("--out", help="JSON path (default benchmarks/results/precision_accuracy[_quick].json)")
    args = parser.parse_args(argv)
    if args.quick:
        from bert4long.pretrained import checkpoint

        args.checkpoint, args.lengths = checkpoint(), [128]
    rows = mlm_rows(args.checkpoint, args.lengths, args.quick)
    if args.classifier:
        rows.append(classifier_row(os.path.abspath(args.classifier), tempfile.mkdtemp()))
    out = args.out or os.path.join(HERE, "results", f"precision_accuracy{'_quick' if args.quick else ''}.json")
    write_json(out, {"stamp": machine_stamp(), "rows": rows})
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
