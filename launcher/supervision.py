"""Watching the processes of a running mode: signals, exits, the PID file and the progress lines."""
import os
import signal
import sys
import time

from launcher.cluster import POLL_SECONDS, JobFailed, describe_exit, processes_in_group, tail
from launcher.experiment import PID_FILE
from training import runlog
from training.checkpoints import saved_steps
from training.evaluator import EVALUATOR_LOG, read_evaluations
from training.snapshots import reported_accuracy
from training.faults.failures import EXIT_INTERRUPTED
from training.files import write_json

FINISH_GRACE = 20.0             # seconds the other workers get once one has exited 0 (they stop together), plus
ITERATIONS_OF_GRACE = 2         # this many of the job's mean global iterations: a worker may be one step from its stop
FINISHED_MARK = "finished:"     # training/loop.py's last line when a worker reached a stop condition


class Interrupted(Exception):
    """SIGINT or SIGTERM reached the launcher."""


class SignalFlag:
    """Notes SIGINT/SIGTERM; the launcher acts on it where it is safe to, so that no started process goes
    untracked (an exception between starting a process and recording it would leave that process behind)."""

    def __init__(self):
        self.received = None

    def install(self):
        """Note the signals from now on; the handlers they had (for restore)."""
        self.received = None
        return {sig: signal.signal(sig, self._note) for sig in (signal.SIGINT, signal.SIGTERM)}

    def restore(self, previous):
        """The handlers `install` replaced, back, so that a caller that runs experiments in its own process (a
        search's trials, a sweep's values) gets its Ctrl-C again; whether a signal was noted meanwhile."""
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        return self.received is not None

    def _note(self, signum, frame):
        self.received = signal.Signals(signum).name

    def check(self):
        if self.received:
            raise Interrupted(self.received)


INTERRUPTS = SignalFlag()


def interrupt(signum, frame):
    """A handler that makes SIGTERM a Ctrl-C: for the commands that stop their runs on KeyboardInterrupt."""
    raise KeyboardInterrupt


def run_subprogram(main, argv):
    """A launch.py sub-program's exit code; Ctrl-C between its runs ends it with EXIT_INTERRUPTED."""
    try:
        return main(argv)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def write_pid_file(group, mode):
    """processes/pids.json: what this launcher started, so that anyone can check or stop it by PID."""
    write_json(os.path.join(group.out_dir, PID_FILE), {
        "launcher": os.getpid(), "mode": mode,
        "processes": [{"name": p.name, "role": p.role, "pid": p.pid, "output": p.output} for p in group.procs],
    })


class Progress:
    """One line every `every` seconds: global iteration, elapsed time, the latest test accuracy (rank 0's, or the
    evaluator's of the snapshots in `snapshot_folder`), cluster samples/s. A job on a `virtual` clock is timed in
    its own seconds, as far as its workers have logged, with the wall time beside them."""

    def __init__(self, label, mode_dir, every, snapshot_folder=None, virtual=False):
        self.label, self.virtual = label, virtual
        self.reader = runlog.RunFollower(mode_dir)
        self.every = every
        self.snapshot_folder = snapshot_folder
        self.started = self.last = time.monotonic()

    def tick(self, line=None):
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            text = (line or self.line)()
            if text:
                print(text, flush=True)

    @property
    def accuracy(self):
        if self.snapshot_folder:
            return reported_accuracy(self.snapshot_folder)
        return self.reader.accuracy

    def line(self):
        r = self.reader.update()
        elapsed = time.monotonic() - self.started
        if not r.rounds:
            return f"[{self.label}] {elapsed:6.1f} s  starting (no iteration logged yet)"
        accuracy = "-" if self.accuracy is None else f"{self.accuracy:.4f}"
        when = f"{r.training_time:6.1f} virtual s ({elapsed:.0f} s wall)" if self.virtual else f"{elapsed:6.1f} s"
        return f"[{self.label}] {when}  iteration {r.rounds}  test accuracy {accuracy}  {r.throughput:.0f} samples/s"

    def finished_line(self):
        r = self.reader.update()
        accuracy = "" if self.snapshot_folder or r.accuracy is None else f", test accuracy {r.accuracy:.4f}"
        unit = "virtual s" if self.virtual else "s"
        return (f"[{self.label}] finished: {r.rounds} global iterations in {r.training_time:.1f} {unit} of training"
                f"{accuracy}, {r.throughput:.0f} samples/s")

    def evaluation_line(self):
        """How far the evaluator is once training has ended, or None when it only has to notice the end."""
        saved, evaluated = len(saved_steps(self.snapshot_folder)), len(read_evaluations(self.evaluator_log))
        return f"[{self.label}] the evaluator has tested {evaluated} of {saved} snapshots" if evaluated < saved else None

    @property
    def evaluator_log(self):
        return os.path.join(self.reader.mode_dir, EVALUATOR_LOG)


class ExitWatch:
    """The order in which processes were seen to exit: the first to fail is the one to blame."""

    def __init__(self, group):
        self.group = group
        self.exits = {}  # name -> (process, seconds since the watch began)
        self.quitters = []  # workers that exited 0 without reaching a stop condition
        self.started = time.monotonic()

    def update(self):
        for proc in self.group.procs:
            if proc.name not in self.exits and proc.poll() is not None:
                self.exits[proc.name] = (proc, time.monotonic() - self.started)
                if proc.role == "worker" and proc.poll() == 0 and FINISHED_MARK not in tail(proc.output, 20):
                    self.quitters.append(proc)

    def first_failed(self):
        return next((p for p, _ in self.exits.values() if p.poll() != 0), None)

    def first_done(self):
        """(process, when) of the first process that exited 0, or None."""
        return next(((p, t) for p, t in self.exits.values() if p.poll() == 0), None)


def pace_allowance(progress):
    """ITERATIONS_OF_GRACE of the job's mean global iterations so far (0 before the first): on slow links one step
    of asynchronous training (a push and a pull of the model) can last minutes, and a job that stops at the end of
    a round may end up to a round after --max-time."""
    r = progress.reader.update()
    return ITERATIONS_OF_GRACE * r.training_time / r.rounds if r.rounds else 0.0


def finish_grace(progress):
    """Seconds the workers get to stop once a process of the job has exited 0."""
    return FINISH_GRACE + pace_allowance(progress)


def supervise(group, finishers, progress, wall_limit):
    """Wait until every process in `finishers` has exited 0; JobFailed if something goes wrong first."""
    watch = ExitWatch(group)
    while True:
        INTERRUPTS.check()
        watch.update()
        failed = watch.first_failed()
        if failed:
            raise JobFailed(failed, f"exited with {describe_exit(failed.poll())}")
        if watch.quitters:
            raise JobFailed(watch.quitters[0], "exited 0 without reaching a stop condition")
        if all(p.poll() == 0 for p in finishers):
            return
        done = watch.first_done()
        elapsed = time.monotonic() - watch.started
        waited = elapsed - done[1] if done else 0.0
        if waited > FINISH_GRACE and waited > (grace := finish_grace(progress)):  # the logs read once the grace is up
            running = ", ".join(p.name for p in finishers if p.poll() is None)
            raise JobFailed(done[0], f"exited, but {running} still ran {grace:.0f} s later")
        if elapsed > wall_limit and elapsed > wall_limit + (allowance := pace_allowance(progress)):
            paced = f" and {ITERATIONS_OF_GRACE} of its mean global iterations ({allowance:.0f} s)" if allowance else ""
            raise JobFailed(None, f"the job still ran after --wall-limit {wall_limit:g} s{paced}")
        progress.tick()
        time.sleep(POLL_SECONDS)


# ps-lite's words where a node could not bind the port the launcher chose for it: another program took the port in
# between (free_port can only choose one that is free at the time). Nothing was trained: the job starts again.
PORT_TAKEN = "bind failed"
PORT_RETRIES = 2


def port_taken(failure):
    """Whether the job failed because a process could not bind the port chosen for it."""
    if failure.proc is None:
        return False
    try:
        with open(failure.proc.output, errors="replace") as f:
            return PORT_TAKEN in f.read()
    except OSError:
        return False


def report_failure(label, failure, group):
    lines = [f"launch.py: [{label}] {failure.reason}" if failure.proc is None else
             f"launch.py: [{label}] {failure.proc.name} ({failure.proc.role}, pid {failure.proc.pid}) "
             f"{failure.reason}"]
    blamed = [failure.proc] if failure.proc else group.running()
    for proc in blamed:
        lines.append(f"  output of {proc.name} (pid {proc.pid}): {proc.output}")
        lines += ["    " + line for line in tail(proc.output, 10).rstrip("\n").splitlines()]
    lines.append(f"launch.py: [{label}] stopping every process of the job")
    print("\n".join(lines), file=sys.stderr, flush=True)


def wait_for_group_to_drain(pgid, timeout):
    """Wait until no live process is left in process group `pgid`; False on timeout."""
    deadline = time.monotonic() + timeout
    while processes_in_group(pgid):
        if time.monotonic() > deadline:
            return False
        INTERRUPTS.check()
        time.sleep(POLL_SECONDS)
    return True
