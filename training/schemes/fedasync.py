"""FedAsync (Xie, Koyejo, Gupta, "Asynchronous Federated Optimization", 2019), one of the ESync journal version's
baselines, over dist_async: each worker runs --sync-interval local SGD steps (lr -ll) from the global model it
received, pushes its model to the server and pulls the global model back; the server mixes the model in with a
weight that shrinks with its staleness (training/fedasync_server.py; --alpha, --staleness, --staleness-a,
--staleness-b). Nobody waits for anybody.

With --proximal rho the local steps minimise the paper's f(x) + (rho / 2) |x - x_t|^2, x_t the global model the
worker received: each step's gradient gains rho (x - x_t), times the batch size because the loss here is summed
over the batch. Not here: the paper's scheduler thread; the server mixes each model as it arrives. BatchNorm
statistics stay local to each worker. One server only.
"""
from dataclasses import dataclass

import mxnet as mx

from training.schemes.base import FixedLocalSteps, Options


@dataclass(frozen=True)
class FedAsyncOptions(Options):
    local_lr: float
    local_optimizer: str
    sync_interval: int
    alpha: float
    staleness: str
    staleness_a: float
    staleness_b: float
    proximal: float


class FedAsync(FixedLocalSteps):
    name = "fedasync"
    Options = FedAsyncOptions
    kvstore = "dist_async"

    def setup(self):
        from training.fedasync_server import FedAsyncLayout, FedAsyncMixer

        options = self.options
        self.layout = layout = FedAsyncLayout(self.num_workers, len(self.model.trainable))
        ctx0 = self.model.ctxs[0]
        weights = [p.data(ctx0).copy() for p in self.model.trainable]
        infos = [mx.nd.zeros((2,)) for _ in range(self.num_workers)]
        rule = FedAsyncMixer(layout, options.alpha, options.staleness, options.staleness_a, options.staleness_b)
        self.start_server_rule(list(range(layout.control_key + 1)), weights * self.num_workers + infos + [self.control],
                               rule)
        self.model_keys = layout.model_keys(self.rank)
        self.info_key = layout.info_base + self.rank
        self.info = mx.nd.zeros((2,))
        self.kv.pull(self.model_keys, out=[p.list_data() for p in self.model.trainable])
        self.local_trainer(options.local_lr, options.local_optimizer)

    def begin_round(self, completed):
        if self.options.proximal:
            self.received = [[d.copy() for d in p.list_data()] for p in self.model.trainable]

    def local_step(self):
        self.model.reduce_gradients()
        if self.options.proximal:
            self.add_proximal_gradient(self.options.proximal, self.received)
        self.trainer.update(1)

    def aggregate(self, stop_vote):
        ctx0 = self.model.ctxs[0]
        self.control[:] = float(stop_vote)
        sent = [p.data(ctx0) for p in self.model.trainable]
        self.corrupt(sent)
        self.kv.push(self.model_keys + [self.info_key, self.layout.control_key], sent + [self.info, self.control])
        self.kv.pull(self.model_keys + [self.info_key, self.layout.control_key],
                     out=[p.list_data() for p in self.model.trainable] + [self.info, self.control])
        return stop_vote or self.stop_requested()

    def round_record(self):
        staleness, mixing = self.info.asnumpy().tolist()
        return {"staleness": int(staleness), "mixing_weight": mixing}
