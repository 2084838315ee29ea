"""Evaluation snapshots: the model rank 0 would have evaluated, handed to the evaluator process off the training path.

With --snapshot-dir D --snapshot-seconds S the evaluating worker (rank 0) never tests the model itself. At the end of
the first global iteration that ends S seconds of training time after its last snapshot, it copies the global model
(ESync's after the aggregation; an asynchronous scheme's, the weights it holds) and trains on; a background thread
writes the copy to D as a checkpoint of weights only (training/checkpoints.py's files: ckpt-<step>.params and its
.json, with the training time it was taken at), and the evaluator (-m evaluate --train-dir D) tests each one on the
whole test set. When training stops rank 0 snapshots the final model, waits for the thread and writes the final
marker, so the last evaluation is of the final model.

The copy is queued on MXNet's engine and the file written by the thread, so a snapshot costs the training thread the
copy alone. A snapshot due while the thread still writes the one before is dropped (and counted) rather than waited
for; the final one always waits.

The evaluator writes the latest accuracy it measured to D/evaluated.json, and whether the run has diverged
(training/faults/divergence.py); rank 0 reads it at each snapshot, so that --target-accuracy still stops a job, later than
the model reached it by the evaluator's delay, and a diverged job stops.
"""
import ctypes
import logging
import os
import queue
import signal
import subprocess
import sys
import threading

from training import checkpoints
from training.files import read_json, write_json

MAIN_PY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "main.py")

log = logging.getLogger("snapshots")

EVALUATED_FILE = "evaluated.json"  # by the evaluator: {"step", "time", "accuracy", "diverged"} of its latest evaluation


class SnapshotError(Exception):
    """A snapshot folder that cannot be used; the message says why."""


def check_snapshot_dir(args):
    """Before any network wait: --snapshot-seconds and --snapshot-dir come together, apart from --train-dir, and a new
    job does not start in the folder of an earlier, finished one. (Every worker runs this check while rank 0 may
    already snapshot: a folder holding snapshots without the final marker is left to SnapshotWriter to refuse.)"""
    folder, period = args.snapshot_dir, args.snapshot_seconds
    if (folder is None) != (period is None):
        raise SnapshotError("--snapshot-seconds and --snapshot-dir go together: the period and the folder the "
                            "evaluator reads")
    if folder is None:
        if args.evaluator_beside:
            raise SnapshotError("--evaluator-beside tests the snapshots of --snapshot-dir: give --snapshot-dir and "
                                "--snapshot-seconds")
        return
    if args.train_dir and os.path.abspath(args.train_dir) == os.path.abspath(folder):
        raise SnapshotError(f"--snapshot-dir {folder} is --train-dir too: give the snapshots a folder of their own")
    if checkpoints.final_step(folder) is not None and not args.resume:
        raise earlier_job(folder)


def earlier_job(folder):
    steps = checkpoints.saved_steps(folder)
    return SnapshotError(f"--snapshot-dir {folder} holds the snapshots of an earlier job (up to step "
                         f"{steps[-1] if steps else '?'}): choose another folder or empty it")


def reported_accuracy(folder):
    """The accuracy of the evaluator's latest evaluation of a snapshot in `folder`, or None before its first."""
    return reported_evaluation(folder)[0]


def reported_evaluation(folder):
    """(accuracy, why the run diverged or None) of the evaluator's latest evaluation of a snapshot in `folder`;
    (None, None) before its first."""
    try:
        found = read_json(os.path.join(folder, EVALUATED_FILE))
        return float(found["accuracy"]), found.get("diverged")
    except (OSError, ValueError, KeyError, TypeError):
        return None, None


def report_evaluation(folder, step, elapsed, accuracy, diverged=None):
    """The evaluator's side of reported_evaluation."""
    write_json(os.path.join(folder, EVALUATED_FILE), {"step": step, "time": elapsed, "accuracy": accuracy,
                                                      "diverged": diverged})


def evaluator_command(snapshot_dir, log_dir, network, dataset, data_dir, timeout, holdout=0):
    """The evaluator's main.py command line (after the interpreter): one core, the workers' -ld."""
    from training.config import EVALUATE_MODE

    return [MAIN_PY, "-m", EVALUATE_MODE, "--train-dir", snapshot_dir, "-n", network, "--dataset", dataset,
            "-dd", data_dir, "-c", "1", "-ld", log_dir, "--eval-timeout", f"{timeout:g}"] + \
        (["--holdout", str(holdout)] if holdout else [])

class EvaluatorBeside:
    """The evaluator process of this worker's snapshots, started by the worker on its own machine: where the
    snapshots stay on the host that takes them (a remote launch.py --tracker, or by hand). It runs at the lowest CPU
    priority on one core, logs beside the worker (-ld), ends with the worker if the worker dies, and is waited for
    once training has ended."""

    def __init__(self, args):
        inactivity = max(args.eval_timeout, 3 * args.snapshot_seconds)
        argv = evaluator_command(args.snapshot_dir, args.log_dir, args.network, args.dataset, args.data_dir,
                                 inactivity, args.holdout)
        env = {k: v for k, v in os.environ.items() if not k.startswith("DMLC_")}  # not a node of the job
        self.timeout = args.eval_timeout
        self.process = subprocess.Popen([sys.executable] + argv, env={**env, "OMP_NUM_THREADS": "1"},
                                        preexec_fn=_idle_and_ending_with_parent)
        log.info("evaluator beside this worker: pid %d, testing %s", self.process.pid, args.snapshot_dir)

    def wait(self):
        """Once the final marker is written: its exit; SnapshotError if it fails or outlasts the timeout."""
        try:
            code = self.process.wait(self.timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise SnapshotError(f"the evaluator (pid {self.process.pid}) had not tested every snapshot "
                                f"{self.timeout:g} s after training ended (--eval-timeout)")
        if code != 0:
            raise SnapshotError(f"the evaluator (pid {self.process.pid}) exited with {code}")
        return code

    def stop(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


PR_SET_PDEATHSIG = 1


def _idle_and_ending_with_parent():
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class SnapshotWriter:
    """Rank 0's side: a copy of the model every `period` seconds of training and at the end, written by a thread."""

    def __init__(self, folder, period, description, resumed=False):
        if checkpoints.saved_steps(folder) and not resumed:
            raise earlier_job(folder)
        self.folder = folder
        self.period = period
        self.description = description
        self.last_taken = 0.0
        self.taken = 0
        self.dropped = 0
        self.failure = None
        self.evaluator = None  # an EvaluatorBeside with --evaluator-beside
        self.pending = queue.Queue(maxsize=1)  # at most one copy waits while another is written
        os.makedirs(folder, exist_ok=True)
        for leftover in (checkpoints.FINAL_MARKER, EVALUATED_FILE):
            if os.path.exists(os.path.join(folder, leftover)):
                os.unlink(os.path.join(folder, leftover))
        self.thread = threading.Thread(target=self._write_pending, name="snapshot-writer", daemon=True)
        self.thread.start()

    def due(self, elapsed):
        return elapsed - self.last_taken >= self.period

    def take(self, step, elapsed, epochs, model):
        """Queue a copy of the model at `step`; dropped (and counted) while the thread is still busy."""
        self._raise_failure()
        self.last_taken = elapsed
        try:
            self.pending.put_nowait((step, elapsed, epochs, model.snapshot()))
            self.taken += 1
        except queue.Full:
            self.dropped += 1

    def finish(self, step, elapsed, epochs, model):
        """The final model's snapshot, every queued one written, then the final marker the evaluator stops at."""
        self._raise_failure()
        self.pending.put((step, elapsed, epochs, model.snapshot()))
        self.taken += 1
        self.pending.put(None)
        self.thread.join()
        self._raise_failure()
        checkpoints.write_final_marker(self.folder, step, elapsed)
        log.info("%d snapshots in %s, the last at step %d (%.1f s)%s", self.taken, self.folder, step, elapsed,
                 f"; {self.dropped} dropped while the writer was busy" if self.dropped else "")

    def reported_evaluation(self):
        return reported_evaluation(self.folder)

    def _write_pending(self):
        from training.model import save_snapshot

        while (item := self.pending.get()) is not None:
            step, elapsed, epochs, arrays = item
            if self.failure is not None:
                continue  # drained unwritten, so that finish() never waits on a full queue
            try:
                checkpoints.write_checkpoint(self.folder, step, elapsed, epochs, self.description,
                                             [("params", lambda path: save_snapshot(path, arrays))])
            except Exception as err:  # handed to the training thread at its next snapshot
                self.failure = err

    def _raise_failure(self):
        if self.failure is not None:
            raise SnapshotError(f"writing a snapshot to {self.folder} failed: {self.failure}")

