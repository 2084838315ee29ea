"""How much can a cluster buy? The gradient noise scale of a network on a data set, measured as SSGD on n equal
devices trains it (McCandlish et al. 2018, "An empirical model of large-batch training", appendix A).

    python launch.py noise-scale -n lenet --dataset mnist-5k --devices 4 --steps 300 --out <folder>

Each step, the n devices' batches of b samples give two estimates of the squared norm of the mean gradient: one
device's, |G_b|^2 (averaged over the n devices), and their sum's, |G_nb|^2. A batch of B samples has
E|G_B|^2 = |G|^2 + tr(S) / B, so

    |G|^2 ~ (n b |G_nb|^2 - b |G_b|^2) / (n b - b)        tr(S) ~ (|G_b|^2 - |G_nb|^2) / (1 / b - 1 / (n b))

are unbiased; each is smoothed over the steps (an exponential moving average, --smoothing), and the simple noise
scale is B_simple = tr(S) / |G|^2. From S = S_min (1 + B_simple / B), the steps one device of batch b takes to a
target over those n devices take, with B_simple where training first reaches that target:

    ratio = (1 + B_simple / b) / (1 + B_simple / (n b))

the most that synchronous data parallelism over n devices can buy there, in steps (what a round costs aside).
Writes <out>/noise-scale.json (the settings, each estimate with its step and test accuracy, the ratio at each
target) and <out>/noise-scale.png (B_simple and the ratio against test accuracy). Exit 0, 2 for bad input.
"""
import argparse
import os
import shlex
import sys
import time

import numpy as np

from training.checks import OneLineErrorParser, UsageError
from training.faults.failures import EXIT_USAGE
from training.files import write_json

FILE_NAME = "noise-scale.json"
FIGURE_NAME = "noise-scale.png"


def estimates(small_sq, big_sq, small, big):
    """(|G|^2, tr(S)): the unbiased estimates from a squared norm of a mean gradient over `small` samples and one over
    `big` samples (McCandlish et al., appendix A)."""
    true_sq = (big * big_sq - small * small_sq) / (big - small)
    trace = (small_sq - big_sq) / (1.0 / small - 1.0 / big)
    return true_sq, trace


def predicted_ratio(noise_scale, batch, devices):
    """Steps of one device of `batch` over those of `devices` such devices summed, at a noise scale."""
    return (1.0 + noise_scale / batch) / (1.0 + noise_scale / (devices * batch))


class Smoothed:
    """An exponential moving average with the start-up bias taken out (as Adam's)."""

    def __init__(self, decay):
        self.decay, self.value, self.weight = decay, 0.0, 0.0

    def add(self, x):
        self.value = self.decay * self.value + (1 - self.decay) * x
        self.weight = self.decay * self.weight + (1 - self.decay)
        return self.value / self.weight


def build_parser():
    p = OneLineErrorParser(prog="launch.py noise-scale", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_network_options(p)
    p.add_argument("--devices", type=int, default=4, help="n equal devices, 2 or more (default 4)")
    p.add_argument("--steps", type=int, default=300, help="SSGD steps (default 300)")
    p.add_argument("--lr", type=float, default=0.001, help="SSGD's rate on each device's summed gradient, as "
                   "main.py's --lr (default 0.001)")
    p.add_argument("--momentum", type=float, default=0.0, help="(default 0, as SSGD's)")
    p.add_argument("--eval-every", type=int, default=20, help="steps between tests of the model (default 20)")
    p.add_argument("--targets", default="0.8,0.85", help="accuracies to give the ratio at (default 0.8,0.85)")
    p.add_argument("--smoothing", type=float, default=0.95, help="the moving averages' decay a step (default 0.95)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=os.path.join("logs", "noise-scale"), help="(default logs/noise-scale)")
    return p


def add_network_options(p):
    """What the SSGD runs of measure() train: the network, its data and each device's batch (launch.py noise-scale,
    launch.py rate-sweep)."""
    from models import NETWORKS
    from training.config import DATASETS

    p.add_argument("-n", "--network", default="lenet", choices=sorted(NETWORKS))
    p.add_argument("--dataset", default="mnist-5k", choices=DATASETS)
    p.add_argument("-dd", "--data-dir", help="(default: the first of data, /usr/share/datasets that holds it)")
    p.add_argument("-b", "--batch-size", type=int, default=64, help="each device's batch, b (default 64)")


def accuracies(text, flag="--targets"):
    """The sorted accuracies of a comma list, each in (0, 1]; UsageError (one line) for anything else."""
    try:
        found = sorted({float(part) for part in text.split(",") if part.strip()})
    except ValueError:
        found = []
    if not found or not 0 < found[0] <= found[-1] <= 1:
        raise UsageError(f"{flag} {text}: give accuracies in (0, 1], e.g. 0.8,0.85")
    return found


def parse(argv):
    ns = build_parser().parse_args(argv)
    for flag, value, least in (("--devices", ns.devices, 2), ("-b", ns.batch_size, 1), ("--steps", ns.steps, 1),
                               ("--eval-every", ns.eval_every, 1)):
        if value < least:
            raise UsageError(f"{flag} {value}: give {least} or more")
    if not (ns.lr > 0 and 0 <= ns.momentum < 1 and 0 <= ns.smoothing < 1):
        raise UsageError("--lr must be positive, --momentum and --smoothing in [0, 1)")
    ns.targets = accuracies(ns.targets)
    from launcher.experiment import data_dir

    ns.data_dir = data_dir(ns)
    return ns


def squared_norm(grads):
    return float(sum((g.astype("float64") ** 2).sum().asscalar() for g in grads))


def measure(ns, progress=print, estimate=True, stop_at=None):
    """{settings, points: [{step, accuracy, b_simple, true_sq, trace}], ratios: {target: ...}} of an SSGD run.
    Without `estimate` (or on one device) no noise is estimated; with `stop_at` the run ends at the first test that
    reaches that accuracy, and at the first whose weights are no longer finite (diverged: its last point says so)."""
    import mxnet as mx
    from mxnet import gluon

    from data import load_dataset, normalisation
    from training.model import Model

    data = load_dataset(ns.data_dir, ns.dataset)
    model = Model(ns.network, [mx.cpu()], data.train_images.shape[1:], seed=ns.seed,
                  normalise=normalisation(ns.dataset))
    trainer = gluon.Trainer(model.trainable, "sgd", {"learning_rate": ns.lr, "momentum": ns.momentum})
    rng = np.random.RandomState(ns.seed)
    b, n = ns.batch_size, ns.devices
    estimate = estimate and n > 1  # one device's batch is the only one: no second size to set it against
    true_avg, trace_avg = Smoothed(ns.smoothing), Smoothed(ns.smoothing)
    smoothed_true = smoothed_trace = None
    points, started = [], time.perf_counter()
    for step in range(1, ns.steps + 1):
        chosen = rng.choice(len(data.train_labels), n * b, replace=False)
        total, small_sq = None, 0.0
        for device in range(n):
            part = chosen[device * b:(device + 1) * b]
            model.forward_backward(data.train_images[part], data.train_labels[part])
            grads = [p.grad() for p in model.trainable]  # the device's summed gradient
            if estimate:
                small_sq += squared_norm([g / b for g in grads]) / n
            total = [g.copy() for g in grads] if total is None else [t + g for t, g in zip(total, grads)]
        if estimate:
            true_sq, trace = estimates(small_sq, squared_norm([t / (n * b) for t in total]), b, n * b)
            smoothed_true, smoothed_trace = true_avg.add(true_sq), trace_avg.add(trace)
        for p, t in zip(model.trainable, total):
            t.copyto(p.grad())
        trainer.step(n)  # the mean of the devices' summed gradients, as SSGD steps
        if step % ns.eval_every == 0 or step == ns.steps:
            accuracy = model.accuracy(data.test_images, data.test_labels)
            b_simple = smoothed_trace / smoothed_true if estimate and smoothed_true > 0 else None
            points.append({"step": step, "accuracy": accuracy, "b_simple": b_simple, "true_sq": smoothed_true,
                           "trace": smoothed_trace})
            shown = "–" if b_simple is None else f"{b_simple:.0f}"
            progress(f"[noise-scale] step {step}/{ns.steps}  test accuracy {accuracy:.4f}  B_simple {shown}  "
                     f"({time.perf_counter() - started:.0f} s)")
            if not np.isfinite(squared_norm([p.data() for p in model.trainable])):
                points[-1]["diverged"] = True
                break
            if stop_at is not None and accuracy >= stop_at:
                break
    return {"network": ns.network, "dataset": ns.dataset, "batch_size": b, "devices": n, "steps": ns.steps,
            "lr": ns.lr, "momentum": ns.momentum, "smoothing": ns.smoothing, "seed": ns.seed, "points": points,
            "ratios": ratios(points, ns.targets, b, n)}


def ratios(points, targets, batch, devices):
    """{target: {step, b_simple, ratio}} where training first reached each target (None where it never did)."""
    found = {}
    for target in targets:
        reached = next((p for p in points if p["accuracy"] >= target and p["b_simple"] is not None), None)
        found[f"{target:g}"] = None if reached is None else {
            "step": reached["step"], "b_simple": reached["b_simple"],
            "ratio": predicted_ratio(max(reached["b_simple"], 0.0), batch, devices)}
    return found


def draw(result, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [p for p in result["points"] if p["b_simple"] is not None]
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    accuracy = [p["accuracy"] for p in shown]
    ax.plot(accuracy, [p["b_simple"] for p in shown], "o-", markersize=3, label="B_simple")
    ax.set_xlabel("test accuracy")
    ax.set_ylabel("B_simple (samples)")
    twin = ax.twinx()
    twin.plot(accuracy, [predicted_ratio(max(p["b_simple"], 0.0), result["batch_size"], result["devices"])
                         for p in shown], "s--", color="tab:orange", markersize=3)
    twin.set_ylabel(f"steps of 1 device / of {result['devices']} (the most SSGD can buy)", color="tab:orange")
    ax.set_title(f"{result['network']} on {result['dataset']}: b = {result['batch_size']}, "
                 f"n = {result['devices']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def run(argv):
    try:
        ns = parse(argv)
    except UsageError as error:
        print(f"launch.py noise-scale: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    result = {"command": f"python launch.py noise-scale {shlex.join(argv)}".rstrip(),
              **measure(ns, progress=lambda line: print(line, flush=True))}
    os.makedirs(ns.out, exist_ok=True)
    write_json(os.path.join(ns.out, FILE_NAME), result, indent=1)
    draw(result, os.path.join(ns.out, FIGURE_NAME))
    for target, found in result["ratios"].items():
        said = "not reached" if found is None else (
            f"B_simple {found['b_simple']:.0f} at step {found['step']}: {result['devices']} devices at most "
            f"{found['ratio']:.2f}x fewer steps")
        print(f"[noise-scale] to {target}: {said}")
    print(f"[noise-scale] wrote {os.path.join(ns.out, FILE_NAME)} and {FIGURE_NAME}")
    return 0


# ----------------------------------------------------------------------------------------------
# Against the map: the ratio predicted beside the one measured (docs/scaling.md, launch.py docs)

FAST = "1"  # a fast device's factor in a map's profile
MAPS_FAST_DEVICES = (4, 12, 48)  # the fast devices of the maps' clusters of 6, 16 and 64


def block(folder, *maps):
    """The noise scale `folder` measured at each target, the ratio it predicts for SSGD on the fast devices of each
    map's cell on free links against one device, and the ratio of their median steps the map measured; without maps,
    the prediction for the maps' fast devices (MAPS_FAST_DEVICES)."""
    from analysis import regime_map
    from analysis.tables import markdown_table
    from training.files import read_json

    measured = read_json(os.path.join(folder, FILE_NAME))
    rows = [row(measured, fast, target, {}, "any") for fast in MAPS_FAST_DEVICES
            for target in map(float, measured["ratios"])] if not maps else []  # no map of this network: the prediction
    for path in maps:
        result = read_json(os.path.join(path, regime_map.RESULTS_FILE))
        for cell in result["cells"]:
            if cell["link"] != regime_map.LOOPBACK or "fast-only" not in cell["schemes"]:
                continue
            fast = cell["profile"].split(",").count(FAST)
            for target in regime_map.targets_of(result):
                timed = cell if target == result["target"] else cell["at_higher_targets"][f"{target:g}"]
                rows.append(row(measured, fast, target, timed["schemes"], regime_map.compact(cell["profile"])))
    return (markdown_table(["devices (fast: SSGD's)", "target", "B_simple there (step)", "predicted",
                            "measured: one device's median steps / SSGD's", "measured / predicted"], rows)
            + f"\nThe noise scale: `{measured.get('command') or 'launch.py noise-scale'}`\n")


def row(measured, fast, target, schemes, profile):
    found = ratios(measured["points"], [target], measured["batch_size"], measured["devices"])[f"{target:g}"]
    predicted = None if found is None else predicted_ratio(max(found["b_simple"], 0.0), measured["batch_size"], fast)
    steps = [median_steps(schemes.get(name)) for name in ("local", "fast-only")]
    ratio = steps[0] / steps[1] if None not in steps else None
    return [f"{profile} ({fast})", f"{target:g}",
            "not reached" if found is None else f"{found['b_simple']:.0f} ({found['step']})",
            "–" if predicted is None else f"{predicted:.2f}",
            "–" if ratio is None else f"{ratio:.2f} ({steps[0]:.0f} / {steps[1]:.0f})",
            "–" if None in (ratio, predicted) else f"{ratio / predicted:.2f}"]


def median_steps(numbers):
    """The median steps (rounds) to the target of a scheme's repeats that reached it; None where none did."""
    values = sorted(v for v in ((numbers or {}).get("rounds_to_target") or {}).get("values", []) if v is not None)
    return float(np.median(values)) if values else None


def ceiling(folder, result, cell, target):
    """The most SSGD on the fast devices of a cell of the map in results/<folder> can buy at `target`, by the noise
    scale committed for its network and data set (results/noise-scale-<network>-<dataset>/), at that file's batch
    per device; None without one, or where its run never reached the target."""
    from training.files import read_json

    results = os.path.dirname(os.path.abspath(folder))
    path = os.path.join(results, f"noise-scale-{result['network']}-{result['dataset']}", FILE_NAME)
    if not os.path.isfile(path):
        return None
    measured = read_json(path)
    fast = cell["profile"].split(",").count(FAST)
    found = ratios(measured["points"], [target], measured["batch_size"], measured["devices"])[f"{target:g}"]
    return None if found is None or fast < 1 else predicted_ratio(max(found["b_simple"], 0.0),
                                                                  measured["batch_size"], fast)
