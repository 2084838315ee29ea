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


class ClientMomentum(Correction):
    """--client-momentum beta: every local step follows (1 - beta) x its own gradient + beta x the global model's last
    move spread over the worker's steps (FedCM, Xu et al. 2021, "FedCM: Federated Learning with Client-level
    Momentum", whose alpha is 1 - beta): a worker's round repeats beta of the last global move and adds 1 - beta of
    its own progress, so the workers' models drift apart by 1 - beta of what plain local steps would. Nothing
    travels: every worker holds the same global move. The first round, with no move yet, is 1 - beta of plain local
    steps."""

    def __init__(self, beta):
        self.beta = beta

    def setup(self, scheme):
        self.previous_start = [starts[0].copy() for starts in scheme.start]
        self.direction = scheme.zeros_like_weights()
        self.round_started, self.last_round_steps = False, 0
        return [], []

    def correct(self, scheme):
        if not self.round_started:
            self.follow_the_last_move(scheme)
            self.round_started = True
        for p, direction in zip(scheme.model.trainable, self.direction):
            for grad in p.list_grad():
                grad *= 1 - self.beta
                grad += direction.as_in_context(grad.context)

    def follow_the_last_move(self, scheme):
        """At a round's first step: the direction whose steps at the local rate add up to beta of the move from the
        last round's start to this one's, over as many steps as this worker took last round (in the units of the
        summed gradient the local optimizer applies)."""
        lr = scheme.options.local_lr * scheme.lr_factor
        for direction, starts, previous in zip(self.direction, scheme.start, self.previous_start):
            mx.nd.elemwise_sub(previous, starts[0], out=direction)
            direction *= self.beta / (lr * max(1, self.last_round_steps))
            starts[0].copyto(previous)

    def before_send(self, scheme, steps):
        self.last_round_steps, self.round_started = steps, False


def corrections(options):
    """The corrections the options ask for, in the order they apply to a step's gradient."""
    return ([ProximalTerm(options.proximal)] if options.proximal else []) + ([Scaffold()] if options.scaffold else []) \
        + ([ClientMomentum(options.client_momentum)] if options.client_momentum else [])
