"""SSGD with load-balanced batches (LB-BSP: Chen et al., "Semi-dynamic load balancing: efficient distributed
learning in non-dedicated environments", SoCC 2020): each worker's batch is sized to its measured speed so that all
finish a step together, the global batch (workers x -b) and the learning rate as SSGD's.

Each step is SSGD's: push the gradient sums (the loss is summed over a batch, so the sum is weighted by samples),
pull the total, apply lr x total / (total samples / -b), which is SSGD's update whenever the batches add up to the
global batch. The speeds travel in the same sum: a worker writes its smoothed seconds per sample into its own slot of
the control array, so every worker receives all of them and computes the same plan (batch_plan) with no request to
anyone. The plan is made after the first step and again whenever a worker's speed has drifted by more than
--balance-threshold from the speed the plan was made from (LB-BSP's semi-dynamic re-tuning). A worker whose batch
changes makes one untimed pass of the new size (the first pass of a shape sets up its graph).
"""
import math

from training import argtypes, runlog
from training.lazy import mx
from training.options import ModeError, Options, declaration, fixed, option
from coordination.records import smoothed
from training.schemes.sync import Sync

FIXED = 2  # control slots before the speeds: [stop votes, samples in the step]


def batch_plan(seconds_per_sample, global_batch, minimum=1):
    """Batch sizes proportional to each worker's speed (1 / its seconds per sample) that add up to `global_batch`,
    each at least `minimum`: the largest remainders get the samples that flooring leaves over (ties to the lower
    rank)."""
    speeds = [1.0 / seconds for seconds in seconds_per_sample]
    free = global_batch - minimum * len(speeds)
    if free < 0:
        raise ValueError(f"a global batch of {global_batch} cannot give {len(speeds)} workers {minimum} samples each")
    shares = [free * speed / sum(speeds) for speed in speeds]
    sizes = [minimum + math.floor(share) for share in shares]
    by_remainder = sorted(range(len(shares)), key=lambda i: (-(shares[i] - math.floor(shares[i])), i))
    for i in by_remainder[:global_batch - sum(sizes)]:
        sizes[i] += 1
    return sizes


def drifted(seconds_per_sample, planned_from, threshold):
    """Whether any worker's speed moved by more than `threshold` (a fraction) since the plan was made."""
    return any(abs(planned / now - 1.0) > threshold for now, planned in zip(seconds_per_sample, planned_from))


@declaration
class BalancedOptions(Options):
    balance_threshold: float = option("--balance-threshold", default=0.2, type=argtypes.SHARE,
                                      help="plan the batches again once a worker's speed has drifted by more than "
                                           "this fraction since the last plan, in (0, 1] (default 0.2)")
    update_on_servers: bool = fixed(False)  # its update's scale is known only once the round's sums are in

    @classmethod
    def check(cls, args, num_workers):
        if args.augment != "none":
            raise ModeError(f"-m lb-bsp changes a worker's batch size as it plans; --augment {args.augment} prepares "
                            "batches ahead at one size: add --augment none")


class BalancedSync(Sync):
    name = "lb-bsp"
    description = ("SSGD with load-balanced batches, each worker's sized to its measured speed, the global batch as "
                   "SSGD's (dist_sync)")
    Options = BalancedOptions
    queues_round = False  # the update's scale is the round's samples, summed with the gradients

    def __init__(self, options, model, transport):
        super().__init__(options, model, transport)
        self.control = mx.nd.zeros((FIXED + self.num_workers,))
        self.batch = options.batch_size
        self.seconds_per_sample = None  # this worker's, smoothed
        self.planned_from = None        # every worker's, when the plan was made
        self.replanned = False

    @property
    def step_batch_size(self):
        return self.batch

    def round_done(self, steps, step_seconds):
        self.seconds_per_sample = smoothed(self.seconds_per_sample, step_seconds / self.batch)
        return True

    def aggregate(self, stop_vote):
        self.round_batch = self.batch
        self.corrupt(p.list_grad() for p in self.model.trainable)
        self.control[:] = 0
        self.control[0] = float(stop_vote)
        self.control[1] = float(self.batch)
        self.control[FIXED + self.rank] = self.seconds_per_sample
        self.stats.gather()
        self.transport.sum(self.keys, self.buffers)
        self.stats.scatter(1.0 / self.num_workers)
        control = self.control.asnumpy()
        self.trainer.update(control[1] / self.options.batch_size)
        self.replan(control[FIXED:].tolist())
        return control[0] > 0

    def replan(self, seconds_per_sample):
        global_batch = self.options.batch_size * self.num_workers
        self.replanned = self.planned_from is None or drifted(seconds_per_sample, self.planned_from,
                                                              self.options.balance_threshold)
        if not self.replanned:
            return
        self.planned_from = seconds_per_sample
        batch = batch_plan(seconds_per_sample, global_batch)[self.rank]
        if batch != self.batch:
            self.batch = batch
            self.model.warm_up(batch)

    def round_record(self):
        return {runlog.BATCH: self.round_batch, runlog.REPLANNED: self.replanned}
