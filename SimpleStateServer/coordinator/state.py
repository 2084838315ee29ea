"""Coordination state for ESync ("An Efficient Synchronous Parallel Algorithm for
Distributed ML in Heterogeneous Clusters") and for Non-blocking Synchronous SGD.

ESync: each worker runs local SGD steps and, after every step, asks whether it should stop
and join the synchronous aggregation. The slowest worker does one step per round; a faster
worker keeps stepping while it could still finish another step before the slowest one
finishes its own.

NBSSGD: a round ends when the first worker completes its whole batch. It and every other
worker "arrive" at their next mini-batch boundary; once all have arrived, all aggregate.
Workers learn of the first arrival and of the last one by long-polling /watch/. A job set up
again after a restart (resumed) cannot know who arrived at the round in progress: a worker
told "gathered" just before the restart is already in the aggregation and never asks again.
So the first round such a job hears of counts as gathered once anyone has arrived; the
aggregation itself still waits for every worker.

SSGD with backup workers: a step closes once its first `accept` gradients have arrived (/arrive/ answers whether
this one was among them); a worker that arrives later is told it is late, and its gradient is dropped. Workers
learn that a step closed, and whose gradients it holds, by long-polling /watch/.

ESync's adaptive policy plans rounds like the plan policy, but sizes them to the aggregation as well: each worker
reports how long its aggregation takes, and the slowest worker runs as many steps per round as it takes for the
aggregation to keep the workers from computing at most a given share of the round (a communication period fitted
to the measured compute-to-communication ratio, as ADACOMM fits local SGD's), at most a bounded number.

This module holds those rules and the per-worker records; it has no web framework in it so
the rules can be tested with an injected clock.
"""

import math
import sys
import threading
import time
from dataclasses import asdict, dataclass, field

POLICIES = ("apply", "plan", "nonblocking", "adaptive", "nbsync", "backup")  # nonblocking: the apply rule, asked
# without waiting
# adaptive: the largest share of a round the aggregation may keep the workers from computing, and the most local
# steps the slowest worker runs in one round (a longer round lets the workers' models drift further apart).
DEFAULT_AGGREGATION_SHARE = 0.1
DEFAULT_MAX_SLOWEST_STEPS = 8
MAX_WORKERS = 4096
# Without an explicit epsilon the margin follows the measured step times: a fixed margin
# larger than a step would make every worker stop after one step (plain synchronous SGD).
AUTO_MARGIN_FRACTION = 0.1
# Bounds the plan for absurd step-time ratios (which could overflow to infinity).
MAX_PLANNED_STEPS = 1_000_000
# Keeps floor(0.3 / 0.1) at 3 despite binary rounding.
_FLOOR_TOLERANCE = 1e-9
# NBSSGD rounds kept for late or repeated requests; older ones count as complete.
ROUNDS_KEPT = 4
MAX_WATCH_SECONDS = 30.0


class FieldError(ValueError):
    """A request field that is missing, malformed or out of range."""

    def __init__(self, field_name, problem):
        super().__init__(f"field '{field_name}' {problem}")
        self.field_name = field_name


class NotInitialised(RuntimeError):
    """A worker request arrived before any job was set up with init."""


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
    steps = min(budget / step_seconds + _FLOOR_TOLERANCE, MAX_PLANNED_STEPS)
    return max(1, math.floor(steps))


@dataclass(frozen=True)
class Settings:
    """How the adaptive policy sizes rounds: see slowest_steps()."""
    share: float = DEFAULT_AGGREGATION_SHARE
    max_slowest_steps: int = DEFAULT_MAX_SLOWEST_STEPS
    overlap: bool = False  # the workers' aggregation runs while they compute the next round
    accept: int | None = None  # backup policy: the gradients a step applies (None: every worker's)


@dataclass(frozen=True)
class RoundPlan:
    steps: int                 # the asking worker's local steps this round, at its reported step time
    slowest_steps: int         # the slowest worker's
    aggregation: float | None  # the aggregation time the round is sized to, None while unknown
    reason: str                # which bound set slowest_steps (BOUNDS)
    seconds: float | None = None  # the round's computing time: the slowest's steps plus the margin


FIRST_ROUND, ONE_STEP, COVERS_AGGREGATION, CAPPED = "first round", "one step", "aggregation", "cap"


def slowest_steps(aggregation, slowest_seconds, settings):
    """The slowest worker's local steps per round, and which bound set them. Rounds compute T = m x the slowest
    step, and the aggregation A keeps the workers from computing at most settings.share of each round:
      blocking: a round is T + A, all of A idle:  A <= share (T + A)  <=>  T >= A (1 - share) / share
      overlapped (the aggregation runs during the next round's T): a round is max(T, A), A - T of it idle:
                A - T <= share A  <=>  T >= A (1 - share)
    m is the smallest whole number of steps that satisfies it, and at most settings.max_slowest_steps."""
    share = settings.share
    needed = aggregation * (1 - share) if settings.overlap else aggregation * (1 - share) / share
    steps = needed / slowest_seconds - _FLOOR_TOLERANCE
    if steps > settings.max_slowest_steps:
        return settings.max_slowest_steps, CAPPED
    steps = max(1, math.ceil(steps))
    return steps, (ONE_STEP if steps == 1 else COVERS_AGGREGATION)


def adaptive_plan(workers, rank, epsilon, settings):
    """The adaptive policy's round for worker `rank`: the slowest worker runs slowest_steps() steps, every other
    worker as many of its own as fit in that time plus the margin, `seconds` (the workers step until their own
    clock says the next step would end past it: a count planned from an average step drifts over hundreds of
    steps). The aggregation time is the shortest any worker reported: the last worker to arrive waits for nobody,
    so its aggregation is the transfer alone."""
    slowest = slowest_worker(workers)
    if slowest is None:
        return RoundPlan(1, 1, None, FIRST_ROUND)
    reported = [worker.a for worker in workers if worker.a is not None]
    aggregation = min(reported) if reported else None
    if aggregation is None:
        m, reason = 1, ONE_STEP
    else:
        m, reason = slowest_steps(aggregation, slowest.c, settings)
    seconds = min(m * slowest.c + margin(epsilon, slowest), sys.float_info.max)  # finite: it travels as JSON
    return RoundPlan(steps_within(seconds, workers[rank].c), m, aggregation, reason, seconds)


@dataclass
class Round:
    """One NBSSGD round (who has arrived at a mini-batch boundary since it was finished), or one step of SSGD with
    backup workers (whose gradients it applies)."""
    arrived: set = field(default_factory=set)


def round_status(job, t):
    if job.policy == "backup":
        return backup_status(job, t)
    if t < job.oldest_round:
        return {"finished": True, "gathered": True}
    arrived = job.rounds[t].arrived if t in job.rounds else set()
    everyone = len(arrived) == job.num_workers or (t == job.round_in_progress and bool(arrived))
    return {"finished": bool(arrived), "gathered": everyone}


def backup_status(job, t):
    """Step t of SSGD with backup workers: closed ("finished" and "gathered" alike) once `accept` gradients have
    arrived; "arrived": whose, sorted. A step older than the ones kept closed long ago: nobody late waits for it."""
    if t < job.oldest_round:
        return {"finished": True, "gathered": True, "arrived": []}
    arrived = job.rounds[t].arrived if t in job.rounds else set()
    closed = len(arrived) >= job.settings.accept
    return {"finished": closed, "gathered": closed, "arrived": sorted(arrived)}


def accepts(job, t):
    """Whether a gradient of step t that arrives now is among the step's first `accept`."""
    return t >= job.oldest_round and not backup_status(job, t)["finished"]


@dataclass
class Job:
    num_workers: int
    epsilon: float | None
    policy: str
    workers: list
    settings: Settings = field(default_factory=Settings)
    requests: dict = field(default_factory=lambda: {"apply": 0, "reset": 0, "plan": 0, "arrive": 0, "watch": 0})
    rounds: dict = field(default_factory=dict)
    oldest_round: int = 0
    resumed: bool = False
    round_in_progress: int | None = None  # of a resumed job: the first round it heard of

    def heard_of(self, t):
        if self.resumed and self.round_in_progress is None:
            self.round_in_progress = t

    def round(self, t):
        if t not in self.rounds:
            self.rounds[t] = Round()
            newest = max(self.rounds)
            for old in [old for old in self.rounds if old <= newest - ROUNDS_KEPT]:
                del self.rounds[old]
            self.oldest_round = max(self.oldest_round, newest - ROUNDS_KEPT + 1)
        return self.rounds[t]


class Coordinator:
    """The current job behind one lock, since the web server answers from many threads."""

    def __init__(self, clock=time.monotonic):
        self._clock = clock
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._job = None

    def init(self, num_workers, epsilon=None, policy="apply", resumed=False, settings=Settings()):
        """A new job; `resumed`: the job of a running cluster, set up again after this server restarted."""
        _check_job_settings(num_workers, epsilon, policy, settings)
        with self._lock:
            now = self._clock()
            # A resumed job does not know in which round each worker is: some may wait in an aggregation.
            round_known = None if resumed else 0
            workers = [WorkerRecord(rank=rank, step_start=now, t=round_known) for rank in range(num_workers)]
            self._job = Job(num_workers, epsilon, policy, workers, settings=settings, resumed=resumed)
            self._changed.notify_all()
            return self._describe_settings(self._job)

    def apply(self, rank, k, c, te):
        with self._lock:
            job = self._current_job()
            worker = self._worker(job, rank)
            now = self._clock()
            if c > 0:  # a worker reporting before its first step has no time to give
                worker.c = c
            worker.k, worker.te, worker.step_start = k, te, now
            worker.applies += 1
            job.requests["apply"] += 1
            if k == 0:  # no step done in this round: whatever it said before, it is not ready now
                worker.ready = False
            elif not worker.ready:
                worker.ready = is_ready(job.workers, rank, job.epsilon, now)
            return worker.ready

    def reset(self, rank, t, te):
        with self._lock:
            job = self._current_job()
            worker = self._worker(job, rank)
            worker.k, worker.ready, worker.t, worker.te = 0, False, t, te
            worker.step_start = self._clock()
            worker.resets += 1
            job.requests["reset"] += 1

    def plan(self, rank, c, a=None):
        """This round's plan for worker `rank`, whose step takes `c` s and whose aggregation `a` s: {"k": its local
        steps}, and under the adaptive policy the rest of its RoundPlan. The plan policy sizes rounds to one step
        of the slowest worker and ignores `a`."""
        with self._lock:
            job = self._current_job()
            worker = self._worker(job, rank)
            worker.c = c
            if a is not None:
                worker.a = a
            worker.plans += 1
            job.requests["plan"] += 1
            if job.policy == "adaptive":
                plan = adaptive_plan(job.workers, rank, job.epsilon, job.settings)
                return {"k": plan.steps, "seconds": plan.seconds, "slowest_steps": plan.slowest_steps,
                        "aggregation": plan.aggregation, "reason": plan.reason}
            return {"k": planned_steps(job.workers, rank, job.epsilon)}

    def arrive(self, rank, t):
        """NBSSGD: worker `rank` is at a mini-batch boundary of round t and will aggregate
        (it completed its batch, or it saw that another worker did). Backup workers: its gradient of step t is
        ready; "accepted" says whether the step applies it. Idempotent."""
        with self._lock:
            job = self._current_job()
            self._worker(job, rank)
            job.requests["arrive"] += 1
            job.heard_of(t)
            if job.policy == "backup":
                if accepts(job, t):
                    job.round(t).arrived.add(rank)
                    self._changed.notify_all()
                status = backup_status(job, t)
                return {**status, "accepted": rank in status["arrived"]}
            if t >= job.oldest_round:
                job.round(t).arrived.add(rank)
                self._changed.notify_all()
            return round_status(job, t)

    def watch(self, rank, t, arrived, wait):
        """NBSSGD: the status of round t once it is finished (or, for a worker that has
        arrived, once every worker has), or after `wait` seconds, whichever comes first.
        An arrived worker's watch repeats its arrival, so a restarted server relearns it."""
        if arrived:
            self.arrive(rank, t)
        with self._lock:
            job = self._current_job()
            self._worker(job, rank)
            job.requests["watch"] += 1
            job.heard_of(t)
            wanted = "gathered" if arrived else "finished"
            self._changed.wait_for(lambda: self._job is not job or round_status(job, t)[wanted],
                                   timeout=min(wait, MAX_WATCH_SECONDS))
            return round_status(job, t)

    def snapshot(self):
        with self._lock:
            job = self._job
            if job is None:
                return {"num_workers": None, "epsilon": None, "policy": None,
                        "margin": None, "workers": [], "requests": {}}
            now = self._clock()
            return {**self._describe_settings(job),
                    "workers": [_describe_worker(worker, now) for worker in job.workers],
                    "requests": dict(job.requests),
                    "rounds": {t: sorted(r.arrived) for t, r in sorted(job.rounds.items())}}

    def _current_job(self):
        if self._job is None:
            raise NotInitialised("no job yet: POST /init/ first")
        return self._job

    @staticmethod
    def _worker(job, rank):
        if not 0 <= rank < job.num_workers:
            raise FieldError("r", f"is out of range: rank {rank} with {job.num_workers} workers")
        return job.workers[rank]

    @staticmethod
    def _describe_settings(job):
        slowest = slowest_worker(job.workers)
        current_margin = None if slowest is None else margin(job.epsilon, slowest)
        return {"num_workers": job.num_workers, "epsilon": job.epsilon,
                "policy": job.policy, "margin": current_margin,
                **(asdict(job.settings) if job.policy == "adaptive" else {}),
                **({"accept": job.settings.accept} if job.policy == "backup" else {})}


def _check_job_settings(num_workers, epsilon, policy, settings):
    if not 1 <= num_workers <= MAX_WORKERS:
        raise FieldError("num_workers", f"must be between 1 and {MAX_WORKERS}")
    if epsilon is not None and not (math.isfinite(epsilon) and epsilon >= 0):
        raise FieldError("epsilon", "must be a finite number >= 0")
    if policy not in POLICIES:
        raise FieldError("policy", f"must be one of {', '.join(POLICIES)}")
    if not (math.isfinite(settings.share) and 0 < settings.share <= 1):
        raise FieldError("share", "must be a number in (0, 1]")
    if not 1 <= settings.max_slowest_steps <= MAX_PLANNED_STEPS:
        raise FieldError("max_slowest_steps", f"must be between 1 and {MAX_PLANNED_STEPS}")
    if policy == "backup" and not (settings.accept is not None and 1 <= settings.accept <= num_workers):
        raise FieldError("accept", f"must be between 1 and num_workers ({num_workers}) with policy backup")


def _describe_worker(worker, now):
    record = asdict(worker)
    # Server clock readings mean nothing outside this process; the age of the step does.
    record["step_age"] = now - record.pop("step_start")
    return record
