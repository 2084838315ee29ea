"""Datasets on disk, their partition across workers, and the batch stream a worker trains on.

Layouts read (nothing is downloaded; the published files go through Gluon's dataset classes, data/originals.py):
  <data_dir>/<dataset>/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]   fashion-mnist, mnist, mnist-5k
  <data_dir>/cifar-10-batches-bin/{data_batch_1..5,test_batch}.bin          cifar10

Without -dd the data folder is the first of DATA_DIRS that holds the dataset: the repository's data/ (the shipped
mnist-5k, or a user's copy), then /usr/share/datasets/, where Debian's package dataset-fashion-mnist puts
Fashion-MNIST. $ESYNC_DATA_PATH (folders separated by ':') replaces that list.
"""
import gzip
import os
import queue
import struct
import threading
from collections import namedtuple

from data import originals
from training.lazy import np

# source: one line naming the files read and what they are, for the log
Dataset = namedtuple("Dataset", "train_images train_labels test_images test_labels source", defaults=("",))

IDX_IMAGES_MAGIC = 2051
IDX_LABELS_MAGIC = 2049
CIFAR_SIDE = 32
CIFAR_RECORD = 1 + 3 * CIFAR_SIDE * CIFAR_SIDE
CIFAR_TRAIN_FILES = tuple(f"data_batch_{i}.bin" for i in range(1, 6))
CIFAR_TEST_FILES = ("test_batch.bin",)
NUM_CLASSES = 10  # every dataset here has ten classes, labelled 0-9
# Per-channel mean and standard deviation of CIFAR-10's training images in [0, 1]: both splits are normalised by them.
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
CROP_PADDING = 4  # --augment crop: crops of the image padded by 4 pixels on each side
RESIZED_CROP_ZOOM = 1.25  # --augment resized-crop (d2l's): 32 px images resized to 40 px,
RESIZED_CROP_AREA = (0.64, 1.0)  # then a square of this share of the area, resized back to 32 px

DATA_DIRS = ("data", "/usr/share/datasets")
DATA_PATH_VARIABLE = "ESYNC_DATA_PATH"
WHERE_TO_GET = {
    "fashion-mnist": "Debian's package: apt-get install dataset-fashion-mnist (it lands in /usr/share/datasets), "
                     "or the four *-ubyte.gz files of https://github.com/zalandoresearch/fashion-mnist",
    "mnist": "http://yann.lecun.com/exdb/mnist/ (the four *-ubyte.gz files)",
    "mnist-5k": "this repository (data/mnist-5k)",
    "cifar10": "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz (extract it there)",
}


class DataError(Exception):
    """A dataset that is missing or malformed; the message says which file and what to do."""


def data_dirs():
    """The folders searched, in order, for a dataset when -dd is not given."""
    variable = os.environ.get(DATA_PATH_VARIABLE)
    return tuple(filter(None, variable.split(":"))) if variable is not None else DATA_DIRS


def find_data_dir(dataset):
    """The first folder of data_dirs() that holds every file of `dataset`; DataError naming them all otherwise."""
    searched = data_dirs()
    for folder in searched:
        try:
            check_dataset(folder, dataset)
        except DataError:
            continue
        return folder
    raise DataError(f"{dataset} not found in {' or '.join(searched) or '(no folder: $' + DATA_PATH_VARIABLE + ')'} "
                    f"(or give -dd); get it from {WHERE_TO_GET[dataset]}")


def resolve_data_dir(data_dir, dataset):
    """-dd as given, or the folder find_data_dir finds; DataError when none holds the dataset."""
    return find_data_dir(dataset) if data_dir is None else data_dir


def dataset_path(data_dir, dataset):
    folder = "cifar-10-batches-bin" if dataset == "cifar10" else dataset
    return os.path.join(data_dir, folder)


def check_dataset(data_dir, dataset, splits=("train", "t10k")):
    """Raise DataError naming every missing file, before anything expensive starts."""
    root = dataset_path(data_dir, dataset)
    if dataset == "cifar10":
        files = {"train": CIFAR_TRAIN_FILES, "t10k": CIFAR_TEST_FILES}
        wanted = [os.path.join(root, name) for split in splits for name in files[split]]
        missing = [path for path in wanted if not os.path.isfile(path)]
    else:
        missing = [_idx_stem(root, split, kind) + "[.gz]" for split in splits for kind in ("images", "labels")
                   if _idx_file(root, split, kind) is None]
    if missing:
        raise DataError(f"{dataset} not found: missing {', '.join(missing)}; get it from {WHERE_TO_GET[dataset]}")


HOLDOUT_SEED = 20_000  # one validation split per data set, whatever the run's --seed: every trial is judged on it


def holdout_split(num_samples, size):
    """(held-out indices, the rest) of a training set: `size` samples drawn by HOLDOUT_SEED, both sorted."""
    order = np.random.RandomState(HOLDOUT_SEED).permutation(num_samples)
    return np.sort(order[:size]), np.sort(order[size:])


def load_dataset(data_dir, dataset, holdout=0):
    """The training and test sets; with `holdout` N, N training samples are held out and stand for the test set,
    which is then not read (a search judges its trials on data the reported results never test)."""
    if holdout:
        images, labels, origin = _read_training_set(data_dir, dataset, holdout)
        held, others = holdout_split(len(labels), holdout)
        source = (f"{dataset} from {dataset_path(data_dir, dataset)}: {len(others)} training samples and {holdout} "
                  f"held out of them to validate on (the test set unread){originals.describe(origin)}")
        return Dataset(images[others], labels[others], images[held], labels[held], source)
    check_dataset(data_dir, dataset)
    root = dataset_path(data_dir, dataset)
    (train_images, train_labels, train_origin), (test_images, test_labels, test_origin) = [
        _read_split(root, dataset, split) for split in ("train", "t10k")]
    source = (f"{dataset} from {root}: {len(train_labels)} training and {len(test_labels)} test samples"
              f"{originals.describe(train_origin, test_origin)}")
    if train_images.shape[1:] != test_images.shape[1:]:  # idx files only: CIFAR-10's batches are all 32 px
        raise DataError(f"{_idx_file(root, 't10k', 'images')} holds images of {test_images.shape[2:]} pixels, "
                        f"{_idx_file(root, 'train', 'images')} of {train_images.shape[2:]}")
    return Dataset(train_images, train_labels, test_images, test_labels, source)


def load_validation_set(data_dir, dataset, size):
    """(images, labels) of the `size` training samples held out to validate on."""
    images, labels, _ = _read_training_set(data_dir, dataset, size)
    held, _ = holdout_split(len(labels), size)
    return images[held], labels[held]


def _read_training_set(data_dir, dataset, holdout):
    check_dataset(data_dir, dataset, splits=("train",))
    images, labels, origin = _read_split(dataset_path(data_dir, dataset), dataset, "train")
    if holdout >= len(labels):
        raise DataError(f"--holdout {holdout}: {dataset} has {len(labels)} training samples; hold out fewer")
    return images, labels, origin


def load_test_set(data_dir, dataset, holdout=0):
    """(test images, test labels) alone: all the evaluator process reads; with `holdout`, the held-out training
    samples instead."""
    if holdout:
        return load_validation_set(data_dir, dataset, holdout)
    check_dataset(data_dir, dataset, splits=("t10k",))
    root = dataset_path(data_dir, dataset)
    images, labels, _ = _read_split(root, dataset, "t10k")
    return images, labels


def _read_split(root, dataset, split):
    """(images N x C x H x W uint8, labels int32, origin) of "train" or "t10k": Gluon's dataset class reads the
    published files (data/originals.py), this module's readers anything else; origin says which files they were
    (originals.PUBLISHED, originals.RECOMPRESSED, or None for other files)."""
    published = originals.read_split(root, dataset, train=split == "train")
    if published is not None:
        return (*published, originals.PUBLISHED)
    if dataset == "cifar10":
        names = CIFAR_TRAIN_FILES if split == "train" else CIFAR_TEST_FILES
        parts = [_read_cifar(os.path.join(root, name)) for name in names]
        return np.concatenate([x for x, _ in parts]), np.concatenate([y for _, y in parts]), None
    return _read_idx_pair(root, dataset, split)


def _idx_stem(root, split, kind):
    suffix = "images-idx3-ubyte" if kind == "images" else "labels-idx1-ubyte"
    return os.path.join(root, f"{split}-{suffix}")


def _idx_file(root, split, kind):
    stem = _idx_stem(root, split, kind)
    for path in (stem + ".gz", stem):
        if os.path.isfile(path):
            return path
    return None


def _read_idx_pair(root, dataset, split):
    images_path, labels_path = _idx_file(root, split, "images"), _idx_file(root, split, "labels")
    (images, images_raw), (labels, labels_raw) = (_read_idx(images_path, IDX_IMAGES_MAGIC),
                                                  _read_idx(labels_path, IDX_LABELS_MAGIC))
    labels = _checked_labels(labels_path, labels)
    if len(images) != len(labels):
        raise DataError(f"{images_path} holds {len(images)} images but {labels_path} holds {len(labels)} labels")
    same = all(originals.same_contents(dataset, path, raw)
               for path, raw in ((images_path, images_raw), (labels_path, labels_raw)))
    return images[:, None, :, :], labels.astype(np.int32), originals.RECOMPRESSED if same else None


def _checked_labels(path, labels):
    if labels.size and labels.max() >= NUM_CLASSES:
        raise DataError(f"{path}: label {labels.max()} found, labels must be 0-{NUM_CLASSES - 1}")
    return labels


def _read_idx(path, magic):
    """(the array, the file's uncompressed bytes)."""
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError) as err:
        raise DataError(f"{path}: cannot read ({err})")
    ndim = 3 if magic == IDX_IMAGES_MAGIC else 1
    header = 4 * (1 + ndim)
    if len(raw) < header:
        raise DataError(f"{path}: not an idx file (only {len(raw)} bytes, shorter than its header)")
    found = struct.unpack(">i", raw[:4])[0]
    if found != magic:
        raise DataError(f"{path}: not an idx file (magic number {found}, expected {magic})")
    shape = struct.unpack(f">{ndim}i", raw[4:header])
    if min(shape) < 0:
        raise DataError(f"{path}: negative size {shape} in its header")
    expected = int(np.prod(shape))
    if len(raw) - header != expected:
        raise DataError(f"{path}: truncated or padded: header says {expected} bytes of data, "
                        f"file has {len(raw) - header}")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(shape), raw


def _read_cifar(path):
    try:
        raw = np.fromfile(path, dtype=np.uint8)
    except OSError as err:
        raise DataError(f"{path}: cannot read ({err})")
    if raw.size == 0 or raw.size % CIFAR_RECORD:
        raise DataError(f"{path}: truncated or not a CIFAR-10 binary batch (size {raw.size} is not a multiple of "
                        f"{CIFAR_RECORD} bytes)")
    records = raw.reshape(-1, CIFAR_RECORD)
    labels = _checked_labels(path, records[:, 0])
    return records[:, 1:].reshape(-1, 3, CIFAR_SIDE, CIFAR_SIDE), labels.astype(np.int32)


def partition(labels, index, num_workers, by_class=False, seed=0):
    """Indices of the training samples that belong to the worker at position `index` of the job.

    i.i.d.: a seeded uniform shuffle cut into equal shares. By class: samples sorted by label and cut into
    contiguous shares, so each worker sees a block of classes (the paper's non-i.i.d. setting).
    """
    if by_class:
        order = np.argsort(labels, kind="stable")
    else:
        order = np.random.RandomState(seed).permutation(len(labels))
    return np.array_split(order, num_workers)[index]


class BatchStream:
    """Endless shuffled batches of one worker's share; a new seeded permutation every epoch."""

    def __init__(self, images, labels, batch_size, seed=0):
        if len(images) < batch_size:
            raise DataError(f"a worker's share has {len(images)} samples, fewer than the batch size {batch_size}")
        self.images = images
        self.labels = labels
        self.batch_size = batch_size
        self.rng = np.random.RandomState(seed)
        self.epoch = 0
        self._order = self.rng.permutation(len(images))
        self._pos = 0

    @property
    def passes(self):
        """Passes over the share so far; a pass ends with its last full batch."""
        per_pass = len(self._order) // self.batch_size * self.batch_size
        return self.epoch + min(1.0, self._pos / per_pass)

    def next(self, batch_size=None):
        """The next batch, of `batch_size` samples (default: the stream's batch size; at most the share)."""
        size = batch_size or self.batch_size
        if self._pos + size > len(self._order):
            self.epoch += 1
            self._order = self.rng.permutation(len(self.images))
            self._pos = 0
        idx = self._order[self._pos:self._pos + size]
        self._pos += size
        return self.images[idx], self.labels[idx]


def to_float(images):
    """uint8 images to float32 in [0, 1]."""
    return images.astype(np.float32) / 255.0


def normalisation(dataset):
    """(per-channel mean, per-channel std) the dataset's images in [0, 1] are normalised by, or None."""
    return (CIFAR10_MEAN, CIFAR10_STD) if dataset == "cifar10" else None


def random_crop_and_flip(images, rng, padding=CROP_PADDING):
    """Each image of an (N, C, H, W) uint8 batch: a random HxW crop of it padded by `padding` zeros on each side,
    flipped left-right with probability 1/2. A new array; the batch is left as it was."""
    n, _, height, width = images.shape
    padded = np.pad(images, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    top = rng.randint(0, 2 * padding + 1, size=n)
    left = rng.randint(0, 2 * padding + 1, size=n)
    out = np.empty_like(images)
    for i in range(n):
        out[i] = padded[i, :, top[i]:top[i] + height, left[i]:left[i] + width]
    flip = rng.rand(n) < 0.5
    out[flip] = out[flip, :, :, ::-1]
    return out


class AugmentedStream:
    """The batches of `self.stream` changed image by image: as many passes over the data, batches of the same size."""

    @property
    def passes(self):
        return self.stream.passes

    @property
    def batch_size(self):
        return self.stream.batch_size


class Augmented(AugmentedStream):
    """The training batches of a stream, randomly cropped and flipped (--augment crop); test images never are."""

    def __init__(self, stream, seed=0):
        self.stream = stream
        self.rng = np.random.RandomState(seed + 104729)

    def next(self, batch_size=None):
        images, labels = self.stream.next(batch_size)
        return random_crop_and_flip(images, self.rng), labels


class ResizedCropped(AugmentedStream):
    """d2l's CIFAR-10 augmentation of the training batches (--augment resized-crop), with Gluon's transforms applied
    image by image: resized to 1.25 x its side, a random square of 64-100 % of that area resized back to the side,
    flipped left-right with probability 1/2. Gluon's crop draws from Python's `random`, its flip from MXNet's
    generator: both are seeded here."""

    def __init__(self, stream, seed=0):
        import random

        import mxnet as mx
        from mxnet.gluon.data.vision import transforms

        self.stream = stream
        self.mx = mx
        side = stream.images.shape[-1]
        self.transform = transforms.Compose([
            transforms.Resize(round(side * RESIZED_CROP_ZOOM)),
            transforms.RandomResizedCrop(side, scale=RESIZED_CROP_AREA, ratio=(1.0, 1.0)),
            transforms.RandomFlipLeftRight()])
        random.seed(seed + 104729)
        mx.random.seed(seed + 104729)

    def next(self, batch_size=None):
        images, labels = self.stream.next(batch_size)
        hwc = self.mx.nd.array(images.transpose(0, 2, 3, 1), dtype=np.uint8)
        out = self.mx.nd.stack(*[self.transform(image) for image in hwc])
        return out.asnumpy().transpose(0, 3, 1, 2), labels


def augmented(stream, kind, seed=0):
    """The stream of training batches augmented as --augment `kind` says ("crop" or "resized-crop")."""
    return {"crop": Augmented, "resized-crop": ResizedCropped}[kind](stream, seed)


class Prefetched:
    """Makes the next batch of a stream in a background thread while the current step runs, so that it is ready when
    the step ends. `passes` counts the batches handed out, not the one in the making."""

    def __init__(self, stream):
        self.stream = stream
        self.ready = queue.Queue(maxsize=1)
        self._passes = stream.passes
        threading.Thread(target=self._fill, name="prefetch", daemon=True).start()

    def _fill(self):
        while True:
            try:
                item = (self.stream.next(), self.stream.passes)
            except Exception as err:  # handed to the training thread, which would otherwise wait forever
                self.ready.put((err, None))
                return
            self.ready.put(item)

    def next(self, batch_size=None):
        """The batch made in the background (of the stream's one size: `batch_size` must be it)."""
        if batch_size is not None and batch_size != self.stream.batch_size:
            raise ValueError(f"prefetched batches have {self.stream.batch_size} samples, not {batch_size}")
        batch, passes = self.ready.get()
        if isinstance(batch, Exception):
            raise batch
        self._passes = passes
        return batch

    @property
    def passes(self):
        return self._passes
