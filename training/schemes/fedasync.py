"""FedAsync (Xie, Koyejo, Gupta, "Asynchronous Federated Optimization", 2019), one of the ESync journal version's
baselines, over dist_async: each worker runs --sync-interval local SGD steps (lr -ll) from the global model it
received, pushes its model to the server and pulls the global model back; the server mixes the model in with a
weight that shrinks with its staleness (training/schemes/servers/fedasync_server.py; --alpha, --staleness, --staleness-a,
--staleness-b). Nobody waits for anybody.

With --proximal rho the local steps minimise the paper's f(x) + (rho / 2) |x - x_t|^2, x_t the global model the
worker received: each step's gradient gains rho (x - x_t), times the batch size because the loss here is summed
over the batch. Not here: the paper's scheduler thread; the server mixes each model as it arrives. BatchNorm
statistics stay local to each worker. One server only.
"""
from typing import Optional

from training import argtypes, runlog
from training.lazy import mx
from training.options import (
    Options,
    check_one_server,
    declaration,
    local_lr,
    local_optimizer,
    option,
    proximal,
    sync_interval,
)
from training.schemes.base import FixedLocalSteps

STALENESS_FUNCTIONS = ("constant", "polynomial", "hinge")  # s(t - tau): training/schemes/servers/fedasync_server.py
STALENESS_A_DEFAULTS = {"polynomial": 0.5, "hinge": 10.0}  # the FedAsync paper's experiments


@declaration
class FedAsyncOptions(Options):
    local_lr: float = local_lr()
    local_optimizer: str = local_optimizer()
    sync_interval: int = sync_interval()
    alpha: float = option("--alpha", default=0.6, type=argtypes.mixing_weight,
                          help="the server's mixing weight alpha in (0, 1]")
    staleness: str = option("--staleness", default="polynomial", choices=STALENESS_FUNCTIONS,
                            help="s(t - tau), the factor of alpha for a model t - tau updates old: constant 1, "
                                 "polynomial (t - tau + 1)^-a, hinge 1 up to b then 1 / (a (t - tau - b) + 1)")
    staleness_a: Optional[float] = option("--staleness-a", type=argtypes.NON_NEGATIVE_FLOAT,
                                          help="a of --staleness (default 0.5 polynomial, 10 hinge)")
    staleness_b: float = option("--staleness-b", default=4.0, type=argtypes.NON_NEGATIVE_FLOAT,
                                help="b of the hinge function")
    proximal: float = proximal()

    @classmethod
    def resolve(cls, args):
        if args.staleness_a is None:
            args.staleness_a = STALENESS_A_DEFAULTS.get(args.staleness, 0.0)

    @classmethod
    def check(cls, args, num_workers):
        check_one_server(args)


class FedAsync(FixedLocalSteps):
    name = "fedasync"
    description = ("FedAsync, --sync-interval local steps, then the one server mixes the model in by its staleness "
                   "(dist_async)")
    Options = FedAsyncOptions
    kvstore = "dist_async"

    def setup(self):
        from training.schemes.servers.fedasync_server import FedAsyncLayout

        options = self.options
        self.layout = layout = FedAsyncLayout(self.num_workers, len(self.model.trainable))
        ctx0 = self.model.ctxs[0]
        weights = [p.data(ctx0).copy() for p in self.model.trainable]
        infos = [mx.nd.zeros((2,)) for _ in range(self.num_workers)]
        rule = self.server_rule(layout)
        self.start_server_rule(list(range(layout.control_key + 1)), weights * self.num_workers + infos + [self.control],
                               rule)
        self.model_keys = layout.model_keys(self.rank)
        self.info_key = layout.info_base + self.rank
        self.info = mx.nd.zeros((2,))
        self.kv.pull(self.model_keys, out=[p.list_data() for p in self.model.trainable])
        self.local_trainer(options.local_lr, options.local_optimizer)

    def server_rule(self, layout):
        """What the one server does with each push: FedAsync mixes the model in by its staleness."""
        from training.schemes.servers.fedasync_server import FedAsyncMixer

        options = self.options
        return FedAsyncMixer(layout, options.alpha, options.staleness, options.staleness_a, options.staleness_b)

    def sent(self):
        """What a round pushes: FedAsync its model."""
        ctx0 = self.model.ctxs[0]
        return [p.data(ctx0) for p in self.model.trainable]

    def begin_round(self, completed):
        if self.options.proximal:
            self.received = [[d.copy() for d in p.list_data()] for p in self.model.trainable]

    def local_step(self):
        self.model.reduce_gradients()
        if self.options.proximal:
            self.add_proximal_gradient(self.options.proximal, self.received)
        self.trainer.update(1)

    def aggregate(self, stop_vote):
        self.control[:] = float(stop_vote)
        sent = self.sent()
        self.corrupt(sent)
        self.kv.push(self.model_keys + [self.info_key, self.layout.control_key], sent + [self.info, self.control])
        self.kv.pull(self.model_keys + [self.info_key, self.layout.control_key],
                     out=[p.list_data() for p in self.model.trainable] + [self.info, self.control])
        return stop_vote or self.stop_requested()

    def round_record(self):
        staleness, mixing = self.info.asnumpy().tolist()
        return {runlog.STALENESS: int(staleness), "mixing_weight": mixing}
