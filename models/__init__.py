"""Networks by name: Gluon's model zoo for the paper's networks, two small CPU-friendly ones written here, and
CIFAR-style ResNets and VGGs for 32 px input written in models/cifar.py (d2l's ResNet-18, He et al.'s
ResNet-20/32/56/110, VGG-11/16 with BatchNorm).

Every network takes 1- or 3-channel images and has 10 classes. `input_size` is the side length the network
expects; None means it takes the dataset's own size (28 for MNIST-like data, 32 for CIFAR-10).
"""
from collections import namedtuple

NetworkSpec = namedtuple("NetworkSpec", "zoo_name input_size")

NETWORKS = {
    "resnet18-v1": NetworkSpec("resnet18_v1", None),
    "resnet50-v1": NetworkSpec("resnet50_v1", None),
    "resnet50-v2": NetworkSpec("resnet50_v2", None),
    "resnet152-v1": NetworkSpec("resnet152_v1", None),
    "alexnet": NetworkSpec("alexnet", 224),
    "mobilenet-v1": NetworkSpec("mobilenet1.0", None),
    "mobilenet-v2": NetworkSpec("mobilenetv2_1.0", None),
    "inception-v3": NetworkSpec("inceptionv3", 299),
    "vgg11": NetworkSpec("vgg11", 224),
    "vgg16": NetworkSpec("vgg16", 224),
    "lenet": NetworkSpec(None, None),
    "mlp": NetworkSpec(None, None),
    # models/cifar.py: 32 px even for 28 px MNIST (VGG's five max-pools need it).
    "resnet18-cifar": NetworkSpec(None, 32),
    "resnet20": NetworkSpec(None, 32),
    "resnet32": NetworkSpec(None, 32),
    "resnet56": NetworkSpec(None, 32),
    "resnet110": NetworkSpec(None, 32),
    "vgg11-cifar": NetworkSpec(None, 32),
    "vgg16-cifar": NetworkSpec(None, 32),
}

NUM_CLASSES = 10
# The units (filters, neurons) of each hidden Conv2D and Dense layer of the networks that are chains of them, which
# get_network() can also build narrower (FedDrop's sub-models).
WIDTHS = {"lenet": (6, 16, 120, 84), "mlp": (256, 128)}


def input_size(name):
    return NETWORKS[name].input_size


def get_network(name, classes=NUM_CLASSES, widths=None):
    """A fresh, uninitialised Gluon network; `widths` (lenet and mlp) replaces WIDTHS[name]."""
    spec = NETWORKS[name]
    if name == "lenet":
        return _lenet(classes, widths or WIDTHS[name])
    if name == "mlp":
        return _mlp(classes, widths or WIDTHS[name])
    if spec.zoo_name is None:
        from models import cifar

        return cifar.build(name, classes)
    from mxnet.gluon.model_zoo import vision

    return vision.get_model(spec.zoo_name, classes=classes)


def _lenet(classes, widths):
    """LeNet-5 (44k parameters on 28x28 input)."""
    from mxnet.gluon import nn

    conv1, conv2, dense1, dense2 = widths
    net = nn.HybridSequential(prefix="lenet_")
    with net.name_scope():
        net.add(nn.Conv2D(conv1, kernel_size=5, activation="relu"),
                nn.MaxPool2D(pool_size=2, strides=2),
                nn.Conv2D(conv2, kernel_size=5, activation="relu"),
                nn.MaxPool2D(pool_size=2, strides=2),
                nn.Flatten(),
                nn.Dense(dense1, activation="relu"),
                nn.Dense(dense2, activation="relu"),
                nn.Dense(classes))
    return net


def _mlp(classes, widths):
    from mxnet.gluon import nn

    hidden1, hidden2 = widths
    net = nn.HybridSequential(prefix="mlp_")
    with net.name_scope():
        net.add(nn.Flatten(), nn.Dense(hidden1, activation="relu"), nn.Dense(hidden2, activation="relu"),
                nn.Dense(classes))
    return net
