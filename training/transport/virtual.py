"""The synchronous aggregation among the workers of a job on a virtual clock (training/clocks/).

The same four operations as the parameter server and MPI (collectives.py), among worker threads of one process:
each is a collective of the scheduler, which every worker joins in the same order. declare and broadcast hand rank
0's values to everyone and cost nothing (they happen before the training clock starts); sum adds the workers'
arrays in rank order, so that the sums are the same in every run, and charges each worker the links' transfers
(clocks/virtual.py Links); barrier waits for the last worker. Bytes are counted as over the parameter server: one
array a key pushed and one pulled. A job whose scheme pushes to the kvstore itself gets the job's in-process
servers (virtual_servers.py) as `kv`; what is declared is their keys' first values.
"""
import concurrent.futures

import numpy as np

from training.transport.collectives import ByteCounter, PendingSum, local_sum, pack, unpack
from training.transport.virtual_servers import VirtualKVStore


class VirtualTransport:
    sums_in_engine = False  # every sum is taken when the worker asks for it: no scheme queues its round in MXNet

    def __init__(self, scheduler, rank, links, coordination=None, servers=None):
        self.scheduler, self.rank, self.links = scheduler, rank, links
        self.coordination = coordination  # the job's state server, in-process (clocks/coordination.py)
        self.servers = servers            # the job's kvstore servers, in-process, where its scheme uses them
        self.num_workers = scheduler.num_workers
        self.traffic = ByteCounter()
        self.kv = VirtualKVStore(servers, rank, self.num_workers, self.traffic) if servers else None
        self.declared = None

    def during(self, phase):
        return phase

    def declare(self, keys, values):
        values = [np.array(local_sum(v)) for v in values] if self.rank == 0 else None

        def declared(contributions, arrivals):
            if self.servers is not None:
                self.servers.initialise(keys, contributions[0])
            return self._at_the_last(contributions, arrivals)

        self.declared = self.scheduler.meet(self.rank, values, declared)
        if self.rank == 0:
            self.traffic.add(sum(v.nbytes for v in self.declared), 0)

    def broadcast(self, keys, outs):
        self.scheduler.meet(self.rank, None, self._at_the_last)
        for entry, value in zip(outs, self.declared):
            unpack(value.ravel(), [entry])
        self.traffic.add(0, sum(self.declared[i].nbytes for i in range(len(outs))))

    def sum(self, keys, arrays):
        flat = pack([local_sum(entry) for entry in arrays])
        total = self.scheduler.meet(self.rank, flat, self._summed)
        unpack(total, arrays)
        self.traffic.add(flat.nbytes, flat.nbytes)

    def start_sum(self, keys, arrays):
        """The sum at once: a worker on the virtual clock has no engine threads to overlap it with."""
        started = self.scheduler.now(self.rank)
        self.sum(keys, arrays)
        arrival = concurrent.futures.Future()
        arrival.set_result(self.scheduler.now(self.rank))
        return PendingSum(started, arrival)

    def barrier(self):
        self.scheduler.meet(self.rank, None, self._at_the_last)

    def _at_the_last(self, contributions, arrivals):
        """Rank 0's contribution for everyone, each going on when the last one joined."""
        last = max(arrivals.values())
        return contributions.get(0), {rank: last for rank in arrivals}

    def _summed(self, contributions, arrivals):
        total = contributions[0].copy()
        for rank in range(1, len(contributions)):
            total += contributions[rank]
        return total, self.links.finishes(arrivals, total.nbytes)
