"""How a job runs, chosen once from its options: processes on this machine, hosts in network namespaces, the hosts
of a dmlc_tracker launcher, or the virtual clock (the whole job in one process, its time charged:
training/clocks/). The rest of the launcher asks the backend what it needs to know, not which clock or hosts a run
has.

| | processes here | namespaces | a tracker's hosts | virtual clock |
|---|---|---|---|---|
| a step's and a link's time | the machine's | the machine's, links shaped | the machine's | charged |
| the state server | a process | a process | a process | in the job's process |
| the model tested by | the evaluator process | the evaluator process | rank 0 beside itself (an evaluator here with `local`) | rank 0 in its loop, at no charged time |
| several runs at once (`--jobs`) | no: each would time the others' load | no | no | yes |
| `--max-time` | waited | waited | waited | charged |
"""
from dataclasses import asdict, dataclass, fields

from training import runlog
from training.checks import UsageError
from training.clocks import virtual


@dataclass(frozen=True)
class Charges:
    """What a virtual clock charges (training/clocks/), under the launcher's option names: a step of one batch on a
    device of slowdown 1, its log-normal spread and the seconds beside its computing; a transfer's latency; a request
    to the state server's rules; a parameter server's adding of a pushed megabyte. Real time charges none of them."""
    step_seconds: float | None = None
    step_jitter: float = 0.0
    step_overhead: float = 0.0
    latency: float = 0.0
    round_trip: float = 0.0
    server_apply: float = 0.0

    @classmethod
    def names(cls):
        return tuple(f.name for f in fields(cls))

    @classmethod
    def of(cls, options):
        """The charges of an experiment or of the launcher's parsed options (none in real time)."""
        return cls(**{name: getattr(options, name) for name in cls.names()}) if of(options).charges_time else None

    def options(self):
        """{the launcher's option: its value}: the launcher's own options, for a run a command starts."""
        return asdict(self)

    def describe(self, comm_ratio):
        return virtual.describe(self.step_seconds, self.step_jitter, comm_ratio, self.latency, self.round_trip,
                                self.step_overhead, self.server_apply)

    def job_file(self):
        """The charges as training/clocks/job.py reads them from a virtual job's file."""
        return {"step_seconds": self.step_seconds, "jitter": self.step_jitter, "overhead": self.step_overhead,
                "latency": self.latency, "round_trip": self.round_trip, "server_apply": self.server_apply}


def charged(ns):
    """(flag, value) of each charge only a virtual clock takes (a fast step's time aside: a real-time run may measure
    it from a file)."""
    return tuple((f"--{name.replace('_', '-')}", getattr(ns, name)) for name in Charges.names()[1:])


class Backend:
    charges_time = False       # a run's steps, transfers and requests charged on a virtual clock
    link_rates_apply = False   # links whose rate the options set (--comm-ratio, --bandwidth): shaped or charged
    state_server_in_job = False
    evaluates_in_loop = False  # rank 0 tests the model in its loop: no evaluator process, no snapshots
    evaluator_here = True      # the evaluator process runs on this machine, where the snapshots land
    parallel_runs = False      # several runs at once keep each one's results (--jobs N)

    def check(self, ns):
        """UsageError (one line) for an option this way of running does not take."""
        if any(value for _, value in charged(ns)):
            raise UsageError("--step-jitter, --step-overhead, --latency, --round-trip and --server-apply are charged "
                             "on a virtual clock: give --clock virtual")
        if getattr(ns, "link_probe", None) and ns.comm_ratio is None:
            raise UsageError("--step-seconds FILE in real time sets --comm-ratio's links: give --comm-ratio and "
                             "--hosts netns too, or --clock virtual")


class Processes(Backend):
    """Processes on this machine, on loopback."""


class Namespaces(Backend):
    """Hosts in network namespaces, their links shaped."""
    link_rates_apply = True


class TrackerHosts(Backend):
    """The hosts of a dmlc_tracker launcher."""

    def __init__(self, tracker):
        self.evaluator_here = tracker == "local"


class VirtualClock(Backend):
    """The whole job in one process, its time charged."""
    charges_time = link_rates_apply = state_server_in_job = evaluates_in_loop = parallel_runs = True
    evaluator_here = False

    def check(self, ns):
        if ns.step_seconds is None or not 0 < ns.step_seconds < float("inf"):
            raise UsageError("--clock virtual: give the devices' step time, --step-seconds S (a step of one batch on a "
                             "device of --slowdown 1, in seconds)")
        for flag, value in charged(ns):
            if not 0 <= value < float("inf"):
                raise UsageError(f"{flag} {value:g}: give 0 or more")
        for flag, given in (("--hosts netns", ns.hosts == "netns"), ("--tracker", ns.tracker),
                            ("--device-share", ns.device_share), ("--sleeping-slowdown", ns.sleeping_slowdown),
                            ("--max-restarts", ns.max_restarts)):
            if given:
                raise UsageError(f"--clock virtual runs the whole job in one process on this machine: leave out {flag}")


def of(options):
    """The backend of an experiment or of the launcher's parsed options (its clock, hosts and tracker)."""
    if getattr(options, "clock", runlog.REAL_CLOCK) == runlog.VIRTUAL_CLOCK:
        return VirtualClock()
    if getattr(options, "tracker", None):
        return TrackerHosts(options.tracker)
    return Namespaces() if getattr(options, "hosts", "local") == "netns" else Processes()
