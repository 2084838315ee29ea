"""The published files of MNIST, Fashion-MNIST and CIFAR-10, read by Gluon's dataset classes.

Gluon's classes (`gluon.data.vision.MNIST`, `FashionMNIST`, `CIFAR10`) download a file whenever the one on disk is
missing or its SHA-1 differs from the published file's. The subclasses here check the same hashes first and refuse
instead of downloading, so Gluon reads a user's original files and anything else (the shipped mnist-5k sample, a
subset, uncompressed copies, a test's tiny files) falls back to data/__init__'s readers. Nothing is ever fetched.
The same hashes are checked once more before MXNet is imported (PUBLISHED_SHA1), so that other files, and damaged
ones, reach those readers and their one-line errors without the second MXNet takes to load.

Copies recompressed by someone else (Debian's package dataset-fashion-mnist) have other .gz hashes but the published
contents: data/__init__'s readers read them, and they are recognised by the MD5 of their uncompressed bytes
(PUBLISHED_CONTENT_MD5), so that the log says the published dataset was trained on.
"""
import hashlib
import logging
import os

from training.lazy import np

log = logging.getLogger("data")

GLUON_CLASS_NAMES = {"mnist": "MNIST", "fashion-mnist": "FashionMNIST", "cifar10": "CIFAR10"}
# The published files' SHA-1, as mxnet 1.9.1's dataset classes list them, per split; CIFAR-10's class checks both.
PUBLISHED_SHA1 = {
    "mnist": {
        "train": {"train-images-idx3-ubyte.gz": "6c95f4b05d2bf285e1bfb0e7960c31bd3b3f8a7d",
                  "train-labels-idx1-ubyte.gz": "2a80914081dc54586dbdf242f9805a6b8d2a15fc"},
        "t10k": {"t10k-images-idx3-ubyte.gz": "c3a25af1f52dad7f726cce8cacb138654b760d48",
                 "t10k-labels-idx1-ubyte.gz": "763e7fa3757d93b0cdec073cef058b2004252c17"}},
    "fashion-mnist": {
        "train": {"train-images-idx3-ubyte.gz": "0cf37b0d40ed5169c6b3aba31069a9770ac9043d",
                  "train-labels-idx1-ubyte.gz": "236021d52f1e40852b06a4c3008d8de8aef1e40b"},
        "t10k": {"t10k-images-idx3-ubyte.gz": "626ed6a7c06dd17c0eec72fa3be1740f146a2863",
                 "t10k-labels-idx1-ubyte.gz": "17f9ab60e7257a1620f4ad76bbbaf857c3920701"}},
}
_CIFAR10 = {"data_batch_1.bin": "aadd24acce27caa71bf4b10992e9e7b2d74c2540",
            "data_batch_2.bin": "c0ba65cce70568cd57b4e03e9ac8d2a5367c1795",
            "data_batch_3.bin": "1dd00a74ab1d17a6e7d73e185b69dbf31242f295",
            "data_batch_4.bin": "aab85764eb3584312d3c7f65fd2fd016e36a258e",
            "data_batch_5.bin": "26e2849e66a845b7f1e4614ae70f4889ae604628",
            "test_batch.bin": "67eb016db431130d61cd03c7ad570b013799c88c"}
PUBLISHED_SHA1["cifar10"] = {"train": _CIFAR10, "t10k": _CIFAR10}


# MD5 of each published file's uncompressed bytes, by the stem of its name (the same for the .gz and the plain file).
PUBLISHED_CONTENT_MD5 = {
    "fashion-mnist": {"train-images-idx3-ubyte": "f4a8712d7a061bf5bd6d2ca38dc4d50a",
                      "train-labels-idx1-ubyte": "9018921c3c673c538a1fc5bad174d6f9",
                      "t10k-images-idx3-ubyte": "8181f5470baa50b63fa0f6fddb340f0a",
                      "t10k-labels-idx1-ubyte": "15d484375f8d13e6eb1aabb0c3f46965"},
}
PUBLISHED = "published"          # the published files themselves, read by Gluon's class
RECOMPRESSED = "recompressed"    # other files holding the published contents, read by data/__init__'s readers


def same_contents(dataset, path, raw):
    """Whether `raw`, the uncompressed bytes of the file at `path`, are the published file's of that name."""
    stem = os.path.basename(path)
    stem = stem[:-3] if stem.endswith(".gz") else stem
    expected = PUBLISHED_CONTENT_MD5.get(dataset, {}).get(stem)
    return expected is not None and hashlib.md5(raw).hexdigest() == expected


def describe(*origins):
    """How the log names the files of the splits read (their origins as _read_split gives them)."""
    if all(origin == PUBLISHED for origin in origins):
        return " (the published files)"
    if all(origin in (PUBLISHED, RECOMPRESSED) for origin in origins):
        return " (the published contents, recognised by their uncompressed bytes' MD5)"
    return ""


class NotTheOriginals(Exception):
    """A file Gluon's class would read is missing or differs from the published one."""


def read_split(root, dataset, train):
    """(images N x C x H x W uint8, labels int32) of one split read by Gluon's class for `dataset`, or None when the
    files under `root` are not the published ones (or Gluon has no class for the dataset)."""
    if dataset not in GLUON_CLASS_NAMES or not published(root, dataset, train):
        return None
    try:
        split = offline_class(dataset)(root=root, train=train)
    except NotTheOriginals as err:
        log.debug("%s under %s: %s; read without Gluon", dataset, root, err)
        return None
    # The classes keep the whole split in these two attributes; indexing them sample by sample would copy each.
    images = split._data.asnumpy().transpose(0, 3, 1, 2)
    return np.ascontiguousarray(images), np.asarray(split._label, dtype=np.int32)


def published(root, dataset, train):
    """Whether every file Gluon's class reads for the split under `root` is the published one."""
    return all(_sha1(os.path.join(root, name)) == sha1
               for name, sha1 in PUBLISHED_SHA1[dataset]["train" if train else "t10k"].items())


def _sha1(path):
    digest = hashlib.sha1()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()


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
