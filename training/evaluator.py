"""The evaluator process (-m evaluate): tests each checkpoint or snapshot rank 0 saves in --train-dir, exactly once.

It holds the test set only and runs beside the job, so evaluation costs the training devices nothing: the workers
either snapshot the model for it (--snapshot-dir, --snapshot-seconds: training/snapshots.py, what launch.py does) or
save checkpoints with -e 0. It stops after the job's final marker, once every checkpoint up to it is evaluated, or
after --eval-timeout seconds without a new checkpoint. A checkpoint whose files do not match the checksums in its
.json is skipped with a warning naming it. After each evaluation it tells rank 0 the accuracy it found
(snapshots.report_evaluation), and when it stops it logs the CPU time it used.

Its log is <log-dir>/evaluator.jsonl (give it the workers' -ld, so it lies beside their node folders where
summary.py looks), one JSON object per checkpoint in the order evaluated:
  step      global iterations done when the checkpoint was saved
  time      the job's training seconds at that step (the clock of the iteration logs' total_time)
  accuracy  correct predictions over the whole test set
  loss      the mean softmax cross-entropy over it (nan or inf where the weights overflowed)
  diverged  only where the run has diverged by then (training/faults/divergence.py): why
  checkpoint, mode, network, dataset, test_samples, eval_seconds, evaluated_at (Unix time),
  cpu_seconds (this process's CPU time so far)
The file is rewritten atomically after each evaluation; a restarted evaluator reads it and skips the steps
it holds, so each checkpoint is evaluated once across restarts too.
"""
import json
import logging
import os
import time

from training.faults import divergence
from training.checkpoints import (CheckpointError, checkpoint_path, damage, final_step, read_checkpoint,
                                  saved_steps)
from training.files import atomic_write
from training.snapshots import report_evaluation

log = logging.getLogger("evaluator")

EVALUATOR_LOG = "evaluator.jsonl"
POLL_SECONDS = 0.5


def pending_steps(saved, evaluated):
    """Checkpoint steps not evaluated yet, oldest first."""
    return sorted(set(saved) - set(evaluated))


class EvaluationLog:
    """The evaluator's results, one JSON line per checkpoint; unreadable lines are reported and dropped."""

    def __init__(self, path):
        self.path = path
        self.records = read_evaluations(path)

    @property
    def steps(self):
        return [r["step"] for r in self.records]

    def append(self, record):
        self.records.append(record)
        text = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in self.records)

        def write(tmp):
            with open(tmp, "w") as f:
                f.write(text)
        atomic_write(self.path, write)


def read_evaluations(path):
    """The records of an evaluator log ([] when there is none)."""
    if not os.path.exists(path):
        return []
    records = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            try:
                record = json.loads(line)
                if isinstance(record, dict) and isinstance(record.get("step"), int):
                    records.append(record)
                    continue
            except json.JSONDecodeError:
                pass
            log.warning("%s:%d: not an evaluation record, skipped", path, number)
    return records


class Evaluator:
    def __init__(self, args, model, test_images, test_labels):
        self.args = args
        self.model = model
        self.test_images, self.test_labels = test_images, test_labels
        os.makedirs(args.log_dir, exist_ok=True)
        self.results = EvaluationLog(os.path.join(args.log_dir, EVALUATOR_LOG))
        self.chance = divergence.chance_accuracy(test_labels)
        self.damaged = set()  # steps whose files do not match their checksums: skipped once, with a warning

    def check(self, step):
        """Whether the checkpoint at `step` is intact; a damaged one is named once and never looked at again."""
        problem = damage(self.args.train_dir, step)
        if problem:
            log.warning("checkpoint at step %d in %s is damaged (%s): skipped", step, self.args.train_dir, problem)
            self.damaged.add(step)
        return problem is None

    def evaluate(self, step):
        checkpoint = read_checkpoint(self.args.train_dir, step)
        for key in ("network", "dataset"):
            if checkpoint.get(key) != getattr(self.args, key):
                raise CheckpointError(f"the checkpoint at step {step} in {self.args.train_dir} is of {key} "
                                      f"{checkpoint.get(key)}, not {getattr(self.args, key)}")
        started = time.perf_counter()
        self.model.load(checkpoint_path(self.args.train_dir, step, "params"))
        accuracy, loss = self.model.test(self.test_images, self.test_labels)
        record = {"step": step, "time": checkpoint["time"], "accuracy": accuracy, "loss": loss,
                  "checkpoint": os.path.basename(checkpoint_path(self.args.train_dir, step, "params")),
                  "mode": checkpoint.get("mode"), "network": checkpoint["network"],
                  "dataset": checkpoint["dataset"], "test_samples": len(self.test_labels),
                  "eval_seconds": round(time.perf_counter() - started, 6), "evaluated_at": round(time.time(), 3),
                  "cpu_seconds": round(time.process_time(), 3)}
        diverged = divergence.verdict(self.results.records + [record], self.chance)
        if diverged:
            record["diverged"] = diverged
            log.warning("step %d: the run has diverged: %s", step, diverged)
        self.results.append(record)
        report_evaluation(self.args.train_dir, step, checkpoint["time"], accuracy, diverged)
        log.info("step %d (%.1f s of training): test accuracy %.4f, loss %.4g", step, checkpoint["time"], accuracy,
                 loss)

    def run(self, clock=time.monotonic, sleep=time.sleep):
        """Evaluate checkpoints as they appear; return the number evaluated by this process."""
        train_dir, timeout = self.args.train_dir, self.args.eval_timeout
        log.info("evaluator (pid %d): watching %s, results in %s", os.getpid(), train_dir, self.results.path)
        evaluated = 0
        last_new = clock()
        while True:
            final = final_step(train_dir)  # read first: the marker is written after the last checkpoint
            pending = pending_steps(saved_steps(train_dir), self.results.steps + list(self.damaged))
            for step in pending:
                if self.check(step):
                    self.evaluate(step)
                    evaluated += 1
            if final is not None:
                log.info("the job finished at step %d: %d checkpoint(s) evaluated, %.1f s of CPU time", final,
                         evaluated, time.process_time())
                return evaluated
            if pending:
                last_new = clock()
            elif clock() - last_new >= timeout:
                log.warning("no new checkpoint for %g s and no final marker in %s: stopping (%d evaluated)",
                            timeout, train_dir, evaluated)
                return evaluated
            sleep(POLL_SECONDS)
