"""The runs of a map, a table or a search several at once (`--jobs N`), where their results do not depend on the
machine's load: on a virtual clock (training/clocks/), a run's logs are the same whatever else runs beside it.

Each run is an Experiment that `python -m launcher.studies.parallel RUN.pickle` runs (runner.run) in a process of its own,
at most N at a time, its output in launch-<run id>.txt in its log folder (runs may share one); a line says when
each starts and how it ended.
Interrupted (Ctrl-C, SIGTERM), every run in flight is handed SIGINT, stops the processes it started and is waited
for; the runs not started never start.
"""
import os
import pickle
import signal
import subprocess
import sys

from launcher.cluster import ROOT
from launcher.supervision import interrupt
from training.checks import UsageError
from training.faults.failures import EXIT_FAILURE, EXIT_INTERRUPTED



def check_jobs(jobs, backend):
    """UsageError unless `jobs` runs can share this machine (launcher/backends.py): real-time runs would take each
    other's cores, and their times would measure that."""
    if jobs < 1:
        raise UsageError(f"--jobs {jobs}: give 1 or more")
    if jobs > 1 and not backend.parallel_runs:
        raise UsageError(f"--jobs {jobs} runs several runs at once, whose real times would measure each other's load: "
                         "give --clock virtual, or leave out --jobs")


def output_path(experiment):
    return os.path.join(experiment.log_dir, f"launch-{experiment.run_id}.txt")


def start(experiment):
    os.makedirs(experiment.log_dir, exist_ok=True)
    path = os.path.join(experiment.log_dir, f"launch-{experiment.run_id}.pickle")
    with open(path, "wb") as f:
        pickle.dump(experiment, f)
    with open(output_path(experiment), "w") as out:
        return subprocess.Popen([sys.executable, "-m", "launcher.studies.parallel", path], cwd=ROOT, stdout=out,
                                stderr=subprocess.STDOUT)


def run_at_once(labelled, jobs, prog, finished=None, total=None):
    """Run [(index, label, experiment)] `jobs` at a time; `finished(index, code)` is called as each ends. 0, or
    EXIT_FAILURE when a run failed, EXIT_INTERRUPTED when interrupted (the runs in flight stopped first). `total`:
    how many runs the indices number (a resumed command's, those kept from before included; default, these)."""
    waiting = list(labelled)
    running = {}  # pid -> (Popen, index, label, experiment)
    total, failed = total or len(labelled), 0
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        while waiting or running:
            while waiting and len(running) < jobs:
                index, label, experiment = waiting.pop(0)
                proc = start(experiment)
                running[proc.pid] = (proc, index, label, experiment)
                print(f"[{prog} {index + 1}/{total}] {label} (output in {output_path(experiment)})", flush=True)
            pid, status = os.waitpid(-1, 0)  # the next run to end; no polling
            if pid not in running:
                continue
            proc, index, label, experiment = running.pop(pid)
            proc.returncode = code = os.waitstatus_to_exitcode(status)
            failed += code != 0
            what = "done" if code == 0 else f"failed (exit {code}); see {output_path(experiment)}"
            print(f"[{prog} {index + 1}/{total}] {label}: {what}", flush=True)
            if finished is not None:
                finished(index, code)
    except KeyboardInterrupt:
        for proc, *_ in running.values():
            proc.send_signal(signal.SIGINT)
        for proc, *_ in running.values():
            proc.wait()
        print(f"launch.py {prog}: interrupted; the {total - len(waiting) - len(running)} runs that ended kept their "
              "logs", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        signal.signal(signal.SIGTERM, previous)
    return EXIT_FAILURE if failed else 0


def main(argv):
    import logging

    from launcher import runner

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s",
                        datefmt="%H:%M:%S")
    with open(argv[0], "rb") as f:
        experiment = pickle.load(f)
    os.remove(argv[0])
    return runner.run(experiment)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
