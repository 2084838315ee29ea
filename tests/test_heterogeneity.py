"""The emulated slowdown's rule, and the warm-up pass that keeps the graph's set-up out of the first step."""
import mxnet as mx
import numpy as np
import pytest

from training.devices import heterogeneity
from training.devices.heterogeneity import EmulatedSlowdown
from training.model import Model


@pytest.fixture
def slept(monkeypatch):
    pauses = []
    monkeypatch.setattr(heterogeneity.time, "sleep", pauses.append)
    return pauses


def test_each_step_is_padded_to_f_times_the_median_of_the_recent_steps(slept):
    slowdown = EmulatedSlowdown(20)

    first = slowdown.pad(0.006)
    second = slowdown.pad(0.008)

    assert first == pytest.approx(20 * 0.006 - 0.006)
    assert second == pytest.approx(20 * 0.007 - 0.008)
    assert slept == [first, second]


def test_a_step_that_waited_for_a_core_is_padded_to_the_typical_time_not_multiplied(slept):
    slowdown = EmulatedSlowdown(4)
    for compute in (0.010, 0.010, 0.010):
        slowdown.pad(compute)

    pause = slowdown.pad(0.030)    # this step met a busy core

    assert pause == pytest.approx(4 * 0.010 - 0.030)


def test_a_step_longer_than_f_typical_steps_sleeps_not_at_all(slept):
    slowdown = EmulatedSlowdown(2)
    for compute in (0.010, 0.010):
        slowdown.pad(compute)

    assert slowdown.pad(0.5) == 0.0


def test_a_step_on_a_smaller_batch_is_padded_to_the_typical_time_of_as_many_samples(slept):
    slowdown = EmulatedSlowdown(4)
    for _ in range(3):
        slowdown.pad(0.064, samples=64)  # 1 ms a sample

    pause = slowdown.pad(0.016, samples=16)

    assert pause == pytest.approx(4 * 0.016 - 0.016)


def test_the_warm_up_pass_leaves_weights_batchnorm_statistics_and_gradients_as_they_were():
    model = Model("resnet20", [mx.cpu()], (3, 32, 32))
    digest = model.digest()
    assert model.aux  # the network has BatchNorm statistics to keep

    model.warm_up(8)

    assert model.digest() == digest
    assert all(not p.grad().asnumpy().any() for p in model.trainable)
    model.forward_backward(np.full((8, 3, 32, 32), 255, np.uint8), np.zeros(8))
    assert any(p.grad().asnumpy().any() for p in model.trainable)
