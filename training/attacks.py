"""Byzantine workers for experiments: the first --byzantine K workers corrupt what they send.

signflip     u <- -S * u
random       u <- samples of N(0, S), whatever was computed
randomscale  u <- a random direction with norm S * |u| (per array)
labelflip    trains on label 9 - y: an honest computation on poisoned data
"""
ATTACKS = ("signflip", "random", "randomscale", "labelflip")
NUM_CLASSES = 10


class Attack:
    def __init__(self, kind, scale):
        if kind not in ATTACKS:
            raise ValueError(f"unknown attack {kind!r} (known: {', '.join(ATTACKS)})")
        self.kind = kind
        self.scale = scale

    def corrupt(self, arrays):
        """Corrupt, in place, the NDArrays a worker is about to send."""
        import mxnet as mx  # here: the command line reads ATTACKS without loading MXNet

        for array in arrays:
            if self.kind == "signflip":
                array *= -self.scale
            elif self.kind == "random":
                mx.nd.random.normal(0, self.scale, shape=array.shape, ctx=array.context, out=array)
            elif self.kind == "randomscale":
                norm = mx.nd.norm(array)
                direction = mx.nd.random.normal(0, 1, shape=array.shape, ctx=array.context)
                array[:] = direction * (self.scale * norm / mx.nd.norm(direction))

    def poison(self, stream):
        """The batch stream this worker trains on."""
        return LabelFlipped(stream) if self.kind == "labelflip" else stream


class LabelFlipped:
    def __init__(self, stream):
        self.stream = stream

    def next(self, batch_size=None):
        images, labels = self.stream.next(batch_size)
        return images, (NUM_CLASSES - 1 - labels).astype(labels.dtype)

    def __getattr__(self, name):
        return getattr(self.stream, name)


def attack_for(options, worker_index):
    """The attack worker `worker_index` (0-based among the training workers) runs, or None."""
    if worker_index < options.byzantine:
        return Attack(options.attack, options.attack_scale)
    return None


def flatten_arrays(nested):
    """Every NDArray in a list whose entries are arrays or lists of per-device arrays."""
    for item in nested:
        if isinstance(item, (list, tuple)):
            yield from item
        else:
            yield item
