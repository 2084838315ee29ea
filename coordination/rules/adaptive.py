"""ESync's adaptive rule: rounds planned as the plan rule's (one request per round), but sized to the aggregation as
well. Each worker reports how long its aggregation takes, and the slowest worker runs as many steps per round as it
takes for the aggregation to keep the workers from computing at most a given share of the round (a communication
period fitted to the measured compute-to-communication ratio, as ADACOMM fits local SGD's), at most a bounded
number (a longer round lets the workers' models drift further apart)."""
import math
import sys
from dataclasses import asdict, dataclass

from coordination import records
from coordination.records import FLOOR_TOLERANCE
from coordination.rules.base import Rule
from coordination.rules.plan import Planning

NAME = "adaptive"


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
    steps = needed / slowest_seconds - FLOOR_TOLERANCE
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
    slowest = records.slowest_worker(workers)
    if slowest is None:
        return RoundPlan(1, 1, None, FIRST_ROUND)
    reported = [worker.a for worker in workers if worker.a is not None]
    aggregation = min(reported) if reported else None
    if aggregation is None:
        m, reason = 1, ONE_STEP
    else:
        m, reason = slowest_steps(aggregation, slowest.c, settings)
    seconds = min(m * slowest.c + records.margin(epsilon, slowest), sys.float_info.max)  # finite: it travels as JSON
    return RoundPlan(records.steps_within(seconds, workers[rank].c), m, aggregation, reason, seconds)


class Adaptive(Rule):
    def described(self, settings):
        return asdict(settings)

    def sizing(self, settings):
        return (f", rounds sized so that the {'overlapped ' if settings.overlap else ''}aggregation idles at most "
                f"{settings.share:g} of each, the slowest running at most {settings.max_slowest_steps} steps")

    def plan(self, job, rank):
        """{"k": its local steps, and the rest of its RoundPlan}."""
        plan = adaptive_plan(job.workers, rank, job.epsilon, job.settings)
        return {"k": plan.steps, "seconds": plan.seconds, "slowest_steps": plan.slowest_steps,
                "aggregation": plan.aggregation, "reason": plan.reason}


class PlanningToTheAggregation(Planning):
    """Asks as the plan rule, reporting its aggregation time too, and steps while its next step would end within
    the round's computing time the answer gives, on its own clock (a count planned from an average step drifts over
    the hundreds of steps a fast worker runs in such a round)."""
    reports_aggregation = True
    sized_by = ("aggregation_share", "max_slowest_steps")

    def ends(self, steps):
        if self.plan.get("seconds") is None:  # the first round: one step
            return steps >= self.plan["k"]
        esync = self.esync
        return esync.clock.now() - esync.round_started + esync.step_seconds > self.plan["seconds"]

    def record(self, record):
        """The planned steps, the slowest worker's, the aggregation time the round was sized to, which bound set
        it, and the round's computing time."""
        super().record(record)
        if "reason" in self.plan:
            record.update({records.PLANNED_SLOWEST_STEPS: self.plan["slowest_steps"],
                           records.PLANNED_AGGREGATION: self.plan["aggregation"],
                           records.PLAN_REASON: self.plan["reason"], records.PLANNED_SECONDS: self.plan["seconds"]})


RULE = Adaptive(NAME, esync=True, worker=PlanningToTheAggregation)
