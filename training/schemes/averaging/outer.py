"""The global model's outer optimizer: MXNet's own, applied to the workers' average delta as a pseudo-gradient."""
from training.lazy import mx

OUTER_OPTIMIZERS = ("sgd", "nag", "adam")


class OuterOptimizer:
    """The global model's optimizer: per parameter, its move for the sum of the workers' deltas is what MXNet's
    optimizer `rule` makes of that sum as a gradient rescaled by -scale (scale: 1 / workers, or FedNova's), a
    pseudo-gradient of W, at learning rate -gl. Each move is computed as the update of a weight of zeros, the
    optimizer's state (a velocity, Adam's moments) carried from round to round."""

    def __init__(self, rule, momentum, like):
        # sgd without momentum moves a weight of zeros by exactly the scaled sum: the product then, without the Python
        # path of an optimizer update per parameter (1.4 against 0.15 ms a lenet round on a whole core; on a slow
        # device's quota that was 13 ms of each overlapped round, docs/benchmarks.md)
        self.plain = rule == "sgd" and not momentum
        if self.plain:
            return
        options = {"momentum": momentum} if rule in ("sgd", "nag") else {}
        self.optimizer = mx.optimizer.create(rule, learning_rate=1.0, wd=0.0, **options)
        self.moves = [mx.nd.zeros(a.shape, ctx=a.context, dtype=a.dtype) for a in like]
        self.states = [self.optimizer.create_state(index, move) for index, move in enumerate(self.moves)]

    def step(self, totals, scale, learning_rate):
        """The moves (arrays valid until the next step) for the summed deltas `totals`."""
        if self.plain:
            return [total * (scale * learning_rate) for total in totals]
        self.optimizer.set_learning_rate(learning_rate)
        self.optimizer.rescale_grad = -scale
        for index, (total, move, state) in enumerate(zip(totals, self.moves, self.states)):
            move[:] = 0
            self.optimizer.update(index, move, total, state)
        return self.moves
