"""How a worker's delta is weighted in the sum the workers exchange, and the scale of that sum that moves the global
model: plainly (the average), or FedNova's normalisation (Wang et al. 2020), each delta divided by a power of the
worker's local work a_i. With ESync's unequal local steps a plain average weighs each worker by its steps, and the
classes of the slow workers' shares nearly drop out of it."""


def step_norm(steps, momentum=0.0):
    """FedNova's a_i of a worker that took `steps` local steps: the steps themselves with plain SGD; with momentum
    beta, the summed coefficients of the gradients in its delta, (steps - beta (1 - beta^steps) / (1 - beta)) /
    (1 - beta)."""
    if not momentum:
        return float(steps)
    return (steps - momentum * (1 - momentum ** steps) / (1 - momentum)) / (1 - momentum)


def normalised_weight(norm, power):
    """What a worker's delta is divided by before it is summed, for its FedNova a_i (`norm`): a_i^power; and what
    travels beside it for the scale, a_i^(1 - power)."""
    return norm ** power, norm ** (1 - power)


def normalised_scale(sum_norms, sum_complements, workers):
    """The factor of the sum of the divided deltas (delta_i / a_i^p) that moves the global model by as many steps
    as the workers' mean a_i, as the plain average does:
        sum_i k a_i^-p a_i = sum_i a_i / n   =>   k = sum_i a_i / (n sum_i a_i^(1 - p))
    (p = 1: k = mean a_i / n, FedNova's; p = 0: k = 1 / n, the plain average)."""
    return sum_norms / (workers * sum_complements)


class PlainAverage:
    control_entries = 0  # what travels beside the stop vote in the control array

    def weigh(self, deltas, steps, control):
        """Prepare this worker's deltas, taken in `steps` local steps, for the sum (in place)."""

    def scale(self, control, workers):
        """The factor of the summed deltas that is the workers' average move."""
        return 1.0 / workers


class NormalisedAverage:
    """--normalised-averaging: each delta divided by a_i^power, a_i and a_i^(1 - power) summed beside them."""
    control_entries = 2

    def __init__(self, power, momentum):
        self.power, self.momentum = power, momentum

    def weigh(self, deltas, steps, control):
        norm = step_norm(steps, self.momentum)
        divisor, complement = normalised_weight(norm, self.power)
        control[1], control[2] = norm, complement
        for delta in deltas:
            delta /= divisor

    def scale(self, control, workers):
        sum_norms, sum_complements = control[1:3].asnumpy()
        return normalised_scale(sum_norms, sum_complements, workers)


def weighting(options):
    if options.normalised_averaging:
        return NormalisedAverage(options.normalisation_power, options.momentum)
    return PlainAverage()
