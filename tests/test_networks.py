"""The CIFAR-style networks of models/cifar.py and the zoo's ResNet-152: built, wrapped in training's Model, one
SGD step each; the He et al. ResNets' depth and size."""
import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon

import models
from models import cifar
from training.model import Model

HE_RESNETS = {"resnet20": 3, "resnet32": 5, "resnet56": 9, "resnet110": 18}  # name: blocks per stage (n)
NEW_NETWORKS = sorted(cifar.BUILDERS) + ["resnet152-v1"]
CPU = [mx.cpu()]


def weights(net):
    return [p for p in net.collect_params().values() if p.name.endswith("weight")]


def trainable_count(net):
    return sum(int(np.prod(p.shape)) for p in net.collect_params().values() if p.grad_req != "null")


@pytest.mark.parametrize("name", NEW_NETWORKS)
def test_one_sgd_step_on_two_cifar_images_gives_ten_finite_logits_and_moves_the_first_layer(name):
    model = Model(name, CPU, (3, 32, 32))  # Xavier, hybridized, as training builds it
    trainer = gluon.Trainer(model.net.collect_params(), "sgd", {"learning_rate": 0.1})
    first = model.trainable[0]
    before = first.data().copy()
    images, labels = mx.nd.random.normal(shape=(2, 3, 32, 32)), mx.nd.array([3, 7])

    with autograd.record():
        out = model.net(images)
        loss = model.loss_fn(out, labels)
    loss.backward()
    trainer.step(2)

    assert out.shape == (2, 10)
    assert np.isfinite(loss.asnumpy()).all()
    assert not np.array_equal(first.data().asnumpy(), before.asnumpy())


@pytest.mark.parametrize("name", ["resnet20", "vgg11-cifar"])
def test_cifar_networks_train_on_mnist_images_resized_to_32_px(name):
    # 28 px would leave VGG's fifth max-pool nothing to pool: the Model resizes to the declared 32.
    model = Model(name, CPU, (1, 28, 28))
    images = np.random.RandomState(0).randint(0, 256, (2, 1, 28, 28)).astype(np.uint8)

    model.forward_backward(images, np.array([1, 2]))

    assert models.input_size(name) == 32
    assert model.trainable[0].shape[1] == 1  # the first conv took the single channel
    grads = [p.grad().asnumpy() for p in model.trainable]
    assert all(np.isfinite(g).all() for g in grads)
    assert any(g.any() for g in grads)
    # the resized test images get one class each: of the ten labellings that shift every label alike, exactly one
    # matches each image's prediction
    assert sum(model.accuracy(images, (np.array([1, 2]) + k) % 10) for k in range(10)) == pytest.approx(1.0)


@pytest.mark.parametrize("name, n", HE_RESNETS.items())
def test_he_resnets_have_6n_plus_2_weighted_layers_and_two_projection_shortcuts(name, n):
    net = models.get_network(name)
    net.initialize()
    net(mx.nd.zeros((1, 3, 32, 32)))

    shapes = [p.shape for p in weights(net)]
    layers = [s for s in shapes if len(s) == 2 or s[2:] == (3, 3)]  # Dense, and 3x3 convs
    projections = [s for s in shapes if len(s) == 4 and s[2:] == (1, 1)]
    assert len(layers) == 6 * n + 2
    assert sorted(s[:2] for s in projections) == [(32, 16), (64, 32)]


def test_resnet20_has_the_papers_0_27_million_parameters():
    net = models.get_network("resnet20")
    net.initialize()
    net(mx.nd.zeros((1, 3, 32, 32)))

    # 272,474 trainable: the paper's 0.27M (269,722 with its zero-padding shortcuts) and two 1x1 conv+BN.
    assert trainable_count(net) == pytest.approx(270_000, rel=0.03)


@pytest.mark.parametrize("name", sorted(cifar.BUILDERS))
def test_parameter_names_carry_a_fixed_prefix_whatever_was_built_before(name):
    first = list(models.get_network(name).collect_params().keys())
    models.get_network("resnet20")
    again = list(models.get_network(name).collect_params().keys())

    assert first == again
    prefix = name.replace("-", "") + "_"
    assert all(key.startswith(prefix) for key in first)
