"""Hogwild! (Niu et al. 2011): each worker process computes a gradient at the shared weights as it last read them
and subtracts lr x it from the shared weights in place, without a lock; then reads them again. No cluster, no
server: the processes share one machine's memory (training/hogwild.py starts them). BatchNorm statistics stay
local to each worker. Plain SGD with --wd; rank 0 evaluates its latest read of the shared weights. Each round's log
records how many updates all workers have applied to the block (`hogwild_updates`).
"""
import argparse
from typing import Optional

from training import argtypes
from training.hogwild import SharedWeights, apply_gradient
from training.lazy import mx
from training.options import Options, declaration, option
from training.schemes.base import Scheme


@declaration
class HogwildOptions(Options):
    hogwild_workers: int = option("--hogwild-workers", default=2, type=argtypes.POSITIVE_INT,
                                  help="worker processes on this machine sharing one copy of the weights (default 2)")
    # Set by the coordinator for each worker process it starts (training/hogwild.py).
    hogwild_rank: Optional[int] = option("--hogwild-rank", type=argtypes.NON_NEGATIVE_INT, help=argparse.SUPPRESS)
    hogwild_memory: Optional[str] = option("--hogwild-memory", help=argparse.SUPPRESS)


class Hogwild(Scheme):
    virtual_clock = "runs its workers in processes of their own, racing in shared memory: no clock orders them"
    name = "hogwild"
    description = ("Hogwild!, --hogwild-workers processes on this machine update one shared copy of the weights "
                   "without locks, no cluster")
    Options = HogwildOptions
    aggregates = False
    updates_locally = True

    def __init__(self, options, model, transport):
        super().__init__(options, model, transport)
        self.rank = options.hogwild_rank
        self.num_workers = options.hogwild_workers

    def setup(self):
        self.shared = SharedWeights.attach(self.options.hogwild_memory, [p.shape for p in self.model.trainable],
                                           self.num_workers)
        self._read()

    def local_step(self):
        self.model.reduce_gradients()
        lr = self.options.learning_rate * self.lr_factor
        ctx0 = self.model.ctxs[0]
        for view, p in zip(self.shared.views, self.model.trainable):
            apply_gradient(view, p.grad(ctx0).asnumpy(), lr, self.options.wd)
        self.shared.updates[self.rank] += 1
        self._read()

    def round_record(self):
        """Every worker's updates applied to the shared weights so far, as this worker last read them."""
        return {"hogwild_updates": int(self.shared.updates.sum())}

    def _read(self):
        for view, p in zip(self.shared.views, self.model.trainable):
            p.set_data(mx.nd.array(view))

    def finish(self):
        self.shared.close()
