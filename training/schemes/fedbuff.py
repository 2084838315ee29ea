"""FedBuff (Nguyen et al., "Federated Learning with Buffered Asynchronous Aggregation", AISTATS 2022), composed from
FedAsync's asynchronous rounds and a buffered server step: each worker runs --sync-interval local steps (lr -ll,
--local-optimizer) from the global model it last pulled, pushes its delta and pulls the global model back, never
waiting for the others; the one server adds each delta, weighted by 1 / sqrt(1 + its staleness), to a buffer and
moves the global model by -gl times their mean once --buffer-size deltas are in
(training/schemes/servers/fedbuff_server.py). BatchNorm statistics stay local to each worker. One server only.
"""

from training import argtypes, runlog
from training.options import ModeError, check_one_server, declaration, fixed, global_lr, option
from training.schemes.fedasync import FedAsync, FedAsyncOptions


@declaration
class FedBuffOptions(FedAsyncOptions):
    buffer_size: int = option("--buffer-size", default=2, type=argtypes.POSITIVE_INT,
                              help="FedBuff: the deltas the server buffers before it moves the global model (the "
                                   "paper's K; at most the workers)")
    global_lr: float = global_lr()
    alpha: float = fixed(1.0)
    staleness: str = fixed("polynomial")
    staleness_a: float = fixed(0.5)
    staleness_b: float = fixed(4.0)
    proximal: float = fixed(0.0)

    @classmethod
    def check(cls, args, num_workers):
        check_one_server(args)
        if args.buffer_size > num_workers:
            raise ModeError(f"--buffer-size {args.buffer_size}: at most the {num_workers} workers, or the "
                                     "buffer never fills")


class FedBuff(FedAsync):
    name = "fedbuff"
    description = ("FedBuff, --sync-interval local steps, then the one server buffers the staleness-weighted deltas "
                   "and applies their mean every --buffer-size (dist_async)")
    Options = FedBuffOptions

    def server_rule(self, layout):
        from training.schemes.servers.fedbuff_server import BufferedAggregator

        return BufferedAggregator(layout, self.options.buffer_size, self.options.global_lr)

    def begin_round(self, completed):
        self.received = [p.data(self.model.ctxs[0]).copy() for p in self.model.trainable]

    def round_record(self):
        staleness, buffered = self.info.asnumpy().tolist()
        return {runlog.STALENESS: int(staleness), "deltas_buffered": int(buffered)}

    def sent(self):
        """The delta of this round's local steps."""
        ctx0 = self.model.ctxs[0]
        return [p.data(ctx0) - start for p, start in zip(self.model.trainable, self.received)]
