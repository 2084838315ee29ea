"""What a synchronization scheme plugs into the training loop (training/loop.py).

A round is: local steps until round_done() says stop, then aggregate(). Sync and async do one step per round;
ESync does as many as fit while the slowest worker finishes one. Every scheme shares the kvstore key layout:
one key per parameter in Model.params order (trainable first, then BatchNorm statistics), plus a control key
whose summed value tells every worker of the round that someone wants to stop.
"""
import mxnet as mx
from mxnet import gluon


class Scheme:
    name = None
    kvstore = None                    # kvstore type this scheme trains over; None: no cluster
    aggregate_key = "global update"   # the aggregation's timing key in the iteration logs
    coordinated = False               # round_done() asks the state server ("check ready" in the logs)
    updates_locally = False           # local_step() updates the weights ("local update" in the logs)

    def __init__(self, args, model, kv):
        self.args = args
        self.model = model
        self.kv = kv
        self.rank = kv.rank if kv else 0
        self.num_workers = kv.num_workers if kv else 1
        self.keys = list(range(len(model.params)))
        self.control_key = len(self.keys)
        self.control = mx.nd.zeros((1,))

    def setup(self):
        """Bring every worker to the same starting weights."""

    def begin_round(self, iteration):
        """Called before the first local step of global iteration `iteration`."""

    def local_step(self):
        """Called after each step's backward pass; may update the weights locally."""

    def round_done(self, steps, step_seconds):
        return True

    def aggregate(self, stop_vote):
        """End the round; return True when any worker voted to stop (all workers then stop together)."""
        return stop_vote

    def finish(self):
        """Release what setup() acquired."""

    # Helpers shared by the kvstore schemes.

    def broadcast_initial_weights(self):
        """Rank 0's weights become everyone's; kv.init ends with a barrier across workers."""
        ctx0 = self.model.ctxs[0]
        # A plain copy: weights in MKLDNN layout after a forward pass make the server reject the init.
        self.kv.init(self.keys + [self.control_key],
                     [p.data(ctx0).copy() for p in self.model.params] + [self.control])
        self.kv.pull(self.keys, out=[p.list_data() for p in self.model.params])

    def local_trainer(self, learning_rate):
        """Gluon's Trainer for the update step only; gradient reduction stays with the scheme."""
        return gluon.Trainer(self.model.trainable, "sgd",
                             {"learning_rate": learning_rate, "momentum": self.args.momentum},
                             kvstore=None)

    def stop_requested(self):
        return self.control.asscalar() > 0

    def average_aux(self, divisor):
        for p in self.model.aux:
            for data in p.list_data():
                data /= divisor
