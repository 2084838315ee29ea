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
from typing import Optional

from coordination.rules import ESYNC_POLICIES, RULES
from training import argtypes, runlog
from training.options import CoordinatedOptions, OptionError, declaration, option
from coordination.records import smoothed
from training.schemes.local_sgd import DeltaAveraging, LocalSGDOptions


POLICIES = ESYNC_POLICIES  # the state server's rules that ESync's workers follow (coordination/rules/)
ROUND_SIZING_FLAGS = ("aggregation_share", "max_slowest_steps")  # what a rule whose worker side reads them sizes


@declaration
class ESyncOptions(CoordinatedOptions, LocalSGDOptions):
    # The paper's rule is "apply" (launch.py paper's default); docs/esync.md, "Keeping every device busy", says why
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
        super().resolve(args)
        readers = [name for name in POLICIES if RULES[name].worker.sized_by]
        for field in ROUND_SIZING_FLAGS:
            if getattr(args, field) is not None and field not in RULES[args.esync_policy].worker.sized_by:
                raise OptionError(f"--{field.replace('_', '-')} sizes the {' or '.join(readers)} policy's rounds: "
                                  f"add --esync-policy {readers[0]}")


class ESync(DeltaAveraging):
    name = "esync"
    description = "ESync, local steps until the state server says ready, then delta aggregation (dist_sync)"
    Options = ESyncOptions
    aggregation_phase = runlog.GLOBAL_UPDATE  # as the original ESync scripts log it
    coordinated = True

    @classmethod
    def virtual_refusal(cls, args):
        policy = getattr(args, "esync_policy", None)
        if policy in RULES and RULES[policy].worker.in_flight:
            return f"esync --esync-policy {policy} times requests in flight beside its steps on the machine's clock"
        return super().virtual_refusal(args)

    def setup(self):
        options = self.options
        coordination = self.transport.coordination  # the job's state server: over HTTP, or in-process (virtual)
        self.client = coordination.client(self.rank, on_not_initialised=self.set_up_job_again)
        self.requests = coordination.executor
        if self.rank == 0:
            self.set_up_job()
        # Setting up the weights ends in a barrier, so /init/ above precedes every worker's first request.
        super().setup()
        self.step_seconds = None
        self.opening = None  # the request that opened this round
        self.rule = RULES[options.esync_policy].worker(self)  # what this worker asks, when (coordination/rules/)
        self.reports_aggregation = self.rule.reports_aggregation

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

    def begin_round(self, completed):
        self.round_started = self.clock.now()
        self.rule.begin_round(completed)

    def round_done(self, steps, step_seconds):
        self.step_seconds = smoothed(self.step_seconds, step_seconds)
        return self.rule.round_done(steps, self.round_opened())

    def abandons_step(self):
        """Whether READY arrived during the step whose gradient was just computed (nonblocking policy): the step is
        then dropped and the round ends with the steps before it."""
        return self.rule.abandons_step()

    def round_record(self):
        """What the policy logs of the round (the plan policies: the local steps the state server planned)."""
        record = super().round_record()
        self.rule.record(record)
        return record

    def round_opened(self):
        """The answer to the request that opened the round (raising what it raised), once; None after that."""
        opening, self.opening = self.opening, None
        return opening.result() if opening is not None else None

    def finish(self):
        self.requests.shutdown()
        self.client.close()
        super().finish()
