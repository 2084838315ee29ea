"""Non-blocking Synchronous SGD (NBSSGD, Haoze He): nobody waits for the slowest worker's whole batch.

Each worker's batch (-b) is split into --mini-batches M parts; a local step is one part, its gradient added to
the round's sum. A round ends when the first worker completes a whole batch (M parts): it arrives at the state
server, every other worker arrives at its next part boundary, and once all have arrived they aggregate over
dist_sync: push the gradient sums and sample counts, pull the totals, and all apply the same SGD step with the
gradient scaled to one batch per worker (as in SSGD), so every worker keeps identical weights. A worker that
did not finish its batch goes on with the rest of it in the next round.

Arriving does not mean idling: until the last worker has arrived, an arrived worker keeps adding parts to the
round, so a fast worker waits at most for the others' current part instead of the slowest worker's batch.
What a worker asks the state server, and when, is the rule's worker side (coordination/rules/nbsync.py).
"""
from typing import Optional

from coordination.rules.nbsync import NAME as ARRIVALS_POLICY
from training import argtypes
from training.lazy import mx
from training.options import CoordinatedOptions, ModeError, declaration, option
from training.schemes.base import Scheme

PART_SIZE = 32  # NBSSGD's seed splits its batches of 256 into parts of 32; parts of 8 cost more than they save


def parts_of(batch_size, part_size=PART_SIZE):
    """--mini-batches when not given: the most parts of at least `part_size` samples that divide the batch (1 when
    the batch is smaller)."""
    if batch_size < part_size:
        return 1
    return max(p for p in range(1, batch_size // part_size + 1) if batch_size % p == 0)


@declaration
class NBSyncOptions(CoordinatedOptions):
    mini_batches: Optional[int] = option(
        "--mini-batches", type=argtypes.POSITIVE_INT,
        help=f"split each batch into this many parts (-b must be a multiple; default: the most parts of at least "
             f"{PART_SIZE} samples that divide -b, e.g. 2 at -b 64, 8 at -b 256)")

    @classmethod
    def resolve(cls, args):
        if args.mini_batches is None:
            args.mini_batches = parts_of(args.batch_size)

    @classmethod
    def check(cls, args, num_workers):
        if args.batch_size % args.mini_batches:
            raise ModeError(f"-b {args.batch_size} is not a multiple of --mini-batches {args.mini_batches}")


class NonBlockingSync(Scheme):
    name = "nbsync"
    description = ("NBSSGD, parts of a batch until everyone has arrived, then one weighted gradient sum "
                   "(dist_sync)")
    Options = NBSyncOptions
    kvstore = "dist_sync"
    coordinated = True

    def __init__(self, options, model, transport):
        super().__init__(options, model, transport)
        self.control = mx.nd.zeros((2,))  # [stop votes, samples in the round]

    @property
    def step_batch_size(self):
        return self.options.batch_size // self.options.mini_batches

    def setup(self):
        options = self.options
        self.arrivals = self.transport.coordination.arrivals(self.rank, self.num_workers, ARRIVALS_POLICY)
        if self.rank == 0:
            self.arrivals.set_up_job()
        self.broadcast_initial_weights()  # ends in a barrier: /init/ precedes every worker's first request
        self.local_trainer(options.learning_rate)
        for p in self.model.trainable:
            p.grad_req = "add"  # a round's parts add up in the gradient buffers
        self.model.net.collect_params().zero_grad()
        self.buffers = self.exchanged(p.list_grad() for p in self.model.trainable)
        self.parts_done = 0  # parts of the current batch; carried over rounds

    def begin_round(self, completed):
        self.round_parts = 0
        self.arrivals.begin_round(completed)

    def round_done(self, steps, step_seconds):
        self.round_parts += 1
        self.parts_done = (self.parts_done + 1) % self.options.mini_batches
        return self.arrivals.part_done(completed_batch=self.parts_done == 0)

    def aggregate(self, stop_vote):
        self.model.reduce_gradients()
        self.corrupt(p.list_grad() for p in self.model.trainable)
        self.control[0] = float(stop_vote)
        self.control[1] = float(self.round_parts * self.step_batch_size)
        self.stats.gather()
        self.transport.sum(self.keys, self.buffers)
        self.stats.scatter(1.0 / self.num_workers)
        # The summed gradient of all samples, scaled as SSGD scales one batch from each worker.
        self.trainer.update(self.control[1].asscalar() / self.options.batch_size)
        self.model.net.collect_params().zero_grad()
        return stop_vote or self.stop_requested()

    def finish(self):
        self.arrivals.close()
