"""Run one experiment: the same job under several synchronization modes, one after another, then summarize and
draw the comparison.

    python launch.py --modes esync,sync,async -n lenet --dataset mnist-5k --devices cpu,cpu,cpu \\
        --slowdown 1,1,4 --max-time 60
    python launch.py --modes esync,sync --devices gpu0,gpu1,gpu0+gpu1 -n resnet18-v1 --max-iters 2000 -- -b 32 -e 10
    python launch.py --tracker ssh -H hosts --host-ip 10.0.0.1 --modes sync --devices gpu0,gpu0 --max-time 600

Without --tracker every process runs on this machine on 127.0.0.1: the state server (esync and nbsync only), the ps-lite
scheduler, -s servers and one worker per --devices entry. Per mode, the iteration logs go to
<logs>/<network>/<mode>[-niid]/<node>/<device>-rank<R>/, and each process's output to <name>.log in the
processes/ folder beside them, with their PIDs in processes/pids.json.

With --tracker, MXNet's own dmlc_tracker starts the scheduler, servers and workers (see --help).
"""
import argparse
import contextlib
import glob
import importlib
import logging
import os
import re
import shlex
import signal
import socket
import sys
import threading
import time

import config
import netns
import summary
from cluster import (
    LOOPBACK,
    ROOT,
    Host,
    ProcessGroup,
    describe_exit,
    free_port,
    processes_in_group,
    start_ps_job,
    tail,
)
from training import modes, runlog
from training.files import write_json

log = logging.getLogger("launch")

MAIN_PY = os.path.join(ROOT, "main.py")
LAUNCH_PY = os.path.abspath(__file__)
MANAGE_PY = os.path.join(ROOT, "SimpleStateServer", "manage.py")

TRACKERS = ("local", "ssh", "mpi", "slurm", "sge", "yarn", "kubernetes")
# Launchers that number their workers 0..N-1 in one of these variables; the others start identical workers.
TASK_INDEX_VARIABLES = ("DMLC_TASK_ID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")
TRACKERS_WITH_TASK_INDEX = ("local", "mpi", "slurm", "yarn")
# Worker flags the launcher sets itself; given after `--` they would silently break the run.
RESERVED_WORKER_FLAGS = {
    "-m", "--mode", "-dcasgd", "--use-dcasgd", "--zeno-flavour", "-ld", "--log-dir", "--node-name", "-c", "--cpu",
    "-g", "--gpu", "--slowdown", "-ip", "--state-server-ip", "-port", "--state-server-port", "-s", "--split-by-class",
    "-n", "--network", "--dataset", "-dd", "--data-dir", "--seed", "--max-time", "--max-iters", "--target-accuracy",
    "--esync-policy", "--byzantine", "--attack", "--attack-scale", "--validator",
}

PROCESSES_FOLDER = "processes"  # summary.py reads <mode>/<node>/<device>/ folders; this one holds only files
PID_FILE = "pids.json"
NETWORK_FILE = "network.json"   # --hosts netns: bytes each host's link carried during the mode
POLL_SECONDS = 0.2
STATE_SERVER_STARTUP = 30.0     # seconds for Django to answer
FINISH_GRACE = 20.0             # seconds the other workers get once one has exited 0 (they stop together)
FINISHED_MARK = "finished:"     # training/loop.py's last line when a worker reached a stop condition
PS_EXIT_GRACE = 10.0            # seconds scheduler and servers get to exit after the workers
WALL_LIMIT_WITHOUT_MAX_TIME = 6 * 3600.0
EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 1, 2, 130

CPU_DEVICE = re.compile(r"^cpu([1-9]\d*)?$")
GPU_DEVICE = re.compile(r"^gpu(\d+)$")

HELP_EPILOG = f"""
devices: one --devices entry per worker: cpu (-c 1), cpuN (N CPU contexts, -c N), gpuK (-g K), gpu0+gpu1
  (one worker splitting each batch over GPUs 0 and 1, -g 0,1).

--tracker LAUNCHER: instead of starting the processes itself, the launcher runs MXNet's dmlc_tracker (the copy
  shipped with mxnet 1.9.1) as `python launch.py submit DMLC-OPTIONS -- COMMAND`, printed before it starts, with
  fixes for Python 3.11 (Thread.isAlive), for the local launcher ignoring --host-ip, and a free scheduler port.
  The tracker starts the same COMMAND for every task: `python launch.py task --devices D --slowdown F -- ARGS`.
  For a worker it picks entry i of --devices and --slowdown, where i is the worker's task index from
  {', '.join(TASK_INDEX_VARIABLES)} (set by the {', '.join(TRACKERS_WITH_TASK_INDEX)} launchers, workers
  numbered 0..N-1), then runs main.py with that device; for the scheduler and servers it runs main.py alone.
  The ssh and kubernetes launchers give no task index, so they need identical --devices entries (and one
  --slowdown); the shipped sge launcher cannot start a ps-lite job and is refused. The task index is not the
  ps-lite rank: each worker's meta.json records its device, slowdown and rank.
  Remote hosts need this repository and the data at the same paths, and --host-ip must be an address of this
  machine they can reach (it runs the scheduler and, for the modes that use one, the state server). All output of
  the job goes to processes/tracker.log; progress and summaries read the logs that land on this machine.

--hosts netns: every host of the job is a Linux network namespace of its own (root only), joined to the
  others by a bridge through a veth link shaped with tc tbf to --bandwidth (workers) and --ps-bandwidth (the
  parameter-server hosts) in each direction: host `ps` runs the scheduler, the state server and server 0, `psN`
  server N, `wK` worker K. Processes run under `ip netns exec` with the addresses of their hosts. Each mode's
  processes/{NETWORK_FILE} holds the bytes each link carried. The namespaces are removed at the end, also on
  failure and Ctrl-C; after a killed launcher, `python netns.py clean` removes what it left.

exit codes: 0 done, 1 a process failed or the wall limit was reached, 2 bad input, 130 interrupted.
"""


class UsageError(Exception):
    """A mistake in the command line, reported in one line before anything starts."""


class Interrupted(Exception):
    """SIGINT or SIGTERM reached the launcher."""


class SignalFlag:
    """Notes SIGINT/SIGTERM; the launcher acts on it where it is safe to, so that no started process goes
    untracked (an exception between starting a process and recording it would leave that process behind)."""

    def __init__(self):
        self.received = None

    def install(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._note)

    def _note(self, signum, frame):
        self.received = signal.Signals(signum).name

    def check(self):
        if self.received:
            raise Interrupted(self.received)


INTERRUPTS = SignalFlag()


# ----------------------------------------------------------------------------------------------
# Command line


def build_parser():
    p = config.OneLineErrorParser(
        prog="launch.py", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=HELP_EPILOG,
        usage="%(prog)s --modes M1,M2 -n NETWORK --devices D1,D2,... [options] [-- extra worker args]",
        description="Run the same training job under several synchronization modes, one after another, "
                    "then write each mode's summary JSON, the comparison figures and a table. Arguments after "
                    "`--` are appended to every worker's main.py command line.")
    p.add_argument("--modes", default="esync,sync,async",
                   help=f"comma list of {', '.join(modes.cluster_names())} (default: esync,sync,async)")
    p.add_argument("-n", "--network", default=config.DEFAULTS["network"], help="network (see main.py --help)")
    p.add_argument("--dataset", default=config.DEFAULTS["dataset"], choices=config.DATASETS)
    p.add_argument("-dd", "--data-dir", default=config.DEFAULTS["data_dir"], help="folder holding the dataset")
    p.add_argument("--devices", required=True, help="one entry per worker, e.g. cpu,cpu,gpu0+gpu1")
    p.add_argument("--slowdown", default="1",
                   help="emulated slowdown per worker, a comma list of factors >= 1 or one for all (default 1)")
    p.add_argument("-s", "--num-servers", type=int, default=1, help="ps-lite servers (default 1)")
    p.add_argument("--max-time", type=float, help="each mode trains this many seconds")
    p.add_argument("--max-iters", type=int, help="each mode trains this many global iterations")
    p.add_argument("--target-accuracy", type=float,
                   help=f"stop once rank 0's test accuracy reaches this; also the accuracy the table times "
                        f"(default for the table: {summary.DEFAULT_TARGET})")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--non-iid", action="store_true", help="split the data by class; logs go to <mode>-niid/")
    p.add_argument("--esync-policy", default=config.DEFAULTS["esync_policy"], choices=config.ESYNC_POLICIES)
    p.add_argument("--byzantine", type=int, default=0,
                   help="the first K workers are Byzantine (see --attack); logs go to <mode>-attack/")
    p.add_argument("--attack", default=config.DEFAULTS["attack"], choices=config.ATTACKS)
    p.add_argument("--attack-scale", type=float, default=config.DEFAULTS["attack_scale"])
    p.add_argument("--validator-device", default="cpu",
                   help="modes with a validator (zeno, zeno-async): its device; it runs as an extra worker "
                        "(default cpu)")
    p.add_argument("--logs", default="logs", help="root of the logs (default: logs)")
    p.add_argument("--node-name", help="the workers' log folder under <mode>/ (default: each worker's host name)")
    p.add_argument("--wall-limit", type=float,
                   help="seconds after which a mode is stopped as hung (default: 2 x --max-time + 120 s, "
                        f"or {WALL_LIMIT_WITHOUT_MAX_TIME / 3600:g} h without --max-time)")
    p.add_argument("--hosts", choices=("local", "netns"), default="local",
                   help="local: every process on 127.0.0.1 (default); netns: one network namespace per host "
                        "with rate-limited links (see below)")
    p.add_argument("--bandwidth", default="1gbit", help="--hosts netns: each worker link's rate (default 1gbit)")
    p.add_argument("--ps-bandwidth", help="--hosts netns: each parameter-server link's rate (default --bandwidth)")
    p.add_argument("--netns-prefix", help="--hosts netns: name prefix of the namespaces (default esync-<random>-)")
    p.add_argument("--netns-subnet", default=netns.DEFAULT_SUBNET,
                   help=f"--hosts netns: the hosts' addresses (default {netns.DEFAULT_SUBNET})")
    p.add_argument("--progress-every", type=float, default=2.0, help="seconds between progress lines (default 2)")
    p.add_argument("--tracker", choices=TRACKERS, help="start the job through MXNet's dmlc_tracker (see below)")
    p.add_argument("-H", "--hostfile", help="--tracker ssh/mpi: the hosts, one per line")
    p.add_argument("--host-ip", help="--tracker: this machine's address as the other hosts reach it "
                                     f"(default {LOOPBACK} for --tracker local)")
    return p


def parse_args(argv):
    own, worker_args = split_at_double_dash(argv)
    args = build_parser().parse_args(own)
    args.worker_args = worker_args
    args.modes = parse_modes(args.modes)
    args.devices = [d.strip() for d in args.devices.split(",")]
    for device in args.devices:
        device_flags(device)
    args.slowdowns = parse_slowdowns(args.slowdown, len(args.devices))
    device_flags(args.validator_device)
    check_limits(args)
    check_tracker(args)
    check_hosts(args)
    validated = [mode for mode in args.modes if modes.MODES[mode].validator]
    if args.tracker and validated:
        raise UsageError(f"--modes {validated[0]} needs its validator process, which --tracker does not start: "
                         f"run {validated[0]} without --tracker, or start its processes by hand (README)")
    check_worker_args(args.worker_args)
    args.data_dir = os.path.abspath(args.data_dir)
    args.logs = os.path.abspath(args.logs)
    if args.wall_limit is None:
        args.wall_limit = 2 * args.max_time + 120 if args.max_time else WALL_LIMIT_WITHOUT_MAX_TIME
    return args


def split_at_double_dash(argv):
    if "--" in argv:
        at = argv.index("--")
        return argv[:at], argv[at + 1:]
    return argv, []


def parse_modes(text):
    chosen = [m.strip() for m in text.split(",") if m.strip()]
    known = modes.cluster_names()
    unknown = [m for m in chosen if m not in known]
    if unknown or not chosen:
        raise UsageError(f"unknown mode {','.join(unknown) or repr(text)} in --modes (known: {', '.join(known)})")
    if len(set(chosen)) != len(chosen):
        raise UsageError(f"--modes {text} names a mode twice")
    return chosen


def device_flags(device):
    """main.py flags of one --devices entry: cpu -> -c 1, cpu2 -> -c 2, gpu1 -> -g 1, gpu0+gpu1 -> -g 0,1."""
    cpu = CPU_DEVICE.match(device)
    if cpu:
        return ["-c", cpu.group(1) or "1"]
    gpus = [GPU_DEVICE.match(part) for part in device.split("+")]
    if all(gpus):
        return ["-g", ",".join(m.group(1) for m in gpus)]
    raise UsageError(f"--devices entry {device!r} is not cpu, cpuN, gpuK or gpuK+gpuL")


def parse_slowdowns(text, num_workers):
    factors = [f.strip() for f in text.split(",")]
    if len(factors) == 1:
        factors *= num_workers
    if len(factors) != num_workers:
        raise UsageError(f"--slowdown has {len(factors)} factors but --devices has {num_workers} workers")
    for factor in factors:
        try:
            value = float(factor)
        except ValueError:
            raise UsageError(f"--slowdown factor {factor!r} is not a number")
        if not 1 <= value < float("inf"):
            raise UsageError(f"--slowdown factor {factor} must be >= 1 (a device F times slower)")
    return factors


def check_limits(args):
    if args.max_time is None and args.max_iters is None:
        raise UsageError("give --max-time or --max-iters (a target accuracy alone may never be reached)")
    if args.num_servers < 1:
        raise UsageError(f"-s {args.num_servers}: at least one server is needed")
    if args.progress_every <= 0 or (args.wall_limit is not None and args.wall_limit <= 0):
        raise UsageError("--progress-every and --wall-limit must be positive")
    if not 0 <= args.byzantine < len(args.devices):
        raise UsageError(f"--byzantine {args.byzantine}: must leave at least one of the {len(args.devices)} "
                         "workers honest")


def check_tracker(args):
    if args.tracker is None:
        if args.hostfile or args.host_ip:
            raise UsageError("-H/--hostfile and --host-ip only apply with --tracker")
        args.host_ip = LOOPBACK
        args.node_name = args.node_name or socket.gethostname()
        return
    if args.tracker == "sge":
        raise UsageError("--tracker sge: the sge launcher shipped with mxnet 1.9.1 cannot start a ps-lite job "
                         "(it reads options its opts.py does not define, logdir and vcores, and never sets DMLC_ROLE)")
    if args.tracker == "local":
        args.host_ip = args.host_ip or LOOPBACK
    elif not args.host_ip:
        raise UsageError(f"--tracker {args.tracker} needs --host-ip: this machine's address as the hosts reach it")
    if args.tracker == "ssh" and not args.hostfile:
        raise UsageError("--tracker ssh needs -H/--hostfile")
    if args.tracker not in TRACKERS_WITH_TASK_INDEX and (len(set(args.devices)) > 1 or len(set(args.slowdowns)) > 1):
        raise UsageError(f"--tracker {args.tracker} starts identical workers: give the same device to each "
                         "(e.g. --devices gpu0,gpu0) and one --slowdown")


def check_hosts(args):
    args.placement = args.virtual_network = None
    if args.hosts == "local":
        return
    if args.tracker:
        raise UsageError("--hosts netns starts the processes itself: leave out --tracker")
    try:
        args.worker_rate = netns.parse_rate(args.bandwidth)
        args.ps_rate = netns.parse_rate(args.ps_bandwidth or args.bandwidth)
        netns.parse_subnet(args.netns_subnet, len(args.devices) + args.num_servers + validator_hosts(args))
    except ValueError as error:
        raise UsageError(f"--hosts netns: {error}")
    args.netns_prefix = args.netns_prefix or netns.unique_prefix()


def validator_hosts(args):
    """1 when a mode of the experiment has a validator: it runs as one more worker, on a host of its own."""
    return int(any(modes.MODES[mode].validator for mode in args.modes))


def check_worker_args(worker_args):
    for token in worker_args:
        if token.split("=", 1)[0] in RESERVED_WORKER_FLAGS:
            raise UsageError(f"{token} after -- is set by the launcher; use the launcher's own option")


def check_workers_can_start(args):
    """main.py's own checks of every worker's command line, devices and data, before any process starts."""
    from training import checks

    for index in range(len(args.devices)):
        config.build_parser().parse_args(worker_argv(args, args.modes[0], index, os.devnull, state_port=1)[1:])
    if args.tracker not in (None, "local"):
        return  # the devices and the data are on the other hosts
    os.environ.pop("DMLC_ROLE", None)  # importing mxnet under DMLC_ROLE=server would run a server here
    checked = set()
    for index, device in enumerate(args.devices):
        if device in checked:
            continue
        # The first mode's real log folder: main.py checks that it can be created and written.
        worker = config.parse_args(worker_argv(args, "sync", index, mode_folder(args, args.modes[0]), state_port=1)[1:])
        try:
            checks.check_worker(worker, len(args.devices))
        except checks.UsageError as error:
            raise UsageError(str(error))
        checked.add(device)


# ----------------------------------------------------------------------------------------------
# Command lines of the processes


def mode_folder(args, mode):
    return os.path.join(args.logs, args.network, runlog.run_folder(mode, bool(args.byzantine), args.non_iid))


def shared_worker_args(args, mode, log_dir, state_port):
    """main.py arguments every worker of a mode gets; the device and the slowdown differ per worker."""
    command = ["-m", mode, "-n", args.network, "--dataset", args.dataset, "-dd", args.data_dir,
                                  "-ld", log_dir, "--seed", str(args.seed)]
    if args.node_name:
        command += ["--node-name", args.node_name]
    if args.non_iid:
        command += ["-s", "1"]
    if modes.MODES[mode].state_server:
        command += ["-ip", args.host_ip, "-port", str(state_port)]
    if mode == "esync":
        command += ["--esync-policy", args.esync_policy]
    if args.byzantine:
        command += ["--byzantine", str(args.byzantine), "--attack", args.attack, "--attack-scale", str(args.attack_scale)]
    for flag, value in (("--max-time", args.max_time), ("--max-iters", args.max_iters),
                        ("--target-accuracy", args.target_accuracy)):
        if value is not None:
            command += [flag, str(value)]
    return command + args.worker_args


def sync_timeout_args(worker_args):
    """The workers' --sync-timeout, which the scheduler and servers use too (a dead peer, a job that never forms)."""
    for index, token in enumerate(worker_args):
        if token.startswith("--sync-timeout="):
            return [token]
        if token == "--sync-timeout" and index + 1 < len(worker_args):
            return worker_args[index:index + 2]
    return []


def worker_argv(args, mode, index, log_dir, state_port):
    return ([MAIN_PY] + shared_worker_args(args, mode, log_dir, state_port) + device_flags(args.devices[index])
            + ["--slowdown", args.slowdowns[index]])


def tracker_argv(args, mode, log_dir, state_port):
    """`launch.py submit DMLC-OPTIONS -- COMMAND`, COMMAND being the `launch.py task` every task runs."""
    dmlc_options = ["--cluster", args.tracker, "--num-workers", str(len(args.devices)),
                    "--num-servers", str(args.num_servers), "--host-ip", args.host_ip]
    if args.hostfile:
        dmlc_options += ["--host-file", os.path.abspath(args.hostfile)]
    task = [sys.executable, LAUNCH_PY, "task", "--devices", ",".join(args.devices),
            "--slowdown", ",".join(args.slowdowns), "--"] + shared_worker_args(args, mode, log_dir, state_port)
    # dmlc_tracker joins the command with spaces and hands it to a shell.
    return [LAUNCH_PY, "submit"] + dmlc_options + ["--"] + [shlex.quote(part) for part in task]


# ----------------------------------------------------------------------------------------------
# Log folders


def clear_earlier_run(mode_dir, summary_name):
    """A mode folder holds one run: an earlier run's iteration logs would mix into this run's summary."""
    patterns = ["*/*/iter-*.txt", "*/*/meta.json", "*/*/model-final.params", f"{PROCESSES_FOLDER}/*", summary_name]
    stale = [path for pattern in patterns for path in glob.glob(os.path.join(mode_dir, pattern))]
    for path in stale:
        os.unlink(path)
    for folder in glob.glob(os.path.join(mode_dir, "*", "*")) + glob.glob(os.path.join(mode_dir, "*")):
        if os.path.isdir(folder) and not os.listdir(folder):
            os.rmdir(folder)
    if stale:
        log.info("removed %d files of an earlier run from %s", len(stale), mode_dir)


def write_pid_file(group, mode):
    """processes/pids.json: what this launcher started, so that anyone can check or stop it by PID."""
    write_json(os.path.join(group.out_dir, PID_FILE), {
        "launcher": os.getpid(), "mode": mode,
        "processes": [{"name": p.name, "role": p.role, "pid": p.pid, "output": p.output} for p in group.procs],
    })


class Progress:
    """One line every `every` seconds: global iteration, elapsed time, rank 0's accuracy, cluster samples/s."""

    def __init__(self, label, mode_dir, every):
        self.label = label
        self.reader = runlog.RunFollower(mode_dir)
        self.every = every
        self.started = self.last = time.monotonic()

    def tick(self):
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            print(self.line(), flush=True)

    def line(self):
        r = self.reader.update()
        elapsed = time.monotonic() - self.started
        if not r.rounds:
            return f"[{self.label}] {elapsed:6.1f} s  starting (no iteration logged yet)"
        accuracy = "-" if r.accuracy is None else f"{r.accuracy:.4f}"
        return (f"[{self.label}] {elapsed:6.1f} s  iteration {r.rounds}  test accuracy {accuracy}  "
                f"{r.throughput:.0f} samples/s")


# ----------------------------------------------------------------------------------------------
# Watching a job


class JobFailed(Exception):
    """A process of the job failed; `proc` is the one to blame (None when no single one is)."""

    def __init__(self, proc, reason):
        super().__init__(reason)
        self.proc = proc
        self.reason = reason


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
        if done and elapsed - done[1] > FINISH_GRACE:
            running = ", ".join(p.name for p in finishers if p.poll() is None)
            raise JobFailed(done[0], f"exited, but {running} still ran {FINISH_GRACE:g} s later")
        if elapsed > wall_limit:
            raise JobFailed(None, f"the job still ran after --wall-limit {wall_limit:g} s")
        progress.tick()
        time.sleep(POLL_SECONDS)


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


# ----------------------------------------------------------------------------------------------
# One mode


def start_state_server(group, host, mode):
    """The state server on a free port of `host`; the workers' rank 0 initialises it."""
    logging.getLogger("training.state_client").setLevel(logging.ERROR)  # refusals are expected while it starts
    port = netns.on_host(host, free_port, host.address)
    proc = group.start_python("state-server", [MANAGE_PY, "runserver", f"{host.address}:{port}", "--noreload"],
                              role="state", command_prefix=host.command_prefix, host=host.name)
    write_pid_file(group, mode)
    if netns.on_host(host, wait_until_answering, proc, host.address, port):
        return port
    reason = "exited before answering" if proc.poll() is not None else f"did not answer in {STATE_SERVER_STARTUP:g} s"
    raise JobFailed(proc, reason)


def wait_until_answering(proc, address, port):
    from training.state_client import StateClient, StateServerUnavailable

    deadline = time.monotonic() + STATE_SERVER_STARTUP
    with StateClient(address, port) as client:
        while proc.poll() is None and time.monotonic() < deadline:
            INTERRUPTS.check()
            try:
                client.wait_until_up(timeout=0.5)
                return True
            except StateServerUnavailable:
                continue
    return False


def start_processes(args, mode, group, log_dir, state_port, label):
    """Scheduler, servers and workers of one mode; returns the workers."""
    def record_and_check():
        write_pid_file(group, mode)
        INTERRUPTS.check()

    workers_argv = [worker_argv(args, mode, w, log_dir, state_port) for w in range(len(args.devices))]
    if modes.MODES[mode].validator:
        workers_argv.append([MAIN_PY] + shared_worker_args(args, mode, log_dir, state_port)
                            + device_flags(args.validator_device) + ["--validator"])
    ps_argv = [MAIN_PY, "-m", mode] + sync_timeout_args(args.worker_args)
    return start_ps_job(group, ps_argv, workers_argv, args.num_servers, record_and_check, args.placement)


def start_tracker(args, mode, group, log_dir, state_port, label):
    argv = tracker_argv(args, mode, log_dir, state_port)
    print(f"[{label}] dmlc_tracker command: {shlex.join([sys.executable] + argv)}", flush=True)
    env = {"DMLC_NODE_HOST": args.host_ip, "DMLC_INTERFACE": "lo"} if args.tracker == "local" else {}
    tracker = group.start_python("tracker", argv, env, role="tracker")
    write_pid_file(group, mode)
    return [tracker]


def run_mode(args, mode, position):
    """Train one mode to its stop condition; 0, or EXIT_FAILED after reporting what failed."""
    label = f"{mode} {position + 1}/{len(args.modes)}"
    log_dir = mode_folder(args, mode)
    os.makedirs(log_dir, exist_ok=True)
    clear_earlier_run(log_dir, summary.summary_file_name(os.path.basename(log_dir)))
    with ProcessGroup(os.path.join(log_dir, PROCESSES_FOLDER)) as group:
        print(f"[{label}] {len(args.devices)} workers ({describe_workers(args)}), {args.num_servers} server(s); "
              f"logs in {log_dir}, process outputs and PIDs in {group.out_dir}", flush=True)
        meter = netns.LinkMeter(args.virtual_network) if args.virtual_network else None
        try:
            needs_state = modes.MODES[mode].state_server
            state_port = start_state_server(group, state_server_host(args), mode) if needs_state else None
            start = start_tracker if args.tracker else start_processes
            finishers = start(args, mode, group, log_dir, state_port, label)
            progress = Progress(label, log_dir, args.progress_every)
            supervise(group, finishers, progress, args.wall_limit)
        except JobFailed as failure:
            report_failure(label, failure, group)
            return EXIT_FAILED
        finally:
            if meter:
                meter.stop()
        print(finished_line(label, progress), flush=True)
        if meter:
            report_links(label, meter, group.out_dir)
        let_parameter_servers_exit(args, group, finishers)
    return 0


def state_server_host(args):
    return args.placement.scheduler if args.placement else Host("local", args.host_ip, "lo")


def report_links(label, meter, out_dir):
    """The bytes each link carried during the mode, into processes/network.json and one line."""
    report = meter.report()
    write_json(os.path.join(out_dir, NETWORK_FILE), report)
    servers = [name for name in report["links"] if name.startswith("ps")]
    print(f"[{label}] parameter-server links over {report['seconds']:.1f} s: "
          f"{netns.describe_links(report, servers)}", flush=True)


@contextlib.contextmanager
def hosts_of_the_job(args):
    """With --hosts netns, the namespaces and links of every host, removed on the way out whatever happens."""
    if args.hosts == "local":
        yield
        return
    network = netns.VirtualNetwork(args.netns_prefix, args.netns_subnet)
    try:
        network.create()
        num_workers = len(args.devices) + validator_hosts(args)
        args.placement = netns.build_cluster(network, args.num_servers, num_workers, args.worker_rate, args.ps_rate)
        args.virtual_network, args.host_ip = network, args.placement.scheduler.address
        print(f"hosts: namespaces {args.netns_prefix}*, parameter servers at "
              f"{', '.join(h.address for h in args.placement.servers)} ({args.ps_bandwidth or args.bandwidth}), "
              f"workers {', '.join(h.address for h in args.placement.workers)} ({args.bandwidth})", flush=True)
        INTERRUPTS.check()
        yield
    finally:
        network.teardown()


def describe_workers(args):
    return ", ".join(d if float(f) == 1 else f"{d} x{f}" for d, f in zip(args.devices, args.slowdowns))


def finished_line(label, progress):
    r = progress.reader.update()
    accuracy = "" if r.accuracy is None else f", test accuracy {r.accuracy:.4f}"
    return (f"[{label}] finished: {r.rounds} global iterations in {r.training_time:.1f} s of training"
            f"{accuracy}, {r.throughput:.0f} samples/s")


def let_parameter_servers_exit(args, group, finishers):
    """Scheduler and servers exit by themselves once the workers are done; what is left is stopped."""
    if args.tracker:
        drained = wait_for_group_to_drain(finishers[0].pid, PS_EXIT_GRACE)
    else:
        drained = group.wait([p for p in group.procs if p.role in ("scheduler", "server")], PS_EXIT_GRACE)
    if not drained:
        log.warning("scheduler or servers still ran %g s after the workers; stopping them", PS_EXIT_GRACE)


# ----------------------------------------------------------------------------------------------
# Summaries, figures and the table


def summarize_and_draw(args):
    """Summary JSON per mode, figures of this experiment's modes, and a table; 0 or EXIT_FAILED."""
    import drawer

    network_dir = os.path.join(args.logs, args.network)
    folders = [os.path.basename(mode_folder(args, mode)) for mode in args.modes]
    target = args.target_accuracy or summary.DEFAULT_TARGET
    try:
        summary.summarize_modes(network_dir, folders, target, None)
    except summary.SummaryError as error:
        elsewhere = " (with a remote --tracker the logs stay on the hosts)" if args.tracker != "local" else ""
        print(f"launch.py: no summary: {error}{elsewhere}", file=sys.stderr)
        return 0 if args.tracker not in (None, "local") else EXIT_FAILED
    runs = sorted(filter(None, (summary.load_summary(network_dir, f) for f in folders)), key=drawer.run_order)
    INTERRUPTS.check()
    figures_dir = os.path.join(network_dir, "figures")
    figures = drawer.draw_all(runs, args.network, figures_dir, drawer.parse_args(["-n", args.network]))
    print()
    print(format_table(runs, target))
    print("summaries: " + ", ".join(summary.summary_path(network_dir, run["mode"]) for run in runs))
    print("figures:\n" + "\n".join(f"  {path}" for path in figures), flush=True)
    return 0


def format_table(runs, target):
    headers = ["mode", "samples/s", f"time to {target:g} (s)", "final accuracy", "traffic (MB/s)"]
    columns = [("cluster_throughput", ".1f"), ("time_to_accuracy", ".1f"), ("final_accuracy", ".4f"),
               ("traffic_mb_per_s", ".2f")]
    return summary.text_table(headers, [[run["mode"]] + [summary.format_cell(run.get(key), spec)
                                                         for key, spec in columns] for run in runs])


# ----------------------------------------------------------------------------------------------
# Inside a dmlc_tracker job: `launch.py submit` and `launch.py task`


def submit_to_dmlc_tracker(argv):
    """`launch.py submit DMLC-OPTIONS -- COMMAND`: dmlc_tracker's launcher with the fixes it needs here."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s tracker %(levelname)s %(message)s",
                        datefmt="%H:%M:%S")
    from dmlc_tracker import opts

    dmlc_args = opts.get_opts(argv)
    adapt_dmlc_tracker(dmlc_args.host_ip)
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
    os._exit(EXIT_FAILED)


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
    parser = config.OneLineErrorParser(prog="launch.py task")
    parser.add_argument("--devices", required=True)
    parser.add_argument("--slowdown", required=True)
    args = parser.parse_args(own)
    if os.environ.get("DMLC_ROLE") == "worker":
        devices, slowdowns = args.devices.split(","), args.slowdown.split(",")
        try:
            index = task_index(devices, slowdowns)
        except UsageError as error:
            print(f"launch.py task: error: {error}", file=sys.stderr)
            return EXIT_USAGE
        main_args += device_flags(devices[index]) + ["--slowdown", slowdowns[index]]
    os.execv(sys.executable, [sys.executable, MAIN_PY] + main_args)


def task_index(devices, slowdowns):
    """This worker's entry in --devices: its task index from the launcher, or 0 when all entries are equal."""
    found = next(((name, os.environ[name]) for name in TASK_INDEX_VARIABLES if os.environ.get(name)), None)
    if found is None:
        if len(set(devices)) > 1 or len(set(slowdowns)) > 1:
            raise UsageError(f"no task index ({', '.join(TASK_INDEX_VARIABLES)}) to choose among --devices "
                             f"{','.join(devices)}")
        return 0
    name, value = found
    if not value.isdigit() or int(value) >= len(devices):
        raise UsageError(f"{name}={value} does not pick one of the {len(devices)} --devices entries")
    return int(value)


# ----------------------------------------------------------------------------------------------


def run_experiment(args):
    with hosts_of_the_job(args):
        for position, mode in enumerate(args.modes):
            code = run_mode(args, mode, position)
            if code:
                return code
    INTERRUPTS.check()
    code = summarize_and_draw(args)
    INTERRUPTS.check()
    return code


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["submit"]:
        return submit_to_dmlc_tracker(argv[1:])
    if argv[:1] == ["task"]:
        return run_task(argv[1:])
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s",
                        datefmt="%H:%M:%S")
    try:
        args = parse_args(argv)
        if args.hosts == "netns":
            netns.check_available(args.netns_prefix)
        check_workers_can_start(args)  # last: it creates the first mode's log folder
    except (UsageError, netns.NetnsUnavailable) as error:
        print(f"launch.py: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    INTERRUPTS.install()
    try:
        return run_experiment(args)
    except Interrupted as signal_name:
        print(f"launch.py: stopped by {signal_name}; every process it started has been stopped", file=sys.stderr)
        return EXIT_INTERRUPTED
    except netns.NetnsError as error:
        print(f"launch.py: could not build the hosts of --hosts netns: {error}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
