"""A fine-tuning run's validation record: scores after every epoch (and every --eval-every steps), the weights kept
by the best of them, the test set scored once with those, all in ``metrics.json`` (`METRICS_FILE`).

Example (the record a resumed run continues from; none yet in a new folder):
>>> import tempfile
>>> from bert4long.training.metrics_record import earlier_scores
>>> earlier_scores(tempfile.mkdtemp())
{'epochs': [], 'evaluations': []}
"""
import json
import os

from bert4long.checkpoints.json_values import integer_problem
from bert4long.output_folders import write_text_atomically
from bert4long.prediction import predicted_ids, sigmoid
from bert4long.training.model_file import save_final_model, weights_only

METRICS_FILE = "metrics.json"


class MetricsRecord:
    """The scores of ``valid`` (a reader's tuple, or None) after every epoch and, with --eval-every, every that many
    steps between, printed, written to ``metrics.json`` in the run folder (``epochs``, and ``evaluations`` between
    them, each with its training ``step``; those of an earlier, resumed run kept) with the evaluation whose weights are
    kept and the metric that chose it, and plotted in ``logs/validation`` (TensorBoard, when installed; step: the
    training step). The best evaluation's weights are written as the run's model file when scored, the one copy of
    the kept weights. ``test`` (a reader's tuple) is scored once at the end, with the kept weights, never for choosing
    them. Sets are read in batches by length, padded to ``buckets``.

    Args: ``out`` the run folder (metrics.json, ``logs/validation``); ``model_path`` the run's model file; ``task``
    recorded; ``metric`` the score that chooses the kept weights; ``batch_size`` for scoring; ``earlier`` a resumed
    run's `earlier_scores`; ``threshold`` (multi-label) the threshold option; ``early_stopping`` epochs without a
    better ``metric`` before the run stops (None: never); ``progress_bar`` whether a progress bar's line comes before
    each printed line; ``test_name`` the test file, printed with its scores.
    """

    def __init__(self, model, sets, labels, *, out, model_path, task, metric, pad_id, buckets, steps_per_epoch,
                 batch_size, earlier, threshold=None, early_stopping=None, progress_bar=True, test_name=None):
        from bert4long.data.length_batches import padded_shapes

        self.model, (self.valid, self.test), self.labels = model, sets, labels
        self.out, self.metric, self.batch_size, self.early_stopping = out, metric, batch_size, early_stopping
        self.threshold, self.steps_per_epoch = threshold, steps_per_epoch
        self.progress_bar, self.test_name = progress_bar, test_name
        self.shapes = {name: padded_shapes(data[0], pad_id, buckets) for name, data in zip(("valid", "test"), sets)
                       if data is not None}
        self.path = os.path.join(out, METRICS_FILE)
        self.model_path = model_path
        self.record = {"task": task, "select_metric": metric, "selected_epoch": None,
                       "selected_step": None, **earlier, "final": None, "test": None}
        self.log = None

    def scores(self):
        """The scores of ``valid`` with the model's weights now."""
        return self.scores_of(self.valid, self.shapes["valid"], self.threshold)

    def scores_of(self, data, shapes, threshold):
        from bert4long.training.metrics import scores_from_ids, tuned_multilabel_scores

        x, y, weights, _, owner, _ = data
        if threshold is not None:   # multi-label: the threshold is chosen (or given) with the scores
            probabilities = predicted_ids(self.model, x, shapes, self.batch_size, sigmoid)
            return tuned_multilabel_scores(y, probabilities, self.labels, self.metric, threshold)
        return scores_from_ids(predicted_ids(self.model, x, shapes, self.batch_size), y, self.labels, weights,
                               owner)

    def decision(self):
        """What a multi-label run decides with (``{}`` for other tasks): ``threshold``, the kept evaluation's (or the
        fixed one), and ``threshold_option``, how it was chosen; recorded in finetune.json and metrics.json."""
        if self.threshold is None:
            return {}
        chosen = self.record["final"]["threshold"] if self.record["final"] else self.threshold
        return {"threshold": chosen, "threshold_option": self.threshold}

    def step_of(self, entry):
        return entry.get("step", entry["epoch"] * self.steps_per_epoch)   # (a run from before steps were recorded)

    def _enter(self, key, entry, line):
        """Record ``entry`` under ``key`` (those at or after its step dropped: a resumed run scores them again),
        print ``line`` with whether it is the best so far (its weights then written as the model file)."""
        step = self.step_of(entry)
        for name in ("epochs", "evaluations"):
            self.record[name] = [e for e in self.record[name] if self.step_of(e) < step]
        self.record[key].append(entry)
        best = self.best()
        if best is not None and best is entry:
            save_final_model(self.model, self.model_path)
            line += f" (best {self.metric} so far)"
        elif best is not None and entry.get("valid", {}).get(self.metric) == \
                best["valid"][self.metric]:
            line += f" (equal to {entry_name(best)}'s {self.metric}: no improvement)"
        return best, line

    def epoch_done(self, epoch, train_logs):
        entry = {"epoch": epoch, "step": epoch * self.steps_per_epoch, "train": train_logs}
        line = (f"epoch {epoch}: train loss {train_logs.get('loss', float('nan')):.4f}, accuracy "
                f"{train_logs.get('accuracy', float('nan')):.1%} ({train_logs['seconds']:.0f} s)")
        if self.valid is not None:
            entry["valid"] = scores = self.scores()
            line += "; valid " + headline(scores)
            self.plot(entry["step"], scores)
        best, line = self._enter("epochs", entry, line)
        if best is not None and best is not entry and self.early_stopping \
                and epoch - best["epoch"] >= self.early_stopping:
            line += f"; no better {self.metric} for {epoch - best['epoch']:g} epochs: early stop"
            self.model.stop_training = True
        print(("\n" if self.progress_bar else "") + line, flush=True)   # (after a progress bar's line)
        self._write()

    def step_done(self, step, train_logs):
        """--eval-every: the scores of ``valid`` at ``step`` (no epoch's end), considered for the kept weights."""
        entry = {"step": step, "epoch": round(step / self.steps_per_epoch, 4), "train": train_logs,
                 "valid": self.scores()}
        self.plot(step, entry["valid"])
        _, line = self._enter("evaluations", entry, f"{entry_name(entry)}: valid {headline(entry['valid'])}")
        print(("\n" if self.progress_bar else "") + line, flush=True)
        self._write()

    def best(self):
        """The evaluation (an epoch's, or one between) with the highest --select-metric, the first of equals by step
        (a tie is no improvement), or None."""
        scored = sorted((e for e in self.record["epochs"] + self.record["evaluations"] if "valid" in e),
                        key=self.step_of)
        return max(scored, key=lambda e: e["valid"][self.metric]) if scored else None

    def plot(self, step, scores):
        """``scores``' numbers (`score_scalars`) at training step ``step`` in ``logs/validation``, when TensorBoard is
        there."""
        from bert4long.training.loop import ScalarLog, tensorboard_installed
        from bert4long.training.metrics import score_scalars

        if self.log is None and tensorboard_installed():
            self.log = ScalarLog(os.path.join(self.out, "logs", "validation"))
        if self.log is not None:
            self.log.write(step, score_scalars(scores))

    def finish(self, summary):
        """Summary rows; writes the model file with the kept weights (the last ones, or with ``valid`` the best
        evaluation's: `keep_best`), records them, then scores ``test`` with them."""
        from bert4long.training.metrics import format_scores

        epochs = self.record["epochs"]
        last = epochs[-1]["train"] if epochs else summary["logs"]
        rows = [("train accuracy (last epoch)", f"{last.get('accuracy', float('nan')):.1%}")]
        epoch = summary["steps"] / self.steps_per_epoch
        self.record["selected_epoch"] = int(epoch) if epoch % 1 == 0 else round(epoch, 4)   # (the last weights)
        self.record["selected_step"] = summary["steps"]
        if self.valid is not None:
            self.record["final"] = scores = self.keep_best(summary["steps"])
            print("\nvalidation (kept weights)\n" + format_scores(scores), flush=True)
            rows.append(("validation", headline(scores)))
        else:
            save_final_model(self.model, self.model_path)
        if self.log is not None:
            self.log.close()
        self.record.update(self.decision())
        if self.test is not None:
            chosen = self.decision().get("threshold")
            self.record["test"] = scores = self.scores_of(self.test, self.shapes["test"], chosen)
            print(f"\ntest ({self.test_name}, kept weights; not used to choose them)\n" + format_scores(scores),
                  flush=True)
            rows.append(("test", headline(scores)))
        self._write()
        return [*rows, ("metrics", self.path)]

    def keep_best(self, step):
        """The scores of the weights kept, which the model file holds: the best evaluation's (its weights loaded)
        unless the last weights (those of ``step``, maybe not evaluated yet) beat it on --select-metric (an equal
        score does not: the first of equals is kept). Weights already scored are not scored again."""
        best, metric = self.best(), self.metric
        scored = [e["valid"] for e in self.record["epochs"] + self.record["evaluations"]
                  if self.step_of(e) == step and "valid" in e]
        last = scored[0] if scored else self.scores()
        if best is None or self.step_of(best) == step or not os.path.isfile(self.model_path) \
                or best["valid"][metric] < last[metric]:
            save_final_model(self.model, self.model_path)
            return last
        weights_only(self.model).load_weights(self.model_path)
        print(f"kept {entry_name(best)}'s weights: {metric} {best['valid'][metric]:.3f} (the last weights: "
              f"{last[metric]:.3f})", flush=True)
        self.record["selected_epoch"], self.record["selected_step"] = best["epoch"], self.step_of(best)
        return best["valid"]

    def _write(self):
        write_text_atomically(self.path, json.dumps(self.record, indent=2))


def entry_name(entry):
    """``epoch 2``, or ``step 5 (epoch 1.6667)`` for an evaluation between epochs."""
    return f"epoch {entry['epoch']}" if entry["epoch"] % 1 == 0 else f"step {entry['step']} (epoch {entry['epoch']:g})"


def earlier_scores(out):
    """The ``epochs`` and ``evaluations`` ``out``'s metrics.json records (a run resumed; empty without one), refused
    naming the file when it is not what `MetricsRecord` writes."""
    path = os.path.join(out, METRICS_FILE)
    if not os.path.isfile(path):
        return {"epochs": [], "evaluations": []}
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
        earlier = {"epochs": record.get("epochs", []), "evaluations": record.get("evaluations", [])}
        if all(isinstance(e, dict) and integer_problem(e.get("epoch"), 1) is None for e in earlier["epochs"]) and all(
                isinstance(e, dict) and integer_problem(e.get("step"), 1) is None for e in earlier["evaluations"]):
            return earlier
    except (ValueError, AttributeError, TypeError):   # not JSON, not an object, epochs not a list
        pass
    raise ValueError(f"{path} is not the metrics.json `bert4long finetune` writes: restore it, or delete it (the "
                     "scores of the earlier epochs are lost)")


def headline(scores):
    if "samples_f1" in scores:
        return (f"micro-F1 {scores['micro_f1']:.3f}, macro-F1 {scores['macro_f1']:.3f}, samples-F1 "
                f"{scores['samples_f1']:.3f} (threshold {scores['threshold']})")
    if "macro_f1" in scores:
        return f"macro-F1 {scores['macro_f1']:.3f}, accuracy {scores['accuracy']:.1%}"
    return f"entity F1 {scores['entity_f1']:.3f}, token accuracy {scores['token_accuracy']:.1%}"
