"""Asynchronous SGD (ASGD) and DC-ASGD over dist_async: the servers update the weights on every push.

A round is one local step: push the gradient (device copies summed) and the BatchNorm statistics, let the
servers apply their rule (training/schemes/servers/server_optimizer.py) to this push alone, pull the newest weights and
statistics. DC-ASGD comes twice: MXNet's (one backup of the weights per key) and the paper's (one per worker,
through per-worker key ranges on one server).

The push and the pull are queued as soon as the backward pass is, as Gluon's Trainer queues them: each gradient
travels once it is written, and the aggregation waits for the newest weights, within the watchdog's bound. A
Byzantine worker corrupts its gradient after the step, so it pushes then.
"""
from typing import Optional

from training import argtypes, runlog
from training.lazy import mx
from training.options import Options, Range, check_constant_lr, check_one_server, declaration, fixed, option
from training.schemes.base import Scheme, wait_for

DC_LAMBDA_DEFAULTS = {"constant": 0.04, "adaptive": 2.0}  # the DC-ASGD paper's lambda0 of DC-ASGD-c and DC-ASGD-a


@declaration
class DCASGDOptions(Options):
    dc_lambda: Optional[float] = option(
        "--dc-lambda", type=argtypes.NON_NEGATIVE_FLOAT, search=Range(0.01, 4.0, log=True, limits=(1e-4, 100.0)),
        help="lambda of the delay compensation (default 0.04; with --dc-adaptive lambda0, default 2)")
    dc_adaptive: float = fixed(0.0)

    @classmethod
    def resolve(cls, args):
        if args.dc_lambda is None:
            args.dc_lambda = DC_LAMBDA_DEFAULTS["adaptive" if args.dc_adaptive else "constant"]


@declaration
class DCASGDPerWorkerOptions(DCASGDOptions):
    dc_adaptive: float = option(
        "--dc-adaptive", default=0.0, type=argtypes.momentum,
        help="DC-ASGD-a, lambda = lambda0 / sqrt(mean square of the gradients), the mean square moving with "
             "momentum M (the paper's 0.95); 0 (default): DC-ASGD-c, constant lambda")

    @classmethod
    def check(cls, args, num_workers):
        check_one_server(args)
        check_constant_lr(args)


class Async(Scheme):
    name = "async"
    description = ("ASGD, one step per round: push the gradient, the server applies SGD, pull the newest weights "
                   "(dist_async)")
    kvstore = "dist_async"

    def __init__(self, options, model, transport):
        super().__init__(options, model, transport)
        self.control = mx.nd.zeros((2,))  # [stop votes, pushes the server applied] (ServerOptimizer)
        self.applied_before = 0           # the count this worker's last pull read
        self.staleness = None

    def server_rule(self):
        """Plain SGD on the gradient of the loss summed over a batch."""
        return mx.optimizer.SGD(learning_rate=self.options.learning_rate, momentum=self.options.momentum,
                                wd=self.options.wd, lr_scheduler=self.server_scheduler())

    def setup(self):
        from training.schemes.servers.server_optimizer import ServerOptimizer

        self.broadcast_initial_weights()
        self.kv.set_optimizer(ServerOptimizer(inner=self.server_rule(), stats_key=self.stats_key,
                                              control_key=self.control_key, num_workers=self.num_workers))
        self.transport.barrier()  # no worker pushes before every server holds the rule
        self.pushed = self.exchanged(p.list_grad() for p in self.model.trainable)
        self.pulled = self.exchanged(p.list_data() for p in self.model.trainable)
        if not self.attack and self.transport.sums_in_engine:  # a virtual clock charges the exchange after the step
            self.during_backward = self.queue_exchange

    def queue_exchange(self, stop_vote):
        """The push of this step's gradient and the pull of the newest weights, queued in MXNet's engine."""
        self.apply_on_servers(stop_vote, self.pushed, self.pulled)

    def aggregate(self, stop_vote):
        if self.during_backward:  # the weights arrive here, within the watchdog's bound on the aggregation
            wait_for(self.pulled)
        else:
            self.corrupt(p.list_grad() for p in self.model.trainable)
            self.queue_exchange(stop_vote)
        self.stats.scatter()
        votes, applied = self.control.asnumpy().tolist()  # one copy of the control key: the stop vote and the count
        self.staleness, self.applied_before = int(applied) - self.applied_before - 1, int(applied)
        if self.staleness < 0:
            raise RuntimeError(f"the servers count {int(applied)} pushes applied, fewer than this worker has seen: "
                               "a staleness below 0")
        return stop_vote or votes > 0

    def round_record(self):
        return {runlog.STALENESS: self.staleness}


class DCASGD(Async):
    """DC-ASGD (Zheng et al., "Asynchronous SGD with Delay Compensation"), MXNet's implementation.

    MXNet's DCASGD keeps one backup weight per key, not one per worker as the paper does: the server never
    learns which worker pushed.
    """
    name = "dcasgd"
    description = "DC-ASGD, as async with MXNet's delay-compensated DCASGD on the server (dist_async)"
    Options = DCASGDOptions

    def server_rule(self):
        return mx.optimizer.DCASGD(learning_rate=self.options.learning_rate, momentum=self.options.momentum,
                                    wd=self.options.wd, lamda=self.options.dc_lambda,
                                    lr_scheduler=self.server_scheduler())


class DCASGDPerWorker(Scheme):
    """DC-ASGD as the paper defines it: the one server keeps a backup of the weights per worker
    (training/schemes/servers/dcasgd_server.py). Each worker pushes its gradient to, and pulls the weights from, its own key
    range. BatchNorm statistics stay local to each worker."""
    name = "dcasgd-paper"
    description = ("DC-ASGD as its paper defines it, the one server keeping a backup of the weights per worker "
                   "(dist_async)")
    Options = DCASGDPerWorkerOptions
    kvstore = "dist_async"

    def setup(self):
        from training.schemes.servers.dcasgd_server import DelayCompensatedPerWorker

        rule = DelayCompensatedPerWorker(self.num_workers, len(self.model.trainable), self.options.learning_rate,
                                         self.options.dc_lambda, wd=self.options.wd, adaptive=self.options.dc_adaptive)
        ctx0 = self.model.ctxs[0]
        weights = [p.data(ctx0).copy() for p in self.model.trainable]
        self.start_server_rule(list(range(rule.control_key + 1)), weights * self.num_workers + [self.control], rule)
        self.keys = rule.layout.model_keys(self.rank) + [rule.control_key]
        self.kv.pull(self.keys[:-1], out=[p.list_data() for p in self.model.trainable])

    def aggregate(self, stop_vote):
        self.model.reduce_gradients()
        self.corrupt(p.list_grad() for p in self.model.trainable)
        self.control[:] = float(stop_vote)
        self.kv.pushpull(self.keys, [p.list_grad()[0] for p in self.model.trainable] + [self.control],
                         out=[p.list_data() for p in self.model.trainable] + [self.control])  # as apply_on_servers
        return stop_vote or self.stop_requested()
