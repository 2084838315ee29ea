"""Whether a run has diverged, read from its evaluations of the test set.

A run has diverged when its test loss is not finite (its weights overflowed), or when its accuracy stayed at chance
for EVALUATIONS evaluations in a row while its test loss stood above LOSS_GROWTH times the lowest it reached: a model
that learned nothing and is getting worse. Chance is CHANCE_MARGIN times the share of the test set's commonest class
(0.15 on ten balanced classes). A run stopped for it ends with "diverged" in its summary, and a search or a
comparison counts it as a miss of the target, never as a slow run.
"""
import math

EVALUATIONS = 3
CHANCE_MARGIN = 1.5
LOSS_GROWTH = 1.5


def chance_accuracy(labels):
    """The accuracy of always answering the commonest class of `labels`."""
    import numpy as np

    counts = np.bincount(np.asarray(labels, dtype=np.int64))
    return float(counts.max() / counts.sum()) if counts.sum() else 0.0


def verdict(records, chance):
    """Why the run whose evaluations are `records` (dicts with accuracy and loss, oldest first) has diverged, or
    None; records without a loss (logs of older runs) are never judged."""
    losses = [r.get("loss") for r in records]
    if not records or losses[-1] is None:
        return None
    last = records[-1]
    if not math.isfinite(last["loss"]):
        return f"the test loss is {last['loss']} at step {last.get('step')}"
    tail = records[-EVALUATIONS:]
    if len(tail) < EVALUATIONS or any(r.get("loss") is None for r in tail):
        return None
    lowest = min(loss for loss in losses if loss is not None and math.isfinite(loss))
    if all(r["accuracy"] <= CHANCE_MARGIN * chance for r in tail) and last["loss"] > LOSS_GROWTH * lowest:
        return (f"test accuracy at chance ({last['accuracy']:.3f}) in the last {EVALUATIONS} evaluations while the "
                f"test loss rose from {lowest:.3g} to {last['loss']:.3g}")
    return None
