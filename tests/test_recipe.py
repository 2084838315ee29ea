"""CIFAR-10 trained the way its papers train it: augmentation of the training batches only, per-channel
normalisation of both splits, weight decay and the learning-rate schedule as their formulas say."""
import json
import math
import os

import mxnet as mx
import numpy as np
import pytest

from data import (CIFAR10_MEAN, CIFAR10_STD, Augmented, BatchStream, Prefetched, ResizedCropped, augmented,
                  random_crop_and_flip)
from tests.jobs import iter_records, run_main
from tests.test_datasets import write_cifar_batch
from training import config
from training.model import Model
from training.schedule import Schedule
from training.schemes.local import Local


def cifar_images(n, seed=0):
    return np.random.RandomState(seed).randint(0, 256, size=(n, 3, 32, 32)).astype(np.uint8)


def test_crops_and_flips_keep_shape_dtype_and_take_every_pixel_from_the_image_or_the_padding():
    images = cifar_images(64)

    out = random_crop_and_flip(images, np.random.RandomState(1))

    assert out.shape == images.shape and out.dtype == np.uint8
    assert not np.array_equal(out, images)
    for image, crop in zip(images, out):
        padded = np.pad(image, ((0, 0), (4, 4), (4, 4)))
        found = [(top, left, flip) for top in range(9) for left in range(9) for flip in (False, True)
                 if np.array_equal((crop[:, :, ::-1] if flip else crop), padded[:, top:top + 32, left:left + 32])]
        assert found, "a crop that is no window of the padded image"


def test_without_padding_an_image_is_kept_or_mirrored_about_half_the_time():
    images = cifar_images(400)

    out = random_crop_and_flip(images, np.random.RandomState(2), padding=0)

    mirrored = [np.array_equal(o, i[:, :, ::-1]) for o, i in zip(out, images)]
    kept = [np.array_equal(o, i) for o, i in zip(out, images)]
    assert all(m or k for m, k in zip(mirrored, kept))
    assert 150 < sum(mirrored) < 250


def test_the_prefetched_augmented_stream_hands_out_the_same_batches_and_counts_passes_as_it_goes():
    images, labels = cifar_images(40), np.arange(40) % 10
    plain = Augmented(BatchStream(images, labels, 8, seed=3), seed=5)
    ahead = Prefetched(Augmented(BatchStream(images, labels, 8, seed=3), seed=5))

    for step in range(1, 11):
        (a, la), (b, lb) = plain.next(), ahead.next()
        assert np.array_equal(a, b) and np.array_equal(la, lb)
        assert ahead.passes == plain.passes == pytest.approx(step / 5 if step % 5 else step / 5)


def test_d2ls_resized_crops_keep_shape_and_dtype_draw_every_pixel_from_the_image_and_repeat_with_the_seed():
    images, labels = cifar_images(32), np.arange(32) % 10
    plain = np.repeat(np.arange(32, dtype=np.uint8)[:, None, None, None] * 7, 3, axis=1).repeat(32, 2).repeat(32, 3)

    first = augmented(BatchStream(images, labels, 16, seed=3), "resized-crop", seed=5).next()[0]
    again = ResizedCropped(BatchStream(images, labels, 16, seed=3), seed=5).next()[0]
    constant = ResizedCropped(BatchStream(plain, labels, 32, seed=3), seed=5).next()[0]

    assert first.shape == (16, 3, 32, 32) and first.dtype == np.uint8
    assert np.array_equal(first, again)
    order = BatchStream(images, labels, 16, seed=3).next()[0]
    assert not np.array_equal(first, order)
    # A crop resized and flipped holds only the image's own values: a one-valued image stays that value.
    assert all(len(np.unique(image)) == 1 for image in constant)
    assert sorted(np.unique(image)[0] for image in constant) == sorted(plain[:, 0, 0, 0])


def test_a_failing_stream_raises_in_the_training_thread_instead_of_leaving_it_waiting():
    class Broken:
        passes = 0.0

        def next(self):
            raise ValueError("damaged batch")

    with pytest.raises(ValueError, match="damaged batch"):
        Prefetched(Broken()).next()


def test_cifar10_images_are_normalised_per_channel_for_training_and_evaluation():
    model = Model("lenet", [mx.cpu()], (3, 32, 32), normalise=(CIFAR10_MEAN, CIFAR10_STD))
    images = cifar_images(2)

    x = model._prepare(images, mx.cpu()).asnumpy()

    expected = (images / 255.0 - np.array(CIFAR10_MEAN)[:, None, None]) / np.array(CIFAR10_STD)[:, None, None]
    np.testing.assert_allclose(x, expected, rtol=1e-5, atol=1e-5)


def test_the_cifar10_recipe_fills_what_the_command_line_leaves_out():
    recipe = config.parse_args(["--dataset", "cifar10", "-b", "32"])
    given = config.parse_args(["--dataset", "cifar10", "--wd", "0", "--momentum", "0", "--augment", "none",
                               "--lr-schedule", "constant"])
    mnist = config.parse_args(["--dataset", "mnist-5k"])

    assert (recipe.augment, recipe.momentum, recipe.lr_schedule, recipe.lr_steps) == ("crop", 0.9, "step", (100.0, 150.0))
    assert recipe.wd == pytest.approx(5e-4 * 32)  # lr x wd per step equals the mean loss's 5e-4 at lr x 32
    assert (given.augment, given.momentum, given.wd, given.lr_schedule) == ("none", 0.0, 0.0, "constant")
    assert (mnist.augment, mnist.momentum, mnist.wd, mnist.lr_schedule) == ("none", 0.0, 0.0, "constant")


@pytest.mark.parametrize("argv, message", [
    (["--lr-schedule", "step"], "--lr-schedule step needs --lr-steps"),
    (["--lr-schedule", "cosine"], "give --epochs"),
    (["--lr-steps", "150,100"], "expected increasing positive epochs"),
])
def test_an_incomplete_schedule_is_one_line_and_exit_2(argv, message):
    result = run_main(["--dataset", "mnist-5k", *argv])

    assert result.returncode == 2 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_the_schedules_factor_follows_its_formula():
    step = Schedule("step", (100.0, 150.0), 0.1)
    cosine = Schedule("cosine", epochs=200.0)

    assert [step.factor_at(e) for e in (0, 99.9, 100, 149, 150, 400)] == pytest.approx([1, 1, 0.1, 0.1, 0.01, 0.01])
    assert [cosine.factor_at(e) for e in (0, 50, 100, 200, 300)] == pytest.approx(
        [1, (1 + math.cos(math.pi / 4)) / 2, 0.5, 0, 0])
    assert Schedule().factor_at(1e6) == 1 and Schedule().server_scheduler(0.1, 10) is None


def test_mxnets_optimizer_on_a_server_follows_the_schedule_by_its_count_of_updates():
    # 40 updates make an epoch: 40 training samples over batches of one worker's step.
    sgd = mx.optimizer.SGD(learning_rate=0.2, lr_scheduler=Schedule("step", (1.0, 2.0), 0.5).server_scheduler(0.2, 40))
    weight, grad = mx.nd.zeros((1,)), mx.nd.ones((1,))
    rates = []
    for _ in range(100):
        before = weight.asscalar()
        sgd.update(0, weight, grad, None)
        rates.append(before - weight.asscalar())

    # the 40th update ends the first epoch at its rate; the 41st starts the second, as a worker's own steps do
    assert rates == pytest.approx([0.2] * 40 + [0.1] * 40 + [0.05] * 20, rel=1e-4)


def local_scheme(*argv):
    args = config.parse_args(["-m", "local", "-n", "mlp", "--dataset", "mnist-5k", "-l", "0.1", *argv])
    model = Model("mlp", [mx.cpu()], (1, 28, 28))
    scheme = Local(Local.Options.from_args(args), model, None)
    scheme.setup()
    return scheme


def one_update(scheme, factor=1.0):
    """(weight before, gradient, weight after) of the first trainable array after one local step."""
    scheme.model.forward_backward(np.zeros((2, 1, 28, 28), np.uint8), np.array([0, 1]))  # fresh gradients
    p = scheme.model.trainable[0]
    p.data()[:] = 1.0
    p.grad()[:] = 2.0
    scheme.scale_learning_rates(factor)
    scheme.local_step()
    return p.data().asnumpy()


def test_weight_decay_adds_lr_times_wd_times_the_weight_to_each_step():
    assert one_update(local_scheme()) == pytest.approx(1 - 0.1 * 2)
    assert one_update(local_scheme("--wd", "0.5")) == pytest.approx(1 - 0.1 * (2 + 0.5 * 1))


def test_the_schedules_factor_scales_the_local_learning_rate():
    scheme = local_scheme("--lr-schedule", "step", "--lr-steps", "1")

    assert one_update(scheme, factor=0.1) == pytest.approx(1 - 0.01 * 2)
    assert one_update(scheme, factor=1.0) == pytest.approx(1 - 0.1 * 2)  # set each round, not compounded


@pytest.mark.slow
def test_a_cifar10_job_trains_with_its_recipe_and_the_schedule_lowers_the_rate_per_epoch(tmp_path):
    folder = tmp_path / "cifar-10-batches-bin"
    os.makedirs(folder)
    for i in range(1, 6):
        write_cifar_batch(folder / f"data_batch_{i}.bin", np.arange(32) % 10)
    write_cifar_batch(folder / "test_batch.bin", np.arange(20) % 10)
    # 160 images, batches of 16: 10 steps an epoch; the rate falls x0.1 after epoch 1 and again after epoch 2.
    result = run_main(["-m", "local", "-n", "lenet", "--dataset", "cifar10", "-dd", str(tmp_path), "-b", "16",
                       "--augment", "resized-crop", "--lr-steps", "1,2", "--max-iters", "25", "-e", "0", "-ld", str(tmp_path / "logs"),
                       "--node-name", "node", "--eval-batch-size", "7"], timeout=120)

    assert result.returncode == 0, result.stderr[-2000:]
    (device,) = os.listdir(tmp_path / "logs" / "node")
    path = tmp_path / "logs" / "node" / device
    resolved = json.load(open(path / "meta.json"))["config"]
    assert (resolved["augment"], resolved["momentum"], resolved["lr_schedule"]) == ("resized-crop", 0.9, "step")
    assert resolved["wd"] == pytest.approx(5e-4 * 16) and resolved["eval_batch_size"] == 7
    records = iter_records(str(path))
    assert len(records) == 25 and 0 <= records[-1]["accuracy"] <= 1
    assert [r["lr_factor"] for r in records] == pytest.approx([1.0] * 10 + [0.1] * 10 + [0.01] * 5)


def test_the_docs_cifar10_commands_parse_down_to_every_workers_command_line():
    import shlex

    from launcher import commands, experiment
    from launcher.cluster import ROOT

    text = open(os.path.join(ROOT, "docs", "data.md")).read()
    block = text[text.index("the seeds' setups"):text.index("`vgg11` and `vgg16` (without")]
    lines = [shlex.split(line.strip())[1:] for line in block.splitlines() if line.strip().startswith("python ")]

    parsed = []
    for script, *argv in lines:
        if script == "main.py":
            parsed.append(config.parse_args(argv))
            continue
        described = experiment.parse(argv)
        parsed += [config.parse_args(command[1:]) for mode in described.modes
                   for command in commands.workers_argv(described, mode, "logs", ("127.0.0.1", 1))]
    assert len(lines) == 4 and {args.dataset for args in parsed} == {"cifar10"}
    assert {args.augment for args in parsed} == {"crop", "resized-crop"}


def test_ps_pytorchs_spellings_of_its_flags_are_accepted():
    args = config.parse_args("--lr 0.01 --momentum 0.5 --batch-size 128 --test-batch-size 500 --epochs 100 "
                             "--max-steps 10000 --eval-freq 50 --seed 1 --dataset cifar10".split())

    assert (args.learning_rate, args.momentum, args.batch_size, args.eval_batch_size) == (0.01, 0.5, 128, 500)
    assert (args.epochs, args.max_iters, args.eval_duration, args.seed) == (100, 10000, 50, 1)
