"""FedBuff on the one dist_async server (Nguyen et al., "Federated Learning with Buffered Asynchronous Aggregation",
AISTATS 2022): each delta a worker sends is weighted by its staleness, 1 / sqrt(1 + t - tau), and added to a buffer;
once `buffer_size` deltas are in, the global model moves by the server learning rate times their mean and the
buffer empties. t counts the global model's versions, tau the version the worker started from.

The key layout is FedAsync's (fedasync_server.FedAsyncLayout): worker r pushes its delta to, and pulls the global
model from, its own range; one key per worker hands it [staleness, buffered deltas] of its last push; the stop vote
keeps the largest value pushed. Imported by name on the server, as server_optimizer.py says.
"""
from mxnet import optimizer

from training.schemes.servers.fedasync_server import WholePushRule, staleness_weight


@optimizer.register
class BufferedAggregator(WholePushRule):
    def __init__(self, layout, buffer_size, server_lr, **kwargs):
        super().__init__(layout, **kwargs)
        self.buffer_size, self.server_lr = buffer_size, server_lr
        self.buffer = {}     # array index -> the staleness-weighted sum of the deltas buffered
        self.buffered = 0

    def arrived(self, rank, delta):
        self.add(rank, delta)

    def add(self, rank, delta):
        """Buffer the delta `rank` sent, weighted by its staleness; move the global model once the buffer is full."""
        staleness = self.version - self.started.get(rank, 0)
        weight = staleness_weight("polynomial", staleness, 0.5, 0.0)
        for i, part in delta.items():
            self.buffer[i] = self.buffer[i] + weight * part if i in self.buffer else weight * part
        self.buffered += 1
        self.last[rank] = [float(staleness), float(self.buffered)]
        if self.buffered == self.buffer_size:
            for i, total in self.buffer.items():
                self.weights[i] = self.weights[i] + (self.server_lr / self.buffer_size) * total
            self.buffer, self.buffered = {}, 0
            self.version += 1
        self.started[rank] = self.version
