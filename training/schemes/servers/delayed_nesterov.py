"""Asynchronous local SGD's server (Liu et al., "Asynchronous Local-SGD Training for Language Modeling", 2024): the
global model moves as each worker's delta arrives, by lr x delta / N (N: the workers), and every N-th arrival the
outer Nesterov momentum catches up: m <- beta m + (the mean of the last N deltas), and the model moves by
lr x beta x m too ("delayed Nesterov": the momentum, which stale deltas would otherwise accelerate, is updated once
per N arrivals, while every delta is applied as it comes). lr is -gl, beta --server-momentum.

FedAsync's key layout (fedasync_server.FedAsyncLayout); each worker's info key hands it [staleness, arrivals since
the momentum's last update] of its last push. Imported by name on the server, as server_optimizer.py says.
"""
from mxnet import optimizer

from training.schemes.servers.fedbuff_server import BufferedAggregator


@optimizer.register
class DelayedNesterov(BufferedAggregator):
    def __init__(self, layout, server_lr, momentum, **kwargs):
        super().__init__(layout, layout.num_workers, server_lr, **kwargs)
        self.momentum = momentum
        self.velocity = {}  # array index -> m

    def add(self, rank, delta):
        staleness = self.version - self.started.get(rank, 0)
        scale = self.server_lr / self.buffer_size
        for i, part in delta.items():
            self.weights[i] = self.weights[i] + scale * part
            self.buffer[i] = self.buffer[i] + part if i in self.buffer else part.copy()
        self.buffered += 1
        self.last[rank] = [float(staleness), float(self.buffered)]
        if self.buffered == self.buffer_size:
            for i, total in self.buffer.items():
                mean = total / self.buffer_size
                self.velocity[i] = self.momentum * self.velocity[i] + mean if i in self.velocity else mean
                self.weights[i] = self.weights[i] + self.server_lr * self.momentum * self.velocity[i]
            self.buffer, self.buffered = {}, 0
        self.version += 1
        self.started[rank] = self.version
