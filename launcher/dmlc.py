"""Inside a job started through MXNet's dmlc_tracker: the two sub-programs the launcher's --tracker runs.

`launch.py submit DMLC-OPTIONS -- COMMAND` is dmlc_tracker's own submission with the fixes it needs here;
`launch.py task --devices D --slowdown F -- ARGS` is the COMMAND every task runs: main.py, with the task's own
--devices and --slowdown entry for a worker.
"""
import importlib
import logging
import os
import re
import shlex
import subprocess
import sys
import threading

from launcher.cluster import free_port
from launcher.commands import MAIN_PY, device_flags
from training.checks import OneLineErrorParser, UsageError
from training.faults.failures import EXIT_FAILURE, EXIT_USAGE

TRACKERS = ("local", "ssh", "mpi", "slurm", "sge", "yarn", "kubernetes")
# Launchers that number their workers 0..N-1 in one of these variables; the others start identical workers.
TASK_INDEX_VARIABLES = ("DMLC_TASK_ID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")
TRACKERS_WITH_TASK_INDEX = ("local", "mpi", "slurm", "yarn")


def split_at_double_dash(argv):
    if "--" in argv:
        at = argv.index("--")
        return argv[:at], argv[at + 1:]
    return argv, []


def submit(argv):
    """`launch.py submit DMLC-OPTIONS -- COMMAND`: dmlc_tracker's launcher with the fixes it needs here."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s tracker %(levelname)s %(message)s",
                        datefmt="%H:%M:%S")
    from dmlc_tracker import opts

    dmlc_args = opts.get_opts(argv)
    adapt_dmlc_tracker(dmlc_args.host_ip)
    if dmlc_args.cluster == "mpi":
        adapt_mpi_launcher()
    importlib.import_module(f"dmlc_tracker.{dmlc_args.cluster}").submit(dmlc_args)
    return 0


def adapt_dmlc_tracker(host_ip):
    from dmlc_tracker import tracker

    # Python 3.9 removed Thread.isAlive; the tracker still waits on its threads with it.
    if not hasattr(threading.Thread, "isAlive"):
        threading.Thread.isAlive = threading.Thread.is_alive
    if host_ip:
        # The local launcher never passes --host-ip on and would advertise the machine's outside address.
        tracker.get_host_ip = lambda hostIP=None: host_ip
    tracker.PSTracker = ps_tracker_on_a_free_port(tracker.PSTracker)
    # The tracker runs each task in a thread that raises when the task fails, and then waits for the scheduler
    # forever: a failed task must end the submission, so that the launcher sees it and stops the job.
    threading.excepthook = exit_when_a_task_fails


def adapt_mpi_launcher():
    """dmlc_tracker's mpi launcher runs `mpirun` and knows its variables' syntax from `mpirun --version`: Open MPI,
    or an answer containing "mpich". MPICH 4 and 5 answer "HYDRA build details" and are refused ("Unknown MPI
    Version"); Hydra takes `-env NAME VALUE` as the older MPICH did. The mpirun of requirements.txt's mpich lives
    beside this interpreter, which need not be on PATH."""
    from dmlc_tracker import mpi

    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    original = mpi.get_mpi_env

    def get_mpi_env(envs):
        answer = subprocess.run(["mpirun", "--version"], capture_output=True).stdout
        if b"HYDRA" in answer and b"mpich" not in answer:
            return "".join(f" -env {name} {shlex.quote(str(value))}" for name, value in envs.items())
        return original(envs)

    mpi.get_mpi_env = get_mpi_env


def ps_tracker_on_a_free_port(ps_tracker):
    class PSTrackerOnAFreePort(ps_tracker):
        """Takes a free port of the scheduler's address, where the original probes 9091... on every interface."""

        def __init__(self, hostIP, cmd, port=None, port_end=None, envs=None):
            self.port = free_port(hostIP)
            # An empty probe range leaves the original's loop idle and keeps the port chosen above.
            super().__init__(hostIP, cmd, port=self.port, port_end=self.port, envs=envs)

    return PSTrackerOnAFreePort


def exit_when_a_task_fails(hook):
    logging.error("%s; ending the submission", describe_task_failure(hook.exc_value))
    os._exit(EXIT_FAILURE)


def describe_task_failure(error):
    """'worker task 1 failed: Get nonzero return code=-9' from the local launcher's error, whose message also
    carries the task's whole environment; other launchers' errors are shortened."""
    text = str(error)
    role = re.search(r"'DMLC_ROLE': '(\w+)'", text)
    task = re.search(r"'DMLC_TASK_ID': '(\d+)'", text)
    if role and task:
        return f"{role.group(1)} task {task.group(1)} failed: {text.split(' on [', 1)[0]}"
    return f"a task failed: {type(error).__name__}: {text[:300]}"


def run_task(argv):
    """`launch.py task --devices D --slowdown F -- ARGS`: main.py for this task, with its device if a worker."""
    own, main_args = split_at_double_dash(argv)
    args = task_parser().parse_args(own)
    if os.environ.get("DMLC_ROLE") == "worker":
        devices, slowdowns = args.devices.split(","), args.slowdown.split(",")
        try:
            index = task_index(devices, slowdowns)
        except UsageError as error:
            print(f"launch.py task: error: {error}", file=sys.stderr)
            return EXIT_USAGE
        main_args += device_flags(devices[index or 0]) + ["--slowdown", slowdowns[index or 0]]
        main_args += [] if index is None else ["--worker-index", str(index)]
    os.execv(sys.executable, [sys.executable, MAIN_PY] + main_args)


def task_parser():
    """The command line of `launch.py task` before its `--`."""
    parser = OneLineErrorParser(prog="launch.py task")
    parser.add_argument("--devices", required=True)
    parser.add_argument("--slowdown", required=True)
    return parser


def task_index(devices, slowdowns):
    """This worker's entry in --devices, its task index from the launcher; None without one, where all entries are
    equal (the worker's rank is then its position)."""
    found = next(((name, os.environ[name]) for name in TASK_INDEX_VARIABLES if os.environ.get(name)), None)
    if found is None:
        if len(set(devices)) > 1 or len(set(slowdowns)) > 1:
            raise UsageError(f"no task index ({', '.join(TASK_INDEX_VARIABLES)}) to choose among --devices "
                             f"{','.join(devices)}")
        return None
    name, value = found
    if not value.isdigit() or int(value) >= len(devices):
        raise UsageError(f"{name}={value} does not pick one of the {len(devices)} --devices entries")
    return int(value)
