"""The workers' local optimizers (--local-optimizer, --momentum, --wd): two steps of each against its formula."""
import pickle

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon

from training import config
from training.schemes.esync import ESync
from training.schemes.local import Local

LR, WD, MOMENTUM = 0.1, 0.01, 0.9
BETA1, BETA2, EPSILON = 0.9, 0.999, 1e-8  # Gluon's Adam defaults
START = np.array([1.0, -2.0, 3.0])
GRADIENT = np.array([0.5, 0.25, -1.0])  # of sum(w * GRADIENT), the loss each step differentiates


class OneWeight:
    """The part of training/model.Model a scheme's local step reads: one trainable weight, no statistics."""

    def __init__(self):
        self.ctxs = [mx.cpu()]
        self.weight = gluon.Parameter("w", shape=START.shape)
        self.weight.initialize(ctx=self.ctxs)
        self.weight.set_data(mx.nd.array(START))
        self.trainable, self.aux = [self.weight], []

    def forward_backward(self):
        with autograd.record():
            loss = (self.weight.data() * mx.nd.array(GRADIENT)).sum()
        loss.backward()

    def reduce_gradients(self):
        pass

    def value(self):
        return self.weight.data().asnumpy()


def esync(*flags):
    args = config.parse_args(["-m", "esync", "-ll", str(LR), "--wd", str(WD), *flags])
    scheme = ESync(ESync.Options.from_args(args), OneWeight(), None)
    scheme.local_trainer(scheme.options.local_lr, scheme.options.local_optimizer)
    return scheme


def steps(scheme, count):
    values = []
    for _ in range(count):
        scheme.model.forward_backward()
        scheme.local_step()
        values.append(scheme.model.value())
    return values


def sgd(count, momentum=0.0):
    w, velocity, values = START.copy(), np.zeros_like(START), []
    for _ in range(count):
        velocity = momentum * velocity - LR * (GRADIENT + WD * w)
        w = w + velocity
        values.append(w)
    return values


def adam(count):
    w, m, v, values = START.copy(), np.zeros_like(START), np.zeros_like(START), []
    for t in range(1, count + 1):
        g = GRADIENT + WD * w
        m = BETA1 * m + (1 - BETA1) * g
        v = BETA2 * v + (1 - BETA2) * g * g
        w = w - LR * np.sqrt(1 - BETA2 ** t) / (1 - BETA1 ** t) * m / (np.sqrt(v) + EPSILON)
        values.append(w)
    return values


@pytest.mark.parametrize("flags, expected", [
    (["--local-optimizer", "sgd"], sgd(2)),
    (["--local-optimizer", "momentum"], sgd(2, momentum=MOMENTUM)),
    (["--local-optimizer", "momentum", "--momentum", "0.5"], sgd(2, momentum=0.5)),
    (["--momentum", "0.5"], sgd(2, momentum=0.5)),
    (["--local-optimizer", "adam"], adam(2)),
])
def test_each_local_optimizer_updates_by_its_formula_with_weight_decay(flags, expected):
    assert np.allclose(steps(esync(*flags), 2), expected, rtol=1e-5, atol=1e-7)


def test_the_standalone_optimizer_takes_weight_decay():
    args = config.parse_args(["-m", "local", "-l", str(LR), "--wd", str(WD)])
    scheme = Local(Local.Options.from_args(args), OneWeight(), None)
    scheme.setup()

    assert np.allclose(steps(scheme, 2), sgd(2), rtol=1e-5, atol=1e-7)


def test_the_saved_adam_state_is_its_moments_and_step_count():
    scheme = esync("--local-optimizer", "adam")
    steps(scheme, 3)

    saved = pickle.loads(scheme.local_optimizer_states())

    mean, variance = pickle.loads(saved["states"])[0]
    assert saved["rule"] == "adam" and saved["update_counts"] == {0: 3}
    assert mean.shape == variance.shape == START.shape
