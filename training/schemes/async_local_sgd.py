"""Asynchronous local SGD with dynamic local updates and delayed Nesterov (Liu et al., "Asynchronous Local-SGD
Training for Language Modeling", 2024), composed from the parts here: FedBuff's asynchronous rounds that push a
delta (training/schemes/fedbuff.py), each worker's local steps per round set by ESync's plan rule, --sync-interval
times the steps that fit in one of the slowest worker's (so every worker's round lasts about as long: the paper's
dynamic local updates), and the delayed Nesterov server (training/schemes/servers/delayed_nesterov.py; outer
learning rate -gl, momentum --server-momentum). Needs the state server. One server only.
"""

from coordination.rules import plan as plan_rule

from training import argtypes
from training.options import CoordinatedOptions, Range, check_one_server, declaration, fixed, option
from training.schemes.fedbuff import FedBuff, FedBuffOptions
from coordination.records import smoothed

DEFAULT_OUTER_MOMENTUM = 0.9


@declaration
class AsyncLocalSGDOptions(CoordinatedOptions, FedBuffOptions):
    buffer_size: int = fixed(1)  # the momentum catches up every N arrivals, N the workers
    outer_momentum: float = option("--outer-momentum", default=DEFAULT_OUTER_MOMENTUM, type=argtypes.momentum,
                                   search=Range(0.0, 0.95, limits=(0.0, 0.99)),
                                   help="async-local-sgd: beta of the delayed Nesterov momentum (default 0.9)")

    @classmethod
    def check(cls, args, num_workers):
        check_one_server(args)


class AsyncLocalSGD(FedBuff):
    name = "async-local-sgd"
    description = ("asynchronous local SGD, local steps scaled to each worker's speed, a delayed Nesterov server "
                   "(state server + dist_async)")
    Options = AsyncLocalSGDOptions

    def setup(self):
        options = self.options
        self.client = self.transport.coordination.client(self.rank, on_not_initialised=self.set_up_job_again)
        if self.rank == 0:
            self.client.init(self.num_workers, policy=plan_rule.NAME)
        super().setup()  # ends in a barrier: /init/ precedes every worker's first plan
        self.step_seconds, self.planned = None, options.sync_interval

    def set_up_job_again(self):
        """The state server restarted and lost the job: the first worker to find out sets it up again."""
        self.client.init_again_if_lost(self.num_workers, policy=plan_rule.NAME)

    def server_rule(self, layout):
        from training.schemes.servers.delayed_nesterov import DelayedNesterov

        return DelayedNesterov(layout, self.options.global_lr, self.options.outer_momentum)

    def round_done(self, steps, step_seconds):
        self.step_seconds = smoothed(self.step_seconds, step_seconds)
        return steps >= self.planned

    def aggregate(self, stop_vote):
        stop = super().aggregate(stop_vote)
        fit = self.client.plan(self.rank, self.step_seconds)  # steps of this worker within one of the slowest's
        self.planned = self.options.sync_interval * fit
        return stop

    def round_record(self):
        return {**super().round_record(), "planned_steps": self.planned}

    def finish(self):
        self.client.close()
        super().finish()
