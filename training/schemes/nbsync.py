"""Non-blocking Synchronous SGD (NBSSGD, Haoze He): nobody waits for the slowest worker's whole batch.

Each worker's batch (-b) is split into --mini-batches M parts; a local step is one part, its gradient added to
the round's sum. A round ends when the first worker completes a whole batch (M parts): it arrives at the state
server, every other worker arrives at its next part boundary, and once all have arrived they aggregate over
dist_sync: push the gradient sums and sample counts, pull the totals, and all apply the same SGD step with the
gradient scaled to one batch per worker (as in SSGD), so every worker keeps identical weights. A worker that
did not finish its batch goes on with the rest of it in the next round.

Arriving does not mean idling: until the last worker has arrived, an arrived worker keeps adding parts to the
round, so a fast worker waits at most for the others' current part instead of the slowest worker's batch.
The state server's answers come from a background long-poll (/watch/), so checking them between parts is free.
"""
import concurrent.futures
import threading
from dataclasses import dataclass
from typing import Optional

from training import argtypes
from training.lazy import mx
from training.options import CoordinatedOptions, ModeError, option
from training.schemes.base import Scheme
from training.transport.state_client import StateClient
from training.faults.watchdog import give_up

WATCH_SECONDS = 2.0  # one long-poll; the watcher asks again until the round's answer comes
PART_SIZE = 32  # NBSSGD's seed splits its batches of 256 into parts of 32; parts of 8 cost more than they save


def parts_of(batch_size, part_size=PART_SIZE):
    """--mini-batches when not given: the most parts of at least `part_size` samples that divide the batch (1 when
    the batch is smaller)."""
    if batch_size < part_size:
        return 1
    return max(p for p in range(1, batch_size // part_size + 1) if batch_size % p == 0)


class RoundWatch:
    """What this worker knows about one round, filled in by the watcher thread."""

    def __init__(self, t):
        self.t = t
        self.finished = threading.Event()   # some worker completed its batch
        self.arrived = threading.Event()    # this worker arrived (set by the training thread)
        self.gathered = threading.Event()   # every worker arrived


@dataclass(frozen=True)
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
        address = (self.options.state_server_ip, self.options.state_server_port)
        retry_for = self.options.sync_timeout
        self.client = StateClient(*address, retry_for=retry_for, on_not_initialised=self._set_up_job_again)
        self.watch_client = StateClient(*address, retry_for=retry_for, timeout=WATCH_SECONDS + 10,
                                        on_not_initialised=self._set_up_job_again)
        self.init_client = StateClient(*address, retry_for=retry_for)
        self.init_lock = threading.Lock()
        if self.rank == 0:
            self.init_client.init(self.num_workers, policy="nbsync")
        self.broadcast_initial_weights()  # ends in a barrier: /init/ precedes every worker's first request
        self.local_trainer(self.options.learning_rate)
        for p in self.model.trainable:
            p.grad_req = "add"  # a round's parts add up in the gradient buffers
        self.model.net.collect_params().zero_grad()
        self.buffers = self.exchanged(p.list_grad() for p in self.model.trainable)
        self.watcher = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="nbsync-watch")
        self.parts_done = 0  # parts of the current batch; carried over rounds
        self.round = None

    def _set_up_job_again(self):
        """A restarted state server has no job: the first worker to find out sets it up again (not rank 0 alone,
        which may be waiting in the aggregation). The watchers of workers that had arrived repeat their arrival, and
        the resumed job counts the round in progress as gathered once anyone has arrived: a worker told "gathered"
        just before the restart already waits in the aggregation and will not arrive again."""
        with self.init_lock:  # both threads may find out at once
            self.init_client.init_again_if_lost(self.num_workers, policy="nbsync")

    def begin_round(self, completed):
        self.round = RoundWatch(completed)
        self.round_parts = 0
        self.watching = self.watcher.submit(self._watch, self.round)

    def round_done(self, steps, step_seconds):
        if self.watching.done() and self.watching.exception():
            raise self.watching.exception()
        self.round_parts += 1
        self.parts_done = (self.parts_done + 1) % self.options.mini_batches
        completed_batch = self.parts_done == 0
        watch = self.round
        if not watch.arrived.is_set():
            if not (completed_batch or watch.finished.is_set()):
                return False
            status = self.client.arrive(self.rank, watch.t)
            watch.arrived.set()
            if status["gathered"]:
                watch.gathered.set()
        return watch.gathered.is_set()

    def _watch(self, watch):
        """Long-polls the state server until round `watch.t` has gathered everyone. The training thread may learn
        first (from its own /arrive/): then this watch ends, and a request being retried is dropped rather than
        telling a restarted server about a round that is over."""
        over = watch.gathered.is_set

        def wanted():
            return not over()

        # Until this worker arrives, the round's end; once it has, its arrival goes with every request, so a
        # restarted server that lost it learns it again.
        while not (watch.finished.is_set() or watch.arrived.is_set() or over()):
            status = self.watch_client.watch(self.rank, watch.t, False, WATCH_SECONDS, still_wanted=wanted)
            if status is not None and status["finished"]:
                watch.finished.set()
        # The training thread arrives at its next part boundary. It keeps computing parts while it waits, so the
        # loop's watchdog would never fire: this thread bounds the wait.
        if not watch.arrived.wait(self.options.sync_timeout):
            give_up(f"round {watch.t} finished but no local step ended within {self.options.sync_timeout:g} s")
        for _ in range(max(1, int(self.options.sync_timeout / WATCH_SECONDS))):
            if over():
                return
            status = self.watch_client.watch(self.rank, watch.t, True, WATCH_SECONDS, still_wanted=wanted)
            if status is not None and status["gathered"]:
                watch.gathered.set()
                return
        give_up(f"not every worker arrived for the aggregation of round {watch.t} within "
                f"{self.options.sync_timeout:g} s: another worker of the job has probably died")

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
        self.watcher.shutdown(wait=False, cancel_futures=True)
        for client in (self.client, self.init_client):
            client.close()
