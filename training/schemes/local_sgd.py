"""Local SGD with synchronous delta averaging, shared by ESync and FedAvg: every worker runs local steps from the
round's start weights W, then all aggregate synchronously (over the ps-lite servers or any MPI collective): sum
the deltas, and weights = W + global_lr x sum / num_workers (global_lr 1: the average of the workers' models).
BatchNorm statistics are averaged. The local optimizer's state carries over from round to round. The schemes
differ in when a worker's round ends.
"""
from dataclasses import dataclass

import mxnet as mx

from training.schemes.base import LocallyUpdating, Options


@dataclass(frozen=True)
class LocalSGDOptions(Options):
    local_lr: float
    local_optimizer: str
    global_lr: float


class DeltaAveraging(LocallyUpdating):
    kvstore = "dist_sync"

    def setup(self):
        self.broadcast_initial_weights()
        self.local_trainer(self.options.local_lr, self.options.local_optimizer)
        self.start = [[d.copy() for d in p.list_data()] for p in self.model.trainable]
        self.delta = [mx.nd.zeros(p.shape, ctx=self.model.ctxs[0], dtype=p.dtype) for p in self.model.trainable]
        self.buffers = self.exchanged(self.delta)

    def aggregate(self, stop_vote):
        ctx0 = self.model.ctxs[0]
        for p, delta, start in zip(self.model.trainable, self.delta, self.start):
            mx.nd.elemwise_sub(p.data(ctx0), start[0], out=delta)
        self.corrupt(self.delta)
        self.control[:] = float(stop_vote)
        self.stats.gather()
        self.transport.sum(self.keys, self.buffers)
        scale = self.options.global_lr * self.lr_factor / self.num_workers
        for p, delta, starts in zip(self.model.trainable, self.delta, self.start):
            for data, start in zip(p.list_data(), starts):
                start += scale * delta.as_in_context(start.context)
                start.copyto(data)
        self.stats.scatter(1.0 / self.num_workers)
        return stop_vote or self.stop_requested()
