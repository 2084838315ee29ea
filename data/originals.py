"""The published files of MNIST, Fashion-MNIST and CIFAR-10, read by Gluon's dataset classes.

Gluon's classes (`gluon.data.vision.MNIST`, `FashionMNIST`, `CIFAR10`) download a file whenever the one on disk is
missing or its SHA-1 differs from the published file's. The subclasses here check the same hashes first and refuse
instead of downloading, so Gluon reads a user's original files and anything else (the shipped mnist-5k sample, a
subset, uncompressed copies, a test's tiny files) falls back to data/__init__'s readers. Nothing is ever fetched.
"""
import logging

import numpy as np

log = logging.getLogger("data")

GLUON_CLASS_NAMES = {"mnist": "MNIST", "fashion-mnist": "FashionMNIST", "cifar10": "CIFAR10"}


class NotTheOriginals(Exception):
    """A file Gluon's class would read is missing or differs from the published one."""


def read_split(root, dataset, train):
    """(images N x C x H x W uint8, labels int32) of one split read by Gluon's class for `dataset`, or None when the
    files under `root` are not the published ones (or Gluon has no class for the dataset)."""
    if dataset not in GLUON_CLASS_NAMES:
        return None
    try:
        split = offline_class(dataset)(root=root, train=train)
    except NotTheOriginals as err:
        log.debug("%s under %s: %s; read without Gluon", dataset, root, err)
        return None
    # The classes keep the whole split in these two attributes; indexing them sample by sample would copy each.
    images = split._data.asnumpy().transpose(0, 3, 1, 2)
    return np.ascontiguousarray(images), np.asarray(split._label, dtype=np.int32)


def offline_class(dataset):
    from mxnet.gluon.data import vision
    from mxnet.gluon.utils import check_sha1

    gluon_class = getattr(vision, GLUON_CLASS_NAMES[dataset])

    class Offline(gluon_class):
        def _get_data(self):
            for name, sha1 in self._files_checked():
                path = f"{self._root}/{name}"
                try:
                    verified = check_sha1(path, sha1)
                except OSError:
                    verified = False
                if not verified:
                    raise NotTheOriginals(f"{name} is missing or not the published file")
            super()._get_data()

        def _files_checked(self):
            if isinstance(self._train_data, list):  # CIFAR-10's class checks both splits' batches
                return self._train_data + self._test_data
            return [self._train_data, self._train_label] if self._train else [self._test_data, self._test_label]

    Offline.__name__ = f"Offline{gluon_class.__name__}"
    return Offline
