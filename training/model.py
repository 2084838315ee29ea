"""The network a worker trains: built on its devices, its parameters in kvstore key order, its evaluation."""
import hashlib

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import models
from data import CIFAR_SIDE, to_float
from training import mxnet_internals

EVAL_BATCH = 500
KEPT_TEST_BYTES = 256 * 2 ** 20  # a test set kept as inputs up to this size (lenet on Fashion-MNIST: 31 MB)
EVAL_BATCH_LARGE_INPUT = 50  # networks whose input is resized up (224 px and more) hold far larger activations


SNAPSHOT_ENGINE_COPY = 1 << 16  # parameters of at least this many values are snapshot by MXNet's engine


def copy_of(array):
    return array.copyto(mx.cpu()) if array.size >= SNAPSHOT_ENGINE_COPY else array.asnumpy()


def save_snapshot(path, arrays):
    """MXNet's parameter file of Model.snapshot()'s arrays: what Model.load reads."""
    mx.nd.save(path, {name: mx.nd.array(a, dtype=a.dtype) if isinstance(a, np.ndarray) else a
                      for name, a in arrays.items()})


class Model:
    """A Gluon network replicated on one or more devices of one worker."""

    def __init__(self, network, ctxs, sample_shape, seed=0, normalise=None, eval_batch_size=None):
        """`normalise`: (per-channel mean, per-channel std) of images in [0, 1], or None."""
        self.ctxs = ctxs
        self.sample_shape = tuple(sample_shape)
        self.side = models.input_size(network)
        self.eval_batch = eval_batch_size or (EVAL_BATCH_LARGE_INPUT if (self.side or 0) > CIFAR_SIDE else EVAL_BATCH)
        self.normalise = {ctx: tuple(mx.nd.array(v, ctx=ctx).reshape((1, -1, 1, 1)) for v in normalise)
                          for ctx in ctxs} if normalise else None
        mx.random.seed(seed)
        self.network = network
        self.use_network(self.built(network))
        self.loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
        self.steps_overlap_transfers = False  # set by a scheme whose transfers run while the steps do
        self._kept_test = None  # (images, labels, their batches as inputs): _test_batches
        self.scale_gradients(1.0)

    def built(self, network, widths=None):
        """A new network on this worker's devices, initialised and hybridized (`widths`: models.get_network's)."""
        net = models.get_network(network, widths=widths)
        net.hybridize(static_alloc=True)
        # Shapes from a sample, then initialisation, rather than a first pass finishing a deferred one: in an
        # inference pass each convolution pushes, as it runs, a reorder of its weight into MKLDNN's layout. A read of
        # the weight can then copy it while it is rewritten (5 of 150 new resnet20s read a wrong weight beside two
        # busy processes), and kv.init of a reordered weight aborts the server ("init N first").
        net.infer_shape(self._prepare(np.zeros((1,) + self.sample_shape, np.uint8), self.ctxs[0]))
        net.initialize(mx.init.Xavier(magnitude=2.24), ctx=self.ctxs)
        return net

    def use_network(self, net):
        """Train and evaluate `net` from now on (FedDrop swaps in a narrower one for a round)."""
        self.net = net
        params = list(net.collect_params().values())
        # Trainable parameters first: their keys are the ones every scheme pushes each round.
        self.trainable = [p for p in params if p.grad_req != "null"]
        self.aux = [p for p in params if p.grad_req == "null"]  # BatchNorm running statistics

    @property
    def params(self):
        return self.trainable + self.aux

    @property
    def num_params(self):
        return int(sum(np.prod(p.shape) for p in self.params))

    @property
    def param_bytes(self):
        return int(sum(np.prod(p.shape) * np.dtype(p.dtype).itemsize for p in self.params))

    def _prepare(self, images, ctx):
        x = mx.nd.array(to_float(images), ctx=ctx)
        if self.normalise:
            mean, std = self.normalise[ctx]
            x = mx.nd.broadcast_div(mx.nd.broadcast_sub(x, mean), std)
        if self.side and x.shape[-1] != self.side:
            x = mx.nd.contrib.BilinearResize2D(x, height=self.side, width=self.side)
        return x

    def scale_gradients(self, scale):
        """From the next backward pass on, each gradient is `scale` x the loss's: the loss's head gradient."""
        self.gradient_scale = scale
        self._head_gradients = {}

    def _head_gradient(self, loss):
        """None (MXNet's ones) unscaled, else an array of the scale, made once per device and batch shape."""
        if self.gradient_scale == 1.0:
            return None
        key = (loss.context, loss.shape)
        if key not in self._head_gradients:
            self._head_gradients[key] = mx.nd.full(loss.shape, self.gradient_scale, ctx=loss.context)
        return self._head_gradients[key]

    def wait_for_weights(self):
        """Return once every weight is written: a local update queued on MXNet's engine has run (under a CPU quota,
        inside it, and timed as the update)."""
        for p in self.trainable:
            for data in p.list_data():
                data.wait_to_read()

    def forward_backward(self, images, labels, while_backward=None):
        """One pass over a batch split across the devices; gradients of the loss summed over the batch (times
        gradient_scale).
        `while_backward`, a callable, runs once the backward pass is queued, before it is waited for: what it queues
        on the gradients (a scheme's per-key pushes) starts as each gradient is written, last layers first, while
        the backward pass goes on computing the first ones (MXNet's overlap of backward and communication)."""
        parts = np.array_split(np.arange(len(labels)), len(self.ctxs))
        losses = []
        with autograd.record():
            for ctx, idx in zip(self.ctxs, parts):
                out = self.net(self._prepare(images[idx], ctx))
                losses.append(self.loss_fn(out, mx.nd.array(labels[idx], ctx=ctx)))
        for loss in losses:
            loss.backward(self._head_gradient(loss))
        # The step's compute time is measured, and the emulated slowdown scales it. With transfers in flight (queued
        # here, or --overlap's aggregation) the step waits for its own gradients only: waitall() would wait for the
        # transfers too. Without them, waitall() is cheaper (lenet: 6.16 against 6.33 ms a step, one wait per
        # gradient).
        if while_backward is not None:
            # What is queued on a gradient may write into it (MXNet's kvstore pulls a key through the array pushed
            # for it): the end of each gradient's computing is marked before, by an operation that only reads it.
            written = [mx.nd.shape_array(grad) for p in self.trainable for grad in p.list_grad()]
            while_backward()
            for mark in written:
                mark.wait_to_read()
        elif self.steps_overlap_transfers:
            for p in self.trainable:
                for grad in p.list_grad():
                    grad.wait_to_read()
        else:
            mx.nd.waitall()

    def warm_up(self, batch_size):
        """One forward and backward pass on a zero batch of a step's size, before the first step. The first pass of a
        shape sets up the graph's primitives and memory (35-50 ms for lenet against a 7 ms step; 0.6-0.9 s while six
        workers start on two cores), which would otherwise count as the first step's compute, and the emulated
        slowdown would multiply it. The weights are untouched, BatchNorm statistics restored, gradients zeroed."""
        statistics = [[data.copy() for data in p.list_data()] for p in self.aux]
        self.forward_backward(np.zeros((batch_size,) + self.sample_shape, np.uint8), np.zeros(batch_size))
        for p, saved in zip(self.aux, statistics):
            for data, copy in zip(p.list_data(), saved):
                copy.copyto(data)
        for p in self.trainable:
            p.zero_grad()
        mx.nd.waitall()

    def reduce_gradients(self):
        """Sum the gradients of the device copies into each copy (no-op on one device)."""
        if len(self.ctxs) == 1:
            return
        for p in self.trainable:
            grads = p.list_grad()
            total = mx.nd.add_n(*[g.as_in_context(self.ctxs[0]) for g in grads])
            for g in grads:
                total.copyto(g)

    def accuracy(self, images, labels):
        """Correct predictions over all test samples (not a mean of per-batch accuracies)."""
        return self.test(images, labels)[0]

    def test(self, images, labels):
        """(accuracy, mean loss) over all test samples: correct predictions over the samples, not a mean of
        per-batch accuracies; the loss is nan or inf where the weights overflowed."""
        ctx = self.ctxs[0]
        correct = mx.nd.zeros((1,), ctx=ctx)
        loss = mx.nd.zeros((1,), ctx=ctx)
        for x, y in self._test_batches(images, labels):
            out = self.net(x)
            correct += (out.argmax(axis=1) == y.astype(out.dtype)).sum()
            loss += self.loss_fn(out, y).sum()
        return float(correct.asscalar()) / len(labels), float(loss.asscalar()) / len(labels)

    def _test_batches(self, images, labels):
        """The test set as the network takes it, batch by batch: made once for the arrays last tested where it fits
        in KEPT_TEST_BYTES (each test of the same set then skips the conversion), else made anew each time."""
        ctx, batch = self.ctxs[0], self.eval_batch
        if self._kept_test and self._kept_test[0] is images and self._kept_test[1] is labels:
            return self._kept_test[2]
        made = ((self._prepare(images[start:start + batch], ctx), mx.nd.array(labels[start:start + batch], ctx=ctx))
                for start in range(0, len(labels), batch))
        side = self.side or images.shape[-1]
        if len(labels) * int(np.prod(images.shape[1:-2])) * side * side * 4 > KEPT_TEST_BYTES:
            return made
        self._kept_test = (images, labels, list(made))
        return self._kept_test[2]

    def digest(self, arrays=None):
        """A fingerprint of `arrays` (default: every parameter on the first device): equal digests, equal values."""
        if arrays is None:
            arrays = [p.data(self.ctxs[0]) for p in self.params]
        sha = hashlib.sha1()
        for array in arrays:
            sha.update(array.asnumpy().tobytes())
        return sha.hexdigest()

    def save(self, path):
        self.net.save_parameters(path)

    def snapshot(self):
        """A copy of every parameter on the first device, by the names save() gives them: {name: numpy array or
        NDArray}. Small parameters are copied to numpy at once (making an NDArray costs ~30 us, more than copying
        thousands of values); large ones are copied by MXNet's engine, not waited for here (the next update of the
        weight waits for its copy). save_snapshot() writes the result."""
        ctx = self.ctxs[0]
        return {name: copy_of(param.data(ctx)) for name, param in mxnet_internals.parameters_by_name(self.net).items()}

    def load(self, path):
        """Weights saved by save() (a checkpoint), onto every device."""
        self.net.load_parameters(path, ctx=self.ctxs)
