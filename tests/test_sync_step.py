"""SSGD's plain SGD step folded into the backward pass (training/schemes/sync.py), against MXNet's SGD on the same
sums."""
import numpy as np
import pytest

from tests.checkpoint_helpers import args_for, lenet
from training import mxnet_internals
from training.schemes.sync import Sync

LR = 0.1
WORKERS = 2


def batches(count, size=8):
    rng = np.random.default_rng(0)
    return [(rng.integers(0, 256, (size, 1, 28, 28), dtype=np.uint8), rng.integers(0, 10, size).astype(np.float32))
            for _ in range(count)]


def summed_gradients(model, worker_batches):
    """The gradients of each worker's batch, summed as the transport sums them, left in the model's gradients."""
    total = None
    for images, labels in worker_batches:
        model.forward_backward(images, labels)
        grads = [p.grad().copy() for p in model.trainable]
        total = grads if total is None else [a + b for a, b in zip(total, grads)]
    for p, summed in zip(model.trainable, total):
        summed.copyto(p.grad())


def sync_scheme(model, *flags):
    scheme = Sync(Sync.Options.from_args(args_for("-m", "sync", "-l", str(LR), *flags)), model, None)
    scheme.num_workers = WORKERS
    scheme.trainer = scheme.local_trainer(LR)
    return scheme


def test_plain_sgd_folded_into_the_head_gradient_steps_as_mxnets_sgd_on_the_workers_mean():
    folded, reference = lenet(), lenet()
    scheme = sync_scheme(folded)
    assert mxnet_internals.plain_sgd(scheme.trainer)
    folded.scale_gradients(scheme.step_scale())
    trainer = sync_scheme(reference).trainer

    for round_batches in (batches(WORKERS), batches(WORKERS)[::-1]):
        summed_gradients(folded, round_batches)
        scheme.add_steps()
        summed_gradients(reference, round_batches)
        trainer.update(WORKERS)  # MXNet's SGD: w - lr x g / workers

    for mine, theirs in zip(folded.trainable, reference.trainable):
        np.testing.assert_allclose(mine.data().asnumpy(), theirs.data().asnumpy(), rtol=1e-5, atol=1e-6)
    assert any(abs(p.data().asnumpy() - q.data().asnumpy()).max() > 0 for p, q in zip(folded.trainable,
                                                                                  lenet().trainable))


def test_a_learning_rate_schedule_rescales_the_folded_step_each_round():
    model = lenet()
    scheme = sync_scheme(model)
    scheme.sums_are_steps = True
    scheme.scale_learning_rates(0.5)
    assert model.gradient_scale == pytest.approx(-LR * 0.5 / WORKERS)


@pytest.mark.parametrize("flags, optimizer", [(("--momentum", "0.9"), "sgd"), (("--wd", "0.0001"), "sgd"),
                                              ((), "adam")])
def test_any_rule_but_plain_sgd_keeps_mxnets_update(flags, optimizer):
    scheme = Sync(Sync.Options.from_args(args_for("-m", "sync", *flags)), lenet(), None)
    assert not mxnet_internals.plain_sgd(scheme.local_trainer(LR, optimizer))
