"""What a local step adds to its gradient against the drift of the workers' models on non-i.i.d. data, each a part
of local SGD's averaging with the same four moments: set up, correct a step's gradient, before the deltas are sent,
once their sum has arrived."""
from training.lazy import mx


def scaffold_change(local_cv, global_cv, delta, steps, lr):
    """SCAFFOLD's control variates (Karimireddy et al. 2020, option II) after `steps` local steps of rate `lr` that
    moved a worker from W by `delta`: its own variate becomes
        c_i' = c_i - c - delta / (steps x lr)      (the mean corrected gradient of its steps)
    in place; returns c_i' - c_i, whose average over the workers moves the global c."""
    change = -global_cv - delta / (steps * lr)
    local_cv += change
    return change


class Correction:
    def setup(self, scheme):
        """Once the scheme's arrays exist: what the correction needs; returns the (keys, arrays) it adds to what the
        workers sum each round."""
        return [], []

    def correct(self, scheme):
        """Change the gradients of the step just computed, before the local optimizer applies them."""

    def before_send(self, scheme, steps):
        """The round's `steps` local steps are done and its delta is in scheme.delta."""

    def after_sum(self, scheme):
        """The workers' sums have arrived."""


class ProximalTerm(Correction):
    """--proximal rho: FedProx's (rho / 2) |x - W|^2 added to each local step's loss, W the round's start."""

    def __init__(self, rho):
        self.rho = rho

    def correct(self, scheme):
        scheme.add_proximal_gradient(self.rho, scheme.start)


class Scaffold(Correction):
    """--scaffold: every local step's gradient corrected by c - c_i, SCAFFOLD's control variates, whose changes
    travel with the deltas (twice the bytes): the global c, this worker's c_i, on keys of their own after the
    control key (all zero at first)."""

    def setup(self, scheme):
        zeros = scheme.zeros_like_weights
        self.global_cv, self.local_cv, self.change, self.correction = zeros(), zeros(), zeros(), zeros()
        keys = [scheme.control_key + 1 + i for i in range(len(self.change))]
        scheme.transport.declare(keys, self.change)
        return keys, self.change

    def correct(self, scheme):
        for p, correction in zip(scheme.model.trainable, self.correction):
            for grad in p.list_grad():
                grad += correction.as_in_context(grad.context)

    def before_send(self, scheme, steps):
        lr = scheme.options.local_lr * scheme.lr_factor
        for local, global_, delta, change in zip(self.local_cv, self.global_cv, scheme.delta, self.change):
            scaffold_change(local, global_, delta, steps, lr).copyto(change)

    def after_sum(self, scheme):
        """c moves by the average change, and each step's correction becomes c - c_i."""
        for local, global_, change, correction in zip(self.local_cv, self.global_cv, self.change, self.correction):
            global_ += change / scheme.num_workers
            mx.nd.elemwise_sub(global_, local, out=correction)


def corrections(options):
    """The corrections the options ask for, in the order they apply to a step's gradient."""
    return ([ProximalTerm(options.proximal)] if options.proximal else []) + ([Scaffold()] if options.scaffold else [])
