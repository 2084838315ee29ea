"""The global model's outer optimizer: MXNet's own, applied to the workers' average delta as a pseudo-gradient."""
from training.lazy import mx

OUTER_OPTIMIZERS = ("sgd", "nag", "adam")
FUSED_WEIGHTS = 45  # parameters per call of MXNet's fused SGD update (its own chunk for fused updates, as LAMB's)
FUSED_SIZE = 100_000  # elements: a larger parameter is updated on its own


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
        self.calls = update_calls(self.moves, fused=isinstance(self.optimizer, mx.optimizer.SGD))

    def step(self, totals, scale, learning_rate):
        """The moves (arrays valid until the next step) for the summed deltas `totals`."""
        if self.plain:
            return [total * (scale * learning_rate) for total in totals]
        self.optimizer.set_learning_rate(learning_rate)
        self.optimizer.rescale_grad = -scale
        mx.nd.reset_arrays(*self.moves, num_arrays=len(self.moves))
        for chunk in self.calls:
            if len(chunk) == 1:
                (index,) = chunk
                self.optimizer.update(index, self.moves[index], totals[index], self.states[index])
            else:
                self.optimizer.update(chunk, [self.moves[i] for i in chunk], [totals[i] for i in chunk],
                                      [self.states[i] for i in chunk])
        return self.moves


def update_calls(moves, fused):
    """The parameters' indices grouped into the optimizer's calls: MXNet's SGD updates a list of weights in one fused
    operator (multi_sgd_mom_update), which spares the small parameters a Python call each (a lenet move 1.8 against
    0.35 ms, docs/benchmarks.md) but computes a large one slower than its own update does (a resnet18-v1 move 65 ms
    with every parameter fused, 48 ms with none, 41 ms so), so parameters of more than FUSED_SIZE elements, and
    every parameter of an optimizer without the fused operator, get a call of their own."""
    small = [i for i, move in enumerate(moves) if fused and move.size <= FUSED_SIZE]
    alone = [[i] for i in sorted(set(range(len(moves))) - set(small))]
    return [small[first:first + FUSED_WEIGHTS] for first in range(0, len(small), FUSED_WEIGHTS)] + alone
