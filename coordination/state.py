"""The jobs' coordination state behind one lock: per job, the records of its workers (coordination/records.py) and
of NBSSGD's rounds, and the rule it answers by (coordination/rules/, the job's `policy`): ESync's apply, plan,
nonblocking and adaptive rules, Non-blocking Synchronous SGD's rounds, SSGD with backup workers. A server keeps up to
MAX_JOBS jobs by their id, so that several launcher runs or users share one server; a request names its job, or
means DEFAULT_JOB (the one job of clients that name none, as the original scripts'). No web framework here, so that
the rules and the records can be tested with an injected clock.
"""

import hmac
import math
import threading
import time
from dataclasses import asdict, dataclass, field

from coordination.records import MAX_PLANNED_STEPS, MAX_WORKERS, FieldError, Settings, WorkerRecord, margin, \
    slowest_worker
from coordination.rules import RULES

POLICIES = tuple(RULES)
# NBSSGD rounds kept for late or repeated requests; older ones count as complete.
ROUNDS_KEPT = 4
MAX_WATCH_SECONDS = 30.0
MAX_JOBS = 16  # a new job beyond these drops the one that has gone longest without a request, past its liveness
DEFAULT_JOB = "default"  # the job of requests that name none
DEFAULT_LIVENESS = 600.0  # seconds without a request after which a job may make room for a new one


class NotInitialised(RuntimeError):
    """A worker request arrived for a job this server does not have (none set up yet, or lost in a restart)."""


class JobConflict(RuntimeError):
    """A request that cannot be of the job it names (a rank the job does not have)."""


class JobForbidden(RuntimeError):
    """A request for a job whose secret it does not carry (the job's first /init/ fixed it)."""


class ServerFull(RuntimeError):
    """A new job where MAX_JOBS live ones are kept: none has gone its liveness window without a request."""


@dataclass
class Round:
    """One NBSSGD round (who has arrived at a mini-batch boundary since it was finished), or one step of SSGD with
    backup workers (whose gradients it applies)."""
    arrived: set = field(default_factory=set)


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
    secret: str | None = None             # what its requests carry (its first /init/'s); None: the server's token alone
    liveness: float = DEFAULT_LIVENESS    # seconds without a request after which it may be dropped for a new job
    last_request: float = 0.0

    @property
    def rule(self):
        return RULES[self.policy]

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
    """The jobs behind one lock, since the web server answers from many threads."""

    def __init__(self, clock=time.monotonic):
        self._clock = clock
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._jobs = {}  # id: Job, the one with the latest request last

    def init(self, num_workers, epsilon=None, policy="apply", resumed=False, settings=Settings(), job=None,
             secret=None, liveness=None):
        """A new job under the id `job` (DEFAULT_JOB where None), replacing a job of that id (JobForbidden where that
        job has a secret other than `secret`); `resumed`: the job of a running cluster, set up again after this server
        restarted. Where MAX_JOBS jobs are kept, the one longest without a request makes room if it has gone its
        `liveness` without one, else ServerFull. Its settings and its id."""
        _check_job_settings(num_workers, epsilon, policy, settings)
        with self._lock:
            now = self._clock()
            # A resumed job does not know in which round each worker is: some may wait in an aggregation.
            round_known = None if resumed else 0
            workers = [WorkerRecord(rank=rank, step_start=now, t=round_known) for rank in range(num_workers)]
            job = job or DEFAULT_JOB
            if job in self._jobs:
                self._check_secret(job, self._jobs[job], secret)
                del self._jobs[job]
            elif len(self._jobs) >= MAX_JOBS:
                self._make_room(now)
            self._jobs[job] = Job(num_workers, epsilon, policy, workers, settings=settings, resumed=resumed,
                                  secret=secret or None, liveness=liveness or DEFAULT_LIVENESS, last_request=now)
            self._changed.notify_all()
            return {**self._describe_settings(self._jobs[job]), "job": job}

    def admit(self, job, secret):
        """JobForbidden where the job a request names has a secret the request does not carry."""
        with self._lock:
            found = self._jobs.get(job or DEFAULT_JOB)
            if found is not None:
                self._check_secret(job or DEFAULT_JOB, found, secret)

    @staticmethod
    def _check_secret(name, job, secret):
        if job.secret is not None and not hmac.compare_digest((secret or "").encode(), job.secret.encode()):
            raise JobForbidden(f"job {name} is set up with a secret of its own, which this request does not carry")

    def _make_room(self, now):
        idle = [name for name, job in self._jobs.items() if now - job.last_request > job.liveness]
        if not idle:
            raise ServerFull(f"this state server keeps {MAX_JOBS} jobs, each with a request within its liveness "
                             "window: end one, or start another state server for this job")
        del self._jobs[idle[0]]  # the one longest without a request: the latest used are last

    def apply(self, rank, k, c, te, job=None):
        with self._lock:
            job, worker = self._worker_of(job, rank)
            now = self._clock()
            if c > 0:  # a worker reporting before its first step has no time to give
                worker.c = c
            worker.k, worker.te, worker.step_start = k, te, now
            worker.applies += 1
            job.requests["apply"] += 1
            if k == 0:  # no step done in this round: whatever it said before, it is not ready now
                worker.ready = False
            elif not worker.ready:
                worker.ready = job.rule.ready(job, rank, now)
            return worker.ready

    def reset(self, rank, t, te, job=None):
        with self._lock:
            job, worker = self._worker_of(job, rank)
            worker.k, worker.ready, worker.t, worker.te = 0, False, t, te
            worker.step_start = self._clock()
            worker.resets += 1
            job.requests["reset"] += 1

    def plan(self, rank, c, a=None, job=None):
        """This round's plan for worker `rank`, whose step takes `c` s and whose aggregation `a` s: {"k": its local
        steps, and what else the job's rule plans}."""
        with self._lock:
            job, worker = self._worker_of(job, rank)
            worker.c = c
            if a is not None:
                worker.a = a
            worker.plans += 1
            job.requests["plan"] += 1
            return job.rule.plan(job, rank)

    def arrive(self, rank, t, job=None):
        """NBSSGD: worker `rank` is at a mini-batch boundary of round t and will aggregate (it completed its batch,
        or it saw that another worker did). Backup workers: its gradient of step t is ready, and the answer says
        whether the step takes it. Idempotent."""
        with self._lock:
            job, _ = self._worker_of(job, rank)
            job.requests["arrive"] += 1
            job.heard_of(t)
            changed, answer = job.rule.arrive(job, rank, t)
            if changed:
                self._changed.notify_all()
            return answer

    def watch(self, rank, t, arrived, wait, job=None):
        """NBSSGD: the status of round t once it is finished (or, for a worker that has
        arrived, once every worker has), or after `wait` seconds, whichever comes first.
        An arrived worker's watch repeats its arrival, so a restarted server relearns it."""
        if arrived:
            self.arrive(rank, t, job)
        with self._lock:
            job, _ = self._worker_of(job, rank)
            job.requests["watch"] += 1
            job.heard_of(t)
            wanted = "gathered" if arrived else "finished"
            self._changed.wait_for(lambda: job not in self._jobs.values() or job.rule.status(job, t)[wanted],
                                   timeout=min(wait, MAX_WATCH_SECONDS))
            return job.rule.status(job, t)

    def snapshot(self, job=None):
        """The state of the job (DEFAULT_JOB where None), and the ids of every job the server keeps."""
        with self._lock:
            found = self._jobs.get(job or DEFAULT_JOB)
            if found is None:
                return {"num_workers": None, "epsilon": None, "policy": None,
                        "margin": None, "workers": [], "requests": {}, "jobs": list(self._jobs)}
            now = self._clock()
            return {**self._describe_settings(found), "job": job or DEFAULT_JOB, "jobs": list(self._jobs),
                    "workers": [_describe_worker(worker, now) for worker in found.workers],
                    "requests": dict(found.requests),
                    "rounds": {t: sorted(r.arrived) for t, r in sorted(found.rounds.items())}}

    def _worker_of(self, job, rank):
        """(the job a request names, DEFAULT_JOB where it names none; its worker `rank`). A rank out of a job the
        request named is a conflict (another job's worker), out of the default job a bad field."""
        found = self._jobs.pop(job or DEFAULT_JOB, None)
        if found is None:
            raise NotInitialised(f"no job {job or DEFAULT_JOB} (not set up yet, or lost in a restart): POST /init/ "
                                 "first")
        self._jobs[job or DEFAULT_JOB] = found  # the latest used last
        found.last_request = self._clock()
        if not 0 <= rank < found.num_workers:
            if job:
                raise JobConflict(f"job {job} has {found.num_workers} workers: rank {rank} is of another job")
            raise FieldError("r", f"is out of range: rank {rank} with {found.num_workers} workers")
        return found, found.workers[rank]

    @staticmethod
    def _describe_settings(job):
        slowest = slowest_worker(job.workers)
        current_margin = None if slowest is None else margin(job.epsilon, slowest)
        return {"num_workers": job.num_workers, "epsilon": job.epsilon,
                "policy": job.policy, "margin": current_margin, **job.rule.described(job.settings)}


def _check_job_settings(num_workers, epsilon, policy, settings):
    if not 1 <= num_workers <= MAX_WORKERS:
        raise FieldError("num_workers", f"must be between 1 and {MAX_WORKERS}")
    if epsilon is not None and not (math.isfinite(epsilon) and epsilon >= 0):
        raise FieldError("epsilon", "must be a finite number >= 0")
    if policy not in RULES:
        raise FieldError("policy", f"must be one of {', '.join(RULES)}")
    if not (math.isfinite(settings.share) and 0 < settings.share <= 1):
        raise FieldError("share", "must be a number in (0, 1]")
    if not 1 <= settings.max_slowest_steps <= MAX_PLANNED_STEPS:
        raise FieldError("max_slowest_steps", f"must be between 1 and {MAX_PLANNED_STEPS}")
    RULES[policy].check(num_workers, settings)


def _describe_worker(worker, now):
    record = asdict(worker)
    # Server clock readings mean nothing outside this process; the age of the step does.
    record["step_age"] = now - record.pop("step_start")
    return record
