"""The update rule the servers run on every push (ASGD, DC-ASGD), or on the round's sum (SSGD --update-on-servers).

kv.set_optimizer pickles this object to the servers, which unpickle it by module path: this module must be
importable where the servers run (main.py's folder), so it imports nothing beyond mxnet. The servers unpickle it
while `import mxnet` is still running (the server loop starts inside that import), so the submodules are imported
by name rather than reached as mx.nd.
The server sees each push on its own and never learns which worker sent it.
"""
from mxnet import ndarray as nd
from mxnet import lr_scheduler, optimizer


@optimizer.register
class ServerOptimizer(optimizer.Optimizer):
    """Weights: the inner rule (SGD or DC-ASGD). BatchNorm statistics: a running blend, 1/num_workers per push;
    `summed` (dist_sync, where a push is the sum of the round's): that sum, which the workers scale. The control key
    keeps the largest value pushed (a stop vote, once cast, stays) and, where it has a second element, counts the
    pushes the server applied (from which a worker reads its staleness)."""

    def __init__(self, inner, stats_key=None, control_key=None, num_workers=1, summed=False, **kwargs):
        super().__init__(**kwargs)
        self.inner = inner
        self.stats_key = stats_key
        self.control_key = control_key
        self.num_workers = num_workers
        self.summed = summed

    def _is_weight(self, index):
        return index not in (self.control_key, self.stats_key)

    def create_state(self, index, weight):
        return self.inner.create_state(index, weight) if self._is_weight(index) else None

    def create_state_multi_precision(self, index, weight):
        return self.create_state(index, weight)

    def update(self, index, weight, grad, state):
        if index == self.control_key:
            if weight.size > 1:
                weight[0:1] = nd.maximum(weight[0:1], grad[0:1])
                weight[1:2] += 1
            else:
                weight[:] = nd.maximum(weight, grad)
        elif index == self.stats_key and self.summed:
            weight[:] = grad
        elif index == self.stats_key:
            weight[:] += (grad - weight) / self.num_workers
        else:
            self.inner.update(index, weight, grad, state)

    def update_multi_precision(self, index, weight, grad, state):
        self.update(index, weight, grad, state)


@optimizer.register
class KeepPushed(optimizer.Optimizer):
    """What a push brings replaces what the server held: dist_async servers refuse a push before a rule is set, and
    the positions the workers claim (training/transport/collectives.py) travel before the scheme's rule."""

    def create_state(self, index, weight):
        return None

    def create_state_multi_precision(self, index, weight):
        return None

    def update(self, index, weight, grad, state):
        weight[:] = grad

    def update_multi_precision(self, index, weight, grad, state):
        self.update(index, weight, grad, state)


class WorkerRanges:
    """Key numbers of a job in which every worker pushes to and pulls from its own range of the one server's keys
    (R workers, P arrays: worker r owns r*P .. r*P+P-1), so the server knows who sent what; the keys after the
    ranges start at `after_ranges`."""

    def __init__(self, num_workers, num_arrays):
        self.num_workers = num_workers
        self.num_arrays = num_arrays
        self.after_ranges = num_workers * num_arrays

    def model_keys(self, rank):
        return list(range(rank * self.num_arrays, (rank + 1) * self.num_arrays))


class OwnStateRule(optimizer.Optimizer):
    """A server rule that keeps its state itself (the global model, per-worker records): MXNet's per-key optimizer
    state is not used, and the multi-precision path is the plain one."""

    def create_state(self, index, weight):
        return None

    def create_state_multi_precision(self, index, weight):
        return None

    def update_multi_precision(self, index, weight, grad, state):
        self.update(index, weight, grad, state)


class ServerSchedule(lr_scheduler.LRScheduler):
    """The schedule by the count of updates MXNet's optimizer keeps (`num_update`)."""

    def __init__(self, schedule, base_lr, updates_per_epoch):
        super().__init__(base_lr=base_lr)
        self.schedule = schedule
        self.updates_per_epoch = max(1.0, float(updates_per_epoch))

    def __call__(self, num_update):  # MXNet counts this update in: the epochs done before it, as a worker counts
        return self.base_lr * self.schedule.factor_at((num_update - 1) / self.updates_per_epoch)
