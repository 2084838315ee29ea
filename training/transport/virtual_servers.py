"""The kvstore servers of a job on a virtual clock (training/clocks/): one in-process store with the semantics of
ps-lite's dist_async servers, for the schemes that push to and pull from the kvstore itself (ASGD, DC-ASGD,
Downpour, FedAsync, FedBuff, Zeno++, ...).

A worker's kvstore (VirtualKVStore) offers the calls those schemes make: init, set_optimizer, push, pull, pushpull.
The servers keep one array a key; the update rule handed over by set_optimizer runs on each push alone, as
MXNet's servers run it (updater(key, pushed, stored)), on an unpickled copy of the rule, as theirs do.

Time. Each key lives on the server ps-lite places it on (clocks/network.py); each server's link carries one transfer
at a time in each direction, in the order the transfers are asked for (ties by rank), and a worker's own link its
whole push or pull (Network.reserve). A push returns at once and lands when its last part is in; a pull reads the store when its request arrives (after the worker's
own pushes that landed by then) and returns once its download ends. Landed pushes are applied in the order they
land (ties by the order they were asked for) before any read at a later or equal time, so each read sees exactly
the pushes that landed before it, whatever order the threads ran in.
"""
import heapq
import itertools
import pickle

from training.clocks.network import DOWN, UP
from training.clocks.scheduler import VirtualJobFailed
from training.transport.collectives import copies_of, local_sum


class VirtualServers:
    """The job's servers: the store, the rule, the pushes in flight and their link's two directions."""

    def __init__(self, scheduler, network):
        self.scheduler, self.network = scheduler, network
        self.store = {}
        self.updater = None
        self.in_flight = []           # (lands at, order asked, key, value) of the pushes not yet applied
        self.order = itertools.count()
        self.free = {}                # (server, direction): when its link is free that way
        self.applied = 0              # pushes applied so far (the rule's update count on every key)

    def transfer(self, rank, start, keys, arrays, direction):
        """When a transfer of `arrays` under `keys` that worker `rank` asks for at `start` ends (direction: DOWN at
        the servers for a push, UP for a pull's answer)."""
        held = [sum(parts) for parts in self.network.shards(keys, [array.size for array in arrays])]
        end = self.network.reserve(self.free, rank, held, start, direction)
        if end < start:
            raise VirtualJobFailed(f"a transfer asked for at {start} s would end at {end} s, before it started")
        return end

    def send(self, lands, key, value):
        heapq.heappush(self.in_flight, (lands, next(self.order), key, value))

    def apply_landed(self, now):
        """Apply, in the order they landed, the pushes in flight that landed by `now`."""
        while self.in_flight and self.in_flight[0][0] <= now:
            _, _, key, value = heapq.heappop(self.in_flight)
            self.apply(key, value)

    def apply(self, key, value):
        from mxnet import nd

        stored = self.store.get(key)
        if stored is None:
            raise KeyError(f"a push to key {key}, which no worker initialised")
        if self.updater is None:
            stored[:] = value  # ps-lite's servers without a rule keep what was pushed last
        else:
            self.updater(key, nd.array(value, dtype=stored.dtype), stored)
        self.applied += 1

    def initialise(self, keys, values):
        from mxnet import nd

        for key, value in zip(keys, values):
            self.store[key] = nd.array(value, dtype=value.dtype)

    def set_rule(self, rule):
        from mxnet import optimizer

        self.updater = optimizer.get_updater(pickle.loads(pickle.dumps(rule)))


class VirtualKVStore:
    """One worker's kvstore on the job's VirtualServers; counts the payload bytes as the ps-lite one does."""
    type = "dist_async"

    def __init__(self, servers, rank, num_workers, traffic):
        self.servers, self.rank, self.num_workers, self.traffic = servers, rank, num_workers, traffic
        self.scheduler = servers.scheduler
        self.landed = 0.0  # when this worker's last push lands: its pulls read after it, as ps-lite orders them

    def init(self, keys, values):
        """Rank 0's values become the keys' first; every worker goes on once all have asked (MXNet's init ends
        with a barrier)."""
        keys, values = _listed(keys, values)
        mine = [local_sum(v) for v in values] if self.rank == 0 else None

        def store(contributions, arrivals):
            self.servers.initialise(keys, contributions[0])
            last = max(arrivals.values())
            return None, {rank: last for rank in arrivals}

        self.scheduler.meet(self.rank, mine, store)
        if self.rank == 0:
            self.traffic.add(sum(v.nbytes for v in mine), 0)

    def set_optimizer(self, rule):
        self.servers.set_rule(rule)

    def _barrier(self):
        self.scheduler.meet(self.rank, None, lambda contributions, arrivals: (
            None, dict.fromkeys(arrivals, max(arrivals.values()))))

    def push(self, keys, values, priority=0):
        keys, values = _listed(keys, values)
        arrays = [local_sum(v) for v in values]
        nbytes = sum(a.nbytes for a in arrays)
        lands = self.servers.transfer(self.rank, self.scheduler.now(self.rank), keys, arrays, DOWN)
        for key, array in zip(keys, arrays):
            self.servers.send(lands, key, array)
        self.landed = lands
        self.traffic.add(nbytes, 0)

    def pull(self, keys, out=None, priority=0, ignore_sparse=True):
        """Read the keys once the request is at the servers, after this worker's last push; return once the values
        are back."""
        keys, out = _listed(keys, out)
        reads = max(self.scheduler.now(self.rank) + self.servers.network.workers[self.rank].latency, self.landed)
        self._wait_until(reads)
        self.servers.apply_landed(reads)
        values = [self.servers.store[key].asnumpy() for key in keys]
        nbytes = sum(v.nbytes for v in values)
        self._wait_until(self.servers.transfer(self.rank, reads, keys, values, UP))
        for entry, value in zip(out, values):
            for copy in copies_of(entry):
                copy[:] = value
        self.traffic.add(0, nbytes)

    def pushpull(self, keys, values, out=None, priority=0):
        self.push(keys, values)
        self.pull(keys, out=values if out is None else out)

    def _wait_until(self, when):
        now = self.scheduler.now(self.rank)
        if when > now:
            self.scheduler.advance(self.rank, when - now)


def _listed(keys, values):
    if isinstance(keys, (list, tuple)):
        return list(keys), list(values)
    return [keys], [values]

