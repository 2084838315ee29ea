"""The launcher's command line, read once into a frozen Experiment: what to run, on which workers and hosts, and
where its logs go. Every check raises a one-line UsageError; nothing is started or created here.
"""
import argparse
import dataclasses
import functools
import os
import socket
import uuid
from dataclasses import dataclass, field

from analysis import summary, tuned
from launcher import backends, calibration, checks, cluster_file, help, links, netns, workers
from launcher.commands import CHECKPOINT_EVERY, KEPT_CHECKPOINTS, device_flags
from launcher.dmlc import TRACKERS, split_at_double_dash
from launcher.hosts import LOOPBACK
from training import config, modes, runlog
from training.transport import collectives
from training.attacks import ATTACKS
from training.checks import OneLineErrorParser, UsageError
from training.schemes import esync

# A mode's folder holds the workers' node folders and PROCESSES_FOLDER, with each process's output, PID_FILE and
# NETWORK_FILE (summary.py reads <mode>/<node>/<device>/ folders; that one holds only files).
PROCESSES_FOLDER = runlog.PROCESSES_FOLDER
PID_FILE = "pids.json"
NETWORK_FILE = runlog.NETWORK_FILE
WALL_LIMIT_WITHOUT_MAX_TIME = 6 * 3600.0
SNAPSHOT_FOLDER = runlog.SNAPSHOT_FOLDER
DEFAULT_SNAPSHOT_SECONDS = 0.5

STANDALONE_HELP = ("a mode without a cluster (local) trains one process alone on the fastest worker's device "
                   "and slowdown: the sequential baseline")


@dataclass(frozen=True)
class Cluster:
    """The cluster as its user declares it (the launcher's options, or a cluster file): each worker's device and
    slowdown, the hosts and their links, the parameter servers or the collective. One frozen object: an experiment
    carries it whole, and the links' line, the namespaces and the virtual clock's job all read it."""
    devices: tuple                  # one --devices entry per worker
    slowdowns: tuple                # one factor per worker, as given ("1", "4")
    device_share: float | None      # a fast device's cores under a CPU quota; None: slow devices sleep instead
    devices_described: str          # one line naming how the devices are emulated, for tables
    num_servers: int
    collective: str                 # ps, or an MPI allreduce (training/transport/collectives.py)
    hosts: str                      # local or netns
    bandwidth: str                  # --hosts netns: the links as given ("100mbit"), for messages
    ps_bandwidth: str               # the servers' links, for messages
    worker_rate: int | None         # --hosts netns: bits per second of each worker's link, else None
    ps_rate: int | None             # --hosts netns: of each parameter-server link, else None
    netns_prefix: str | None        # --hosts netns: name prefix of the namespaces, else None
    netns_subnet: str
    comm_ratio: float | None = None  # the links' rate follows this ratio (launcher/comm_ratio.py; virtual: charged)
    regime: dict | None = None      # with comm_ratio, once measured: the fast step, the model's bytes, the rate
    ps_link: str | None = None      # --ps-bandwidth as given (a rate, or a multiple of the workers'); None: theirs
    link_slowdowns: tuple = ()      # --link-slowdown: each worker's link this many times slower; (): none slower

    @property
    def num_workers(self):
        return len(self.devices)

    @property
    def fastest_worker(self):
        """The index of the worker whose device the standalone mode trains on: the first of the least slowed."""
        factors = [float(f) for f in self.slowdowns]
        return factors.index(min(factors))

    @property
    def links_pending(self):
        """True until --comm-ratio's rate has been measured and set (launcher/comm_ratio.resolve)."""
        return self.hosts == "netns" and self.worker_rate is None

    def charged_links(self):
        """The links as training/clocks/job.py reads them from a virtual job's file."""
        return {"ratio": self.comm_ratio, "num_servers": self.num_servers, "ps_bandwidth": self.ps_link,
                "link_slowdowns": [float(f) for f in self.link_slowdowns]}


@dataclass(frozen=True)
class Experiment:
    """One experiment: the same job under several modes, one after another. Built by parse() alone."""
    modes: tuple
    network: str
    dataset: str
    data_dir: str                   # absolute
    cluster: Cluster                # the devices, links and servers, as the user declared them
    max_time: float | None
    max_iters: int | None
    target_accuracy: float | None
    seed: int
    non_iid: bool
    esync_policy: str
    byzantine: int
    attack: str
    attack_scale: float
    validator_device: str
    validators: int                 # modes with a validator: how many
    log_dir: str                    # absolute: the root of <network>/<mode>/
    node_name: str | None           # the workers' log folder; None with --tracker (each worker's host name)
    wall_limit: float               # seconds after which a mode is stopped as hung
    progress_every: float
    figures: bool                   # draw the comparison figures after the modes
    snapshot_seconds: float         # rank 0 snapshots the model for the evaluator this often; 0: the final model only
    worker_args: tuple              # after `--`, for every worker
    tracker: str | None             # None: the launcher starts every process itself
    hostfile: str | None            # absolute, or None
    host_ip: str                    # this machine's address as the job's processes reach it
    link_probe: object = None       # real time, --step-seconds FILE: the Probe comm_ratio sizes the links by
    holdout: int = 0                # training samples held out, which the evaluator tests instead of the test set
    tuned_flags: dict = field(default_factory=dict)  # --tuned: {mode: the flags of its scheme's tuned values}
    max_restarts: int = 0           # times a mode's job is started again from its newest checkpoint after a failure
    checkpoint_every: int = CHECKPOINT_EVERY  # global iterations between a job's checkpoints (0: none)
    resuming: bool = False          # the job now started continues from the newest checkpoint
    clock: str = runlog.REAL_CLOCK  # virtual: the whole job in one process, its time charged (training/clocks/)
    charges: backends.Charges | None = None  # --clock virtual: what a step, a transfer, a request is charged
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12], compare=False)  # a mode's job id starts so
    command: tuple = field(default=(), compare=False)  # the launcher's arguments as given; () where a command built it

    def describe_links(self):
        """One line naming the links the experiment runs on, for tables and figures."""
        return links.describe(self)

    @property
    def num_workers(self):
        return self.cluster.num_workers

    @property
    def validator_hosts(self):
        """--validators when a mode of the experiment has validators: each runs as one more worker, on a host of its
        own; else 0."""
        return validator_hosts(self.modes, self.validators)

    @property
    def evaluator_runs(self):
        """Whether an evaluator process tests rank 0's snapshots (on this machine, where they land)."""
        return self.snapshot_seconds > 0 and self.backend.evaluator_here

    @property
    def backend(self):
        """How the job runs: processes here, namespaces, a tracker's hosts or the virtual clock
        (launcher/backends.py)."""
        return backends.of(self)

    def job_id(self, mode):
        """The id every worker of one mode's job records in its logs (summary.py refuses to mix jobs)."""
        return f"{self.run_id}-{mode}"

    def snapshot_folder(self, mode):
        return os.path.join(self.mode_folder(mode), SNAPSHOT_FOLDER)

    def mode_folder(self, mode):
        """<log-dir>/<network>/<mode>[-attack][-niid]: one mode's logs, summary and processes/ folder."""
        return os.path.join(self.log_dir, self.network, runlog.run_folder(mode, bool(self.byzantine), self.non_iid))


def validator_hosts(mode_names, validators):
    return validators if any(modes.MODES[mode].validator for mode in mode_names) else 0


# ----------------------------------------------------------------------------------------------
# The command line


def build_parser():  # built once per catalog of modes: the commands of many runs ask for it for each run
    return _parser(tuple(modes.MODES.values()))


@functools.lru_cache(maxsize=4)
def _parser(catalog):
    p = OneLineErrorParser(
        prog="launch.py", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=help.EPILOG,
        usage="%(prog)s --modes M1,M2 -n NETWORK (--devices D1,D2,... | --slowdown F1,F2,...) [options] "
              "[-- extra worker args]",
        description="Run the same training job under several synchronization modes, one after another, "
                    "then write each mode's summary JSON, the comparison figures and a table. Arguments after "
                    "`--` are appended to every worker's main.py command line.")
    p.add_argument("--modes", default="esync,sync,async",
                   help=f"comma list of {', '.join(modes.names())} (default: esync,sync,async); "
                        f"{STANDALONE_HELP}")
    p.add_argument("-n", "--network", default=config.default("network"), help="network (see main.py --help)")
    p.add_argument("--dataset", default=config.default("dataset"), choices=config.DATASETS)
    p.add_argument("-dd", "--data-dir", help="folder holding the dataset (default: the first of data, "
                                             "/usr/share/datasets that holds it)")
    p.add_argument("--devices", help="one entry per worker, e.g. cpu,cpu,gpu0+gpu1 (default: one cpu per "
                                     "--slowdown factor)")
    p.add_argument("--slowdown",
                   help="emulated slowdown per worker, a comma list of factors >= 1 (NxF: F for N workers in a row, "
                        "e.g. 48x1,16x4) or one for all (default 1)")
    p.add_argument("--cluster", metavar="FILE", help="the cluster declared in a TOML or JSON file: its devices, links, "
                   "parameter servers and state server, each field one of these flags (launcher/cluster_file.py); "
                   "a flag that sets the same thing beside it is refused")
    add_aggregation_options(p)
    p.add_argument("--max-time", type=float, help="each mode trains this many seconds")
    p.add_argument("--max-iters", type=int, help="each mode trains this many global iterations")
    p.add_argument("--target-accuracy", type=float,
                   help=f"stop once rank 0's test accuracy reaches this; also the accuracy the table times "
                        f"(default for the table: {summary.DEFAULT_TARGET})")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--non-iid", action="store_true", help="split the data by class; logs go to <mode>-niid/")
    p.add_argument("--esync-policy", default=config.default("esync_policy"), choices=esync.POLICIES)
    p.add_argument("--byzantine", type=int, default=0,
                   help="the first K workers are Byzantine (see --attack); logs go to <mode>-attack/")
    p.add_argument("--attack", default=config.default("attack"), choices=ATTACKS)
    p.add_argument("--attack-scale", type=float, default=config.default("attack_scale"))
    p.add_argument("--validator-device", default="cpu",
                   help="modes with a validator (zeno, zeno-async): its device; it runs as an extra worker "
                        "(default cpu)")
    p.add_argument("--validators", type=int, default=1,
                   help="modes with a validator: how many; each judges its share of the workers (training/schemes/"
                        "zeno.py says how their results combine; default 1)")
    p.add_argument("-ld", "--log-dir", "--logs", dest="log_dir", default="logs",
                   help="root of the logs (default: logs)")
    p.add_argument("--node-name", help="the workers' log folder under <mode>/ (default: each worker's host name)")
    p.add_argument("--wall-limit", type=float,
                   help="seconds after which a mode is stopped as hung, plus two of its mean global iterations "
                        "(default: 2 x --max-time + 120 s, "
                        f"or {WALL_LIMIT_WITHOUT_MAX_TIME / 3600:g} h without --max-time or on the virtual clock)")
    links.add_host_options(p)
    add_clock_options(p)
    p.add_argument("--progress-every", type=float, default=2.0, help="seconds between progress lines (default 2)")
    p.add_argument("--no-figures", dest="figures", action="store_false",
                   help="end with the summaries and the table only (no matplotlib)")
    add_snapshot_option(p)
    add_device_options(p)
    add_run_options(p)
    p.add_argument("--holdout", type=int, default=0, help="hold N training samples out of every worker's share: the "
                   "evaluator tests them instead of the test set, never read then (launch.py tune's trials)")
    p.add_argument("--tracker", choices=TRACKERS, help="start the job through MXNet's dmlc_tracker (see below)")
    p.add_argument("-H", "--hostfile", help="--tracker ssh/mpi: the hosts, one per line")
    p.add_argument("--host-ip", help="--tracker: this machine's address as the other hosts reach it "
                                     f"(default {LOOPBACK} for --tracker local)")
    return p


def add_snapshot_option(p):
    p.add_argument("--snapshot-seconds", type=float, default=DEFAULT_SNAPSHOT_SECONDS,
                   help="seconds of training between the snapshots of the model the evaluator process tests "
                        f"(default {DEFAULT_SNAPSHOT_SECONDS:g}; 0: the final model only; see below)")


def add_run_options(p):
    """What every run of the launcher's commands takes: the tuned values, the restarts."""
    p.add_argument("--tuned", metavar="FILE", help="run every mode at the values launch.py tune found for its "
                   "scheme in this run's cell (its tuned.json; a file tuned for another cell is refused)")
    p.add_argument("--max-restarts", type=int, default=0, help="when a process of a mode's job dies, stop the others "
                   "and start the job again from its newest checkpoint, up to N times (default 0: the run fails)")
    p.add_argument("--checkpoint-every", type=int, default=CHECKPOINT_EVERY, metavar="N",
                   help=f"every mode's job saves a checkpoint every N global iterations, the newest "
                        f"{KEPT_CHECKPOINTS} kept, to restart from (default {CHECKPOINT_EVERY}; 0: none, and a "
                        "restart starts the job over)")


def add_clock_options(p, jobs=False):  # jobs: --jobs, for the commands of many runs
    virtual = "--clock virtual: seconds"
    p.add_argument("--clock", choices=(runlog.REAL_CLOCK, runlog.VIRTUAL_CLOCK), default=runlog.REAL_CLOCK,
                   help="real: every process on its own, timed as it runs (default); virtual: a mode's whole job in "
                        "one process, each step charged --step-seconds x its device's --slowdown and each transfer "
                        "its links' (--comm-ratio), the same whatever the machine's load (docs/virtual-clock.md)")
    p.add_argument("--step-seconds", help=f"{virtual} a step of one batch takes on a device of --slowdown 1 (the "
                   "paper's GPUs: about 0.03), or a file of launch.py calibrate for this network and batch size "
                   "(in real time the file's step sizes --comm-ratio's links instead of a run before the first)")
    p.add_argument("--step-jitter", type=float, help="--clock virtual: each step's charge x a log-normal factor of "
                   "mean 1 and this log-spread, seeded per device (default: a calibration file's, else 0)")
    p.add_argument("--step-overhead", type=float, help=f"{virtual} each step is charged beside its computing, "
                   "whatever the slowdown (default: a calibration file's, else 0)")
    p.add_argument("--latency", type=float, default=0.0, help=f"{virtual} each transfer is charged beside its bytes")
    p.add_argument("--round-trip", type=float, help=f"{virtual} each state-server request is charged (default: a "
                   "calibration file's, else 0)")
    p.add_argument("--server-apply", type=float, help=f"{virtual} a parameter server takes to add a pushed megabyte "
                   "into its sum or apply its rule to it (default: a calibration file's, else 0)")
    if jobs:
        p.add_argument("--jobs", type=int, default=1, metavar="N", help="--clock virtual: N runs at once, each in a "
                       "process of its own (default 1); a run's logs are the same whatever runs beside it")


def add_device_options(p):
    p.add_argument("--device-share", type=float,
                   help="the cores of a fast device: each worker runs under a CPU quota of this share divided by its "
                        "--slowdown (default: what fits the cores beside the servers and the evaluator; see below)")
    p.add_argument("--sleeping-slowdown", action="store_true",
                   help="no CPU quotas: a slow worker sleeps after each step instead (the emulation where cgroups "
                        "cannot be used)")


def add_aggregation_options(p):
    p.add_argument("-s", "--num-servers", type=int, default=1, help="ps-lite servers (default 1)")
    p.add_argument("--collective", choices=collectives.NAMES, default=collectives.PS,
                   help="how the synchronous modes aggregate: ps (ps-lite servers, default), or ring, butterfly, "
                        "binary-blocks (MPI's allreduce among the workers, started by mpiexec; see below)")


# The aggregation, host and device options that the experiment commands (paper, regimes, the benchmark) hand on to
# every run they start.
HANDED_ON = ("num_servers", "collective", "hosts", "bandwidth", "comm_ratio", "ps_bandwidth", "link_slowdown",
             "netns_prefix", "netns_subnet", "device_share", "sleeping_slowdown", "tuned", "max_restarts",
             "checkpoint_every", "clock", *backends.Charges.names())


def handed_on(ns):
    """{attribute: value} of the handed-on options a command parsed into `ns` (those its parser has)."""
    return {attribute: getattr(ns, attribute) for attribute in HANDED_ON if hasattr(ns, attribute)}


def options(**given):
    """The launcher's options as its command line gives them: every default, with `given` (attribute names, values
    of the types the parser gives) over them. The commands that start runs of their own build them so; TypeError
    for a name the launcher has no option of."""
    ns = build_parser().parse_args([])
    unknown = sorted(set(given) - set(vars(ns)))
    if unknown:
        raise TypeError(f"the launcher has no option {', '.join(unknown)}")
    vars(ns).update(given)
    return ns


def parse(argv):
    """The Experiment of a launcher command line; UsageError (one line) for bad input."""
    own, worker_args = split_at_double_dash(list(argv))
    described = build(build_parser().parse_args(own), worker_args)
    checks.check_worker_flags_read(worker_args, described.modes)
    return dataclasses.replace(described, command=tuple(argv))


def build(ns, worker_args=()):
    """The Experiment of the launcher's options (parsed, or made by options()) and the arguments every worker gets
    after them; UsageError (one line) for bad input."""
    worker_args = list(worker_args)
    defaults = build_parser().parse_args([])
    if ns.cluster:
        cluster_file.apply(ns, defaults)
    devices = workers.parse_devices(ns.devices, ns.slowdown)
    slowdowns = workers.parse_slowdowns(ns.slowdown or "1", len(devices))
    chosen = parse_modes(ns.modes)
    device_flags(ns.validator_device)
    checks.check_limits(ns, len(devices))
    checks.check_tracker(ns, devices, slowdowns)
    checks.check_modes_read(ns, chosen, defaults)
    checks.check_validators(ns.tracker, chosen)
    checks.check_standalone(ns, chosen)
    checks.check_collective(ns, chosen)
    checks.check_worker_args(worker_args)
    checks.check_snapshot_seconds(ns.snapshot_seconds)
    calibration.resolve_charges(ns, worker_args)
    checks.check_clock(ns, chosen, worker_args)
    if ns.validators < 1 or ns.validators > len(devices):
        raise UsageError(f"--validators {ns.validators}: give 1 to {len(devices)} (at most one per training worker)")
    charges = backends.Charges.of(ns)
    return Experiment(
        modes=chosen, network=ns.network, dataset=ns.dataset, data_dir=data_dir(ns),
        cluster=declared_cluster(ns, devices, slowdowns, charges, validator_hosts(chosen, ns.validators)),
        max_time=ns.max_time,
        max_iters=ns.max_iters, target_accuracy=ns.target_accuracy, seed=ns.seed, non_iid=ns.non_iid,
        esync_policy=ns.esync_policy, byzantine=ns.byzantine, attack=ns.attack, attack_scale=ns.attack_scale,
        validator_device=ns.validator_device, validators=ns.validators, log_dir=os.path.abspath(ns.log_dir),
        node_name=node_name(ns),
        wall_limit=wall_limit(ns), progress_every=ns.progress_every, figures=ns.figures,
        snapshot_seconds=ns.snapshot_seconds, worker_args=tuple(worker_args),
        tracker=ns.tracker, hostfile=ns.hostfile and os.path.abspath(ns.hostfile), host_ip=host_ip(ns),
        holdout=ns.holdout, max_restarts=ns.max_restarts,
        checkpoint_every=ns.checkpoint_every, clock=ns.clock, link_probe=getattr(ns, "link_probe", None),
        charges=charges,
        tuned_flags=tuned.flags_for(ns.tuned, tuned.cell_key(
            ns.network, ns.dataset, ",".join(slowdowns), links.link_of(ns), ns.non_iid), chosen, ns.esync_policy,
            ns.collective)
        if ns.tuned else {})


def declared_cluster(ns, devices, slowdowns, charges, validators):
    """The Cluster of the launcher's options: how the devices are emulated (charged, under CPU quotas, or sleeping),
    the links' rates with --hosts netns, the servers; UsageError (one line) for bad input."""
    if charges:
        share, devices_described = None, charges.describe(ns.comm_ratio)
    else:
        share, devices_described = workers.device_share(slowdowns, ns.device_share, ns.sleeping_slowdown, ns.tracker)
    worker_rate, ps_rate = links.link_rates(ns, len(devices) + ns.num_servers + validators)
    return Cluster(
        devices=devices, slowdowns=slowdowns, device_share=share, devices_described=devices_described,
        num_servers=ns.num_servers, collective=ns.collective, hosts=ns.hosts, bandwidth=links.bandwidth(ns),
        ps_bandwidth=ns.ps_bandwidth or links.bandwidth(ns), worker_rate=worker_rate, ps_rate=ps_rate,
        netns_prefix=(ns.netns_prefix or netns.unique_prefix()) if ns.hosts == "netns" else None,
        netns_subnet=ns.netns_subnet, comm_ratio=ns.comm_ratio, ps_link=ns.ps_bandwidth,
        link_slowdowns=links.link_slowdowns(ns, len(devices)))


# ----------------------------------------------------------------------------------------------
# Each value read and checked


def parse_modes(text):
    chosen = tuple(m.strip() for m in text.split(",") if m.strip())
    known = modes.names()
    unknown = [m for m in chosen if m not in known]
    if unknown or not chosen:
        raise UsageError(f"unknown mode {','.join(unknown) or repr(text)} in --modes (known: {', '.join(known)})")
    if len(set(chosen)) != len(chosen):
        raise UsageError(f"--modes {text} names a mode twice")
    return chosen


# ----------------------------------------------------------------------------------------------
# Values derived from the command line


def data_dir(ns):
    """The absolute data folder of ns.dataset: -dd, or the first folder that holds the dataset; where none does, the
    first folder searched, so that the workers' checks name the files missing there and where to get them."""
    from data import DataError, data_dirs, resolve_data_dir

    try:
        return os.path.abspath(resolve_data_dir(ns.data_dir, ns.dataset))
    except DataError:
        return os.path.abspath((data_dirs() or ("data",))[0])


def host_ip(ns):
    """Where the job's processes reach this machine: loopback unless --tracker says otherwise."""
    return ns.host_ip or LOOPBACK


def node_name(ns):
    """Without --tracker every worker runs here, under this machine's name unless --node-name gives one."""
    return ns.node_name or (None if ns.tracker else socket.gethostname())


def wall_limit(ns):
    """A virtual run's --max-time is charged, not waited: its wall time follows the steps its devices compute."""
    not_waited = not ns.max_time or backends.of(ns).charges_time
    given = ns.wall_limit
    return given if given is not None else WALL_LIMIT_WITHOUT_MAX_TIME if not_waited else 2 * ns.max_time + 120
