"""What the state server knows of each worker of a job, and the ESync rule every coordination rule of the ESync family
reads: which worker is the slowest, and whether a worker should stop stepping (the paper's Algorithm 2) or how many
steps it fits in one of the slowest worker's. Pure functions of the records, tested with an injected clock.
"""
import math
from dataclasses import dataclass

MAX_WORKERS = 4096
DEFAULT_AGGREGATION_SHARE = 0.1  # adaptive: the largest share of a round the aggregation may idle the workers
DEFAULT_MAX_SLOWEST_STEPS = 8    # adaptive: the most local steps of the slowest worker per round (bounds the drift)
# Without an explicit epsilon the margin follows the measured step times: a fixed margin
# larger than a step would make every worker stop after one step (plain synchronous SGD).
AUTO_MARGIN_FRACTION = 0.1
# Bounds the plan for absurd step-time ratios (which could overflow to infinity).
MAX_PLANNED_STEPS = 1_000_000
# Keeps floor(0.3 / 0.1) at 3 despite binary rounding.
FLOOR_TOLERANCE = 1e-9
SMOOTHING = 0.2  # a new sample's weight in the times a worker reports: one step's or round's is noisy on shared cores
# A planned ESync round as the round's log records it (training/runlog.py): the worker's planned local steps; under
# adaptive also the slowest worker's, the aggregation time (s) the round was sized to, which bound set the round's
# length, and the round's computing time (a worker steps while its next step would end within it).
PLANNED_STEPS = "planned_steps"
PLANNED_SLOWEST_STEPS = "planned_slowest_steps"
PLANNED_AGGREGATION = "planned_aggregation"
PLAN_REASON = "plan_reason"
PLANNED_SECONDS = "planned_seconds"


def smoothed(previous, sample):
    """An exponential moving average of measured times (the first sample alone while there is none)."""
    return sample if previous is None else previous + SMOOTHING * (sample - previous)


class FieldError(ValueError):
    """A request field that is missing, malformed or out of range."""

    def __init__(self, field_name, problem):
        super().__init__(f"field '{field_name}' {problem}")
        self.field_name = field_name


@dataclass
class WorkerRecord:
    rank: int
    step_start: float  # server clock; the workers' clocks are not synchronised with it
    c: float | None = None  # seconds per local step, None until first reported
    k: int = 0
    ready: bool = False
    t: int | None = 0  # the round its last /reset/ opened; None: not known (a resumed job, before its /reset/)
    a: float | None = None  # seconds its aggregation took (adaptive policy), None until first reported
    te: float | None = None  # worker clock, kept for display only
    applies: int = 0
    resets: int = 0
    plans: int = 0


def slowest_worker(workers):
    """The worker with the largest step time (ties go to the lowest rank), or None while
    any worker has not reported a step time yet."""
    if any(worker.c is None for worker in workers):
        return None
    return max(workers, key=lambda worker: (worker.c, -worker.rank))


def margin(epsilon, slowest):
    return epsilon if epsilon is not None else AUTO_MARGIN_FRACTION * slowest.c


def time_left(slowest, round_index, now):
    """Seconds until the slowest worker is expected to finish its step of that round."""
    if slowest.t < round_index:
        return slowest.c
    return slowest.c - (now - slowest.step_start)


def is_ready(workers, rank, epsilon, now):
    """Whether worker `rank` should stop stepping and wait for the aggregation."""
    worker = workers[rank]
    if worker.k == 0:
        return False
    slowest = slowest_worker(workers)
    if slowest is None or any(other.t is None for other in workers):
        # Someone's step time or round is unknown (the job's first round, or a server that restarted while that
        # worker waited in the aggregation): one step each, as synchronous SGD; waiting for it could wait forever.
        return True
    if slowest.rank == rank:
        return True
    # The ready flag of a worker still in an older round says nothing about this one.
    if slowest.ready and slowest.t == worker.t:
        return True
    return worker.c + margin(epsilon, slowest) > time_left(slowest, worker.t, now)


def planned_steps(workers, rank, epsilon):
    """Local steps worker `rank` should do in one round so that it finishes about when
    the slowest worker finishes its single step."""
    slowest = slowest_worker(workers)
    if slowest is None:
        return 1
    return steps_within(slowest.c + margin(epsilon, slowest), workers[rank].c)


def steps_within(budget, step_seconds):
    """Whole steps of `step_seconds` in `budget` seconds (at least one)."""
    steps = min(budget / step_seconds + FLOOR_TOLERANCE, MAX_PLANNED_STEPS)
    return max(1, math.floor(steps))


@dataclass(frozen=True)
class Settings:
    """A job's settings as /init/ sends them: how the adaptive rule sizes rounds, and the backup rule's `accept`."""
    share: float = DEFAULT_AGGREGATION_SHARE
    max_slowest_steps: int = DEFAULT_MAX_SLOWEST_STEPS
    overlap: bool = False  # the workers' aggregation runs while they compute the next round
    accept: int | None = None  # backup policy: the gradients a step applies (None: every worker's)
