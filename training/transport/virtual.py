"""The synchronous aggregation among the workers of a job on a virtual clock (training/clocks/).

The same four operations as the parameter server and MPI (collectives.py), among worker threads of one process:
each is a collective of the scheduler, which every worker joins in the same order. declare and broadcast hand rank
0's values to everyone and cost nothing (they happen before the training clock starts); sum adds the workers'
arrays in rank order, so that the sums are the same in every run, and charges each worker the network's transfers
(clocks/network.py); barrier waits for the last worker. Over the parameter server each worker pushes to each server
the part of the keys ps-lite places there and pulls it back once that server has every worker's part, all transfers
sharing the links fairly; over MPI (`collective`: ring, butterfly, binary-blocks) they are what MPICH's algorithm
moves for each rank (traffic.py), each exchange on the workers' own links, and every worker has the sum once the
exchanges of the slowest rank's part are done. A job whose scheme
pushes to the kvstore itself gets the job's in-process servers (virtual_servers.py) as `kv`; what is declared is
their keys' first values.
"""
import concurrent.futures

import numpy as np

from training.clocks.network import allreduce_seconds
from training.transport import traffic
from training.transport.collectives import PS, ByteCounter, PendingSum, copies_of, local_sum, pack, unpack
from training.transport.virtual_servers import VirtualKVStore


class VirtualTransport:
    sums_in_engine = False  # every sum is taken when the worker asks for it: no scheme queues its round in MXNet

    def __init__(self, scheduler, rank, network, coordination=None, servers=None, collective=PS):
        self.scheduler, self.rank, self.network, self.collective = scheduler, rank, network, collective
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
        sizes = [copies_of(entry)[0].size for entry in arrays]
        total = self.scheduler.meet(self.rank, flat, lambda contributions, arrivals: self._summed(
            contributions, arrivals, keys, sizes))
        unpack(total, arrays)
        if self.collective == PS:
            self.traffic.add(flat.nbytes, flat.nbytes)
        else:
            self.traffic.add(*traffic.allreduce_bytes(self.collective, self.rank, self.num_workers, flat.size))

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

    def _summed(self, contributions, arrivals, keys, sizes):
        total = contributions[0].copy()
        for rank in range(1, len(contributions)):
            total += contributions[rank]
        if self.collective == PS:
            return total, self.network.sum_finishes(arrivals, self.network.shards(keys, sizes))
        done = max(arrivals.values()) + allreduce_seconds(self.collective, self.num_workers, total.size,
                                                          self.network.workers)
        return total, {rank: done for rank in arrivals}

