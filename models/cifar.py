"""CIFAR-style networks for 32 px input: ResNets without the ImageNet stem's downsampling, and VGGs whose five
max-pools leave 1x1x512.

Every network is a HybridSequential with a fixed prefix, so its parameter names do not depend on what else the
process built. The first convolution infers its input channels, so 1-channel (MNIST) images work as well.
"""
from functools import partial

from mxnet.gluon import nn

VGG_LAYERS = {  # output channels of each 3x3 conv; "M" a 2x2 max-pool
    11: (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"),
    16: (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"),
}


class BasicBlock(nn.HybridBlock):
    """Two 3x3 conv+BN layers added to a shortcut, then ReLU. The shortcut is the identity, or a 1x1 conv with
    the block's stride (followed by BN if `projection_bn`) where the block changes the shape."""

    def __init__(self, channels, stride, in_channels, use_bias=False, projection_bn=True, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.body = nn.HybridSequential(prefix="")
            self.body.add(nn.Conv2D(channels, 3, stride, 1, use_bias=use_bias), nn.BatchNorm(),
                          nn.Activation("relu"),
                          nn.Conv2D(channels, 3, 1, 1, use_bias=use_bias), nn.BatchNorm())
            self.projection = None
            if stride != 1 or in_channels != channels:
                self.projection = nn.HybridSequential(prefix="")
                self.projection.add(nn.Conv2D(channels, 1, stride, use_bias=use_bias))
                if projection_bn:
                    self.projection.add(nn.BatchNorm())

    def hybrid_forward(self, F, x):
        shortcut = self.projection(x) if self.projection else x
        return F.Activation(self.body(x) + shortcut, act_type="relu")


def _resnet(prefix, widths, blocks, classes, **block_options):
    """3x3 conv+BN+ReLU stem of widths[0] channels, a stage of `blocks` blocks per width (stride 2 from the
    second stage on), global average pool, Dense(classes)."""
    net = nn.HybridSequential(prefix=prefix)
    with net.name_scope():
        net.add(nn.Conv2D(widths[0], 3, 1, 1, use_bias=block_options.get("use_bias", False)), nn.BatchNorm(),
                nn.Activation("relu"))
        in_channels = widths[0]
        for index, channels in enumerate(widths):
            stage = nn.HybridSequential(prefix=f"stage{index + 1}_")
            with stage.name_scope():
                for i in range(blocks):
                    stride = 2 if index > 0 and i == 0 else 1
                    stage.add(BasicBlock(channels, stride, in_channels, prefix=f"block{i}_", **block_options))
                    in_channels = channels
            net.add(stage)
        net.add(nn.GlobalAvgPool2D(), nn.Dense(classes))
    return net


def resnet18(classes):
    """d2l's ResNet-18 for CIFAR-10 (d2l.ai, "Image Classification (CIFAR-10) on Kaggle"): ImageNet's ResNet-18
    with a 3x3 stride-1 stem and no max-pool. As in d2l the convolutions have biases and the projection
    shortcut is a 1x1 conv without BN. 11.2 M parameters."""
    return _resnet("resnet18cifar_", (64, 128, 256, 512), 2, classes, use_bias=True, projection_bn=False)


def resnet(depth, classes):
    """He et al. 2016's CIFAR-10 ResNet of depth 6n+2 (n blocks per stage, 16/32/64 channels).

    Shortcuts are the paper's option B: identity, and a 1x1 conv+BN projection at the two blocks that halve the
    size and double the channels. The paper's CIFAR-10 runs used option A (zero-padded identity, no weights);
    option B adds 2,752 trainable parameters (ResNet-20: 269,722 with option A, 272,474 here)."""
    n, rest = divmod(depth - 2, 6)
    assert rest == 0 and n > 0, f"depth {depth} is not 6n+2"
    return _resnet(f"resnet{depth}_", (16, 32, 64), n, classes)


def vgg(depth, classes):
    """VGG-11 or VGG-16's convolutions (3x3, each followed by BN and ReLU; no conv bias, BN has one) on 32 px
    input, then Dense(classes) on the 1x1x512 the five max-pools leave: no 4096-wide layers, no dropout."""
    net = nn.HybridSequential(prefix=f"vgg{depth}cifar_")
    with net.name_scope():
        for layer in VGG_LAYERS[depth]:
            if layer == "M":
                net.add(nn.MaxPool2D(pool_size=2, strides=2))
            else:
                net.add(nn.Conv2D(layer, 3, 1, 1, use_bias=False), nn.BatchNorm(), nn.Activation("relu"))
        net.add(nn.Dense(classes))
    return net


BUILDERS = {
    "resnet18-cifar": resnet18,
    **{f"resnet{depth}": partial(resnet, depth) for depth in (20, 32, 56, 110)},
    **{f"vgg{depth}-cifar": partial(vgg, depth) for depth in VGG_LAYERS},
}


def build(name, classes):
    """A fresh, uninitialised network: `name` is one of BUILDERS."""
    return BUILDERS[name](classes)
