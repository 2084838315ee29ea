"""ESync ("An Efficient Synchronous Parallel Algorithm for Distributed ML in Heterogeneous Clusters").

Each worker runs local steps (learning rate -ll; SGD, momentum or Adam, --local-optimizer) for as long as the state
server says the slowest worker is still busy, then all aggregate synchronously over dist_sync: push the round's model
delta, pull the sum, and set weights = start-of-round weights + global_lr * sum / num_workers. BatchNorm statistics
are averaged. The local optimizer's state (momentum, Adam's moments) carries over from round to round.

Four policies: "apply" asks the state server after every local step whether to stop; "plan" asks once per round
how many local steps to do, from the per-step times the workers reported; "adaptive" plans as "plan" but also
reports the worker's aggregation time, and the state server sizes rounds so that the aggregation keeps the workers
from computing at most --aggregation-share of each (the slowest worker then runs more than one step, at most
--max-slowest-steps), answering with the round's computing time, which each worker keeps on its own clock (it
steps while its next step would end within it); "nonblocking" is the paper's non-blocking
mode with delayed ACK (section 4.2): after every local step it sends the apply policy's question and goes on
training without waiting for the answer, reporting as its step time the step plus the questions' round trip; when
READY arrives during a step, that step is abandoned (its gradient is not applied) and the round ends with the steps
before it. The request that opens a round (the
plan, or the apply policy's /reset/) travels while the round's first step runs: nothing needs its answer before
that step is done, and round_done() waits for it before asking anything else, so requests stay in order.

A state server that restarts has lost the job. In the middle of a round nobody waits for it (another worker may
already wait in the aggregation): the round ends there. The first worker that finds the job missing sends /init/
again; the others' requests then go through.
"""
import concurrent.futures
import logging
import time
from dataclasses import dataclass
from typing import Optional

from coordination.rules import ESYNC_POLICIES
from training import argtypes, runlog
from training.options import CoordinatedOptions, OptionError, option
from training.schemes.local_sgd import DeltaAveraging, LocalSGDOptions, smoothed
from training.transport.state_client import StateClient, StateServerUnavailable

log = logging.getLogger("esync")


POLICIES = ESYNC_POLICIES  # the state server's rules that ESync's workers follow (coordination/rules/)
ROUND_SIZING_FLAGS = ("aggregation_share", "max_slowest_steps")  # the adaptive policy's (SimpleStateServer's rule)


@dataclass(frozen=True)
class ESyncOptions(CoordinatedOptions, LocalSGDOptions):
    # The paper's rule is "apply" (launch.py paper's default); docs/modes.md, "Keeping every device busy", says why
    # the default is "adaptive".
    esync_policy: str = option(
        "--esync-policy", default="adaptive", choices=POLICIES,
        help="apply: ask the state server after every local step (the paper's rule); plan: ask once per round for "
             "the number of local steps; nonblocking: ask after every local step without waiting for the answer, "
             "and stop at the READY (the paper's delayed ACK); adaptive: plan, with rounds long enough that the "
             "aggregation idles the workers at most --aggregation-share of each (default)")
    epsilon: Optional[float] = option(
        "--epsilon", type=argtypes.NON_NEGATIVE_FLOAT,
        help="the readiness margin in seconds (default: fitted to the measured step times)")
    aggregation_share: Optional[float] = option(
        "--aggregation-share", type=argtypes.SHARE,
        help="adaptive policy: the largest share of a round the aggregation may keep the workers from computing, in "
             "(0, 1] (default: the state server's, 0.1)")
    max_slowest_steps: Optional[int] = option(
        "--max-slowest-steps", type=argtypes.POSITIVE_INT,
        help="adaptive policy: the most local steps the slowest worker runs in a round; bounds how far the workers' "
             "models drift apart (default: the state server's, 8)")

    @classmethod
    def resolve(cls, args):
        for field in ROUND_SIZING_FLAGS:
            if getattr(args, field) is not None and args.esync_policy != "adaptive":
                raise OptionError(f"--{field.replace('_', '-')} sizes the adaptive policy's rounds: add "
                                  "--esync-policy adaptive")


class ESync(DeltaAveraging):
    name = "esync"
    description = "ESync, local steps until the state server says ready, then delta aggregation (dist_sync)"
    Options = ESyncOptions
    aggregation_phase = runlog.GLOBAL_UPDATE  # as the original ESync scripts log it
    coordinated = True

    def setup(self):
        options = self.options
        self.client = StateClient(options.state_server_ip, options.state_server_port, retry_for=options.sync_timeout,
                                  on_not_initialised=self.set_up_job_again)
        if self.rank == 0:
            self.set_up_job()
        # Setting up the weights ends in a barrier, so /init/ above precedes every worker's first request.
        super().setup()
        self.reports_aggregation = options.esync_policy == "adaptive"
        self.step_seconds = None
        self.plan = {"k": 1}  # the state server's plan of this round (before the first: one step)
        self.opening = None  # the request that opened this round
        self.questions = []  # the nonblocking policy's questions in flight: (answer future, when it was sent)
        self.round_trip = 0.0
        self.requests = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="esync-state")

    @property
    def job_settings(self):
        options = self.options
        return dict(epsilon=options.epsilon, policy=options.esync_policy, share=options.aggregation_share,
                    max_slowest_steps=options.max_slowest_steps, overlap=options.overlap)

    def set_up_job(self):
        self.client.init(self.num_workers, **self.job_settings)

    def set_up_job_again(self):
        """The state server has no job (it restarted): the first worker to find out sets it up again. Not rank 0
        alone: rank 0 may already wait in the aggregation for workers that are waiting for the job."""
        self.client.init_again_if_lost(self.num_workers, **self.job_settings)

    @property
    def plans(self):
        return self.options.esync_policy in ("plan", "adaptive")

    def begin_round(self, completed):
        self.round_started = time.perf_counter()
        if self.plans:
            if self.step_seconds is not None:
                aggregation = self.aggregation_seconds if self.options.esync_policy == "adaptive" else None
                self.opening = self.requests.submit(self.client.plan_round, self.rank, self.step_seconds, aggregation)
        elif completed > 0:
            self.opening = self.requests.submit(self.client.reset, self.rank, completed, time.time())

    def round_done(self, steps, step_seconds):
        self.step_seconds = smoothed(self.step_seconds, step_seconds)
        opened = self.round_opened()
        if self.plans:
            if opened is not None:
                self.plan = opened
            if self.plan.get("seconds") is not None:  # adaptive: the round's time, kept on this worker's clock
                return time.perf_counter() - self.round_started + self.step_seconds > self.plan["seconds"]
            return steps >= self.plan["k"]
        if self.options.esync_policy == "nonblocking":
            return self.answered_ready() or self.ask_without_waiting(steps)
        return self.ready(steps)

    def abandons_step(self):
        """Whether READY arrived during the step whose gradient was just computed (nonblocking policy): the step is
        then dropped and the round ends with the steps before it."""
        return self.options.esync_policy == "nonblocking" and self.answered_ready()

    def answered_ready(self):
        """Whether an answer that has come says READY (False while they travel, or when they said go on). The
        questions still in flight after a READY are dropped: they ask about the same round, and the /reset/ that
        opens the next one goes after them."""
        while self.questions and self.questions[0][0].done():
            answer, sent = self.questions.pop(0)
            self.round_trip = smoothed(self.round_trip, time.perf_counter() - sent)
            try:
                ready = answer.result()
            except StateServerUnavailable as err:
                log.warning("%s: ending this round here", err)
                ready = True
            if ready:
                self.questions = []
                return True
        return False

    def ask_without_waiting(self, steps):
        """Send the question for `steps` and go on: never ready at once. The step time it reports counts the round
        trip, since the answer comes that much later."""
        self.questions.append((self.requests.submit(self.client.apply, self.rank, steps,
                                                    self.step_seconds + self.round_trip, time.time(), retry_for=0),
                               time.perf_counter()))
        return False

    def round_record(self):
        """The plan policies log the local steps the state server planned for this worker's round; the adaptive
        one also the slowest worker's, the aggregation time the round was sized to, and which bound set it."""
        record = super().round_record()
        if not self.plans:
            return record
        record[runlog.PLANNED_STEPS] = self.plan["k"]
        if self.options.esync_policy == "adaptive" and "reason" in self.plan:
            record.update({runlog.PLANNED_SLOWEST_STEPS: self.plan["slowest_steps"],
                           runlog.PLANNED_AGGREGATION: self.plan["aggregation"],
                           runlog.PLAN_REASON: self.plan["reason"], runlog.PLANNED_SECONDS: self.plan["seconds"]})
        return record

    def round_opened(self):
        """The answer to the request that opened the round (raising what it raised), once; None after that."""
        opening, self.opening = self.opening, None
        return opening.result() if opening is not None else None

    def ready(self, steps):
        # No retries: another worker may already wait in the aggregation, for this one.
        try:
            return self.client.apply(self.rank, steps, self.step_seconds, time.time(), retry_for=0)
        except StateServerUnavailable as err:
            log.warning("%s: ending this round here", err)
            return True

    def finish(self):
        self.requests.shutdown()
        self.client.close()
        super().finish()
