"""`launch.py rate-sweep`: the steps SSGD on n equal devices takes to each target against its rate, for several n,
so that each batch size is timed at its own best rate (Shallue et al. 2018, "Measuring the effects of data
parallelism", re-tune the rate per batch size; without it a larger batch looks worse than it is).

    python launch.py rate-sweep -n lenet --dataset mnist-5k --devices 1,4 --rates 0.001,0.004 --out <folder>

Each run is the noise scale's SSGD (launcher/studies/noise_scale.py, measure) without its estimates, stopped at the
first test that reaches the highest target or finds the weights no longer finite. Per device count and target, the
best rate is the one whose median steps over the seeds is least (a seed that missed counts as never); a best rate at
the edge of the grid is marked, since a rate beyond it may do better. The measured ratio at a target is one device's
steps at its best rate over n devices' at theirs: what the noise scale's prediction (1 + B/b) / (1 + B/(n b)) stands
for. Writes <out>/rate-sweep.json after every run (the same command again runs only the runs it lacks). Exit 0, 2
for bad input.
"""
import argparse
import copy
import os
import shlex
import statistics
import sys

from launcher.cluster import ROOT
from launcher.studies import noise_scale
from training.checks import OneLineErrorParser, UsageError
from training.faults.failures import EXIT_USAGE
from training.files import read_json, write_json

FILE_NAME = "rate-sweep.json"


def build_parser():
    p = OneLineErrorParser(prog="launch.py rate-sweep", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    noise_scale.add_network_options(p)
    p.add_argument("--devices", default="1,4", help="the device counts n, 1 first (default 1,4)")
    p.add_argument("--rates", default="0.001,0.002,0.004,0.008",
                   help="SSGD's rates on each device's summed gradient, a grid (default 0.001,0.002,0.004,0.008)")
    p.add_argument("--steps", type=int, default=2000, help="each run's most SSGD steps (default 2000)")
    p.add_argument("--eval-every", type=int, default=25, help="steps between tests of the model (default 25)")
    p.add_argument("--targets", default="0.8,0.85", help="accuracies (default 0.8,0.85)")
    p.add_argument("--seeds", default="0", help="each run's seeds (default 0)")
    p.add_argument("--noise-scale", help="a noise-scale.json whose prediction the table sets beside each ratio")
    p.add_argument("--out", default=os.path.join("logs", "rate-sweep"), help="(default logs/rate-sweep)")
    return p


def numbers(flag, text, kind, least):
    try:
        found = [kind(part) for part in text.split(",") if part.strip()]
    except ValueError:
        found = []
    if not found or min(found) < least:
        raise UsageError(f"{flag} {text}: give a comma list of numbers, each {least:g} or more")
    return found


def parse(argv):
    ns = build_parser().parse_args(argv)
    ns.devices = sorted(set(numbers("--devices", ns.devices, int, 1)))
    if ns.devices[0] != 1 or len(ns.devices) < 2:
        raise UsageError(f"--devices {','.join(map(str, ns.devices))}: give 1 (the ratios' base) and more")
    ns.rates = sorted(set(numbers("--rates", ns.rates, float, 1e-12)))
    ns.targets = noise_scale.accuracies(ns.targets)
    ns.seeds = sorted(set(numbers("--seeds", ns.seeds, int, 0)))
    for flag, value in (("-b", ns.batch_size), ("--steps", ns.steps), ("--eval-every", ns.eval_every)):
        if value < 1:
            raise UsageError(f"{flag} {value}: give 1 or more")
    if ns.noise_scale and not os.path.isfile(ns.noise_scale):
        raise UsageError(f"--noise-scale {ns.noise_scale}: no such file")
    from launcher.experiment import data_dir

    ns.data_dir = data_dir(ns)
    return ns


def run_key(devices, rate, seed):
    return f"{devices}|{rate:g}|{seed}"


def one_run(ns, devices, rate, seed):
    """{steps: {target: the first tested step that reached it, or None}, diverged, best} of one SSGD run."""
    settings = copy.copy(ns)
    settings.devices, settings.lr, settings.seed, settings.momentum, settings.smoothing = devices, rate, seed, 0.0, 0.0
    shown = f"[rate-sweep] {devices} device(s), rate {rate:g}, seed {seed}"
    points = noise_scale.measure(settings, progress=lambda line: None, estimate=False,
                                 stop_at=max(ns.targets))["points"]
    steps = {f"{t:g}": next((p["step"] for p in points if p["accuracy"] >= t), None) for t in ns.targets}
    print(f"{shown}: " + ", ".join(f"{t} at step {s}" if s else f"{t} missed" for t, s in steps.items())
          + (" (diverged)" if points[-1].get("diverged") else ""), flush=True)
    return {"steps": steps, "diverged": bool(points[-1].get("diverged")),
            "best": max(p["accuracy"] for p in points)}


def best_rates(result):
    """{devices: {target: {rate, steps, at_edge}}}: per device count and target, the rate of least median steps."""
    rates, found = result["rates"], {}
    for devices in result["devices"]:
        found[str(devices)] = {}
        for target in result["targets"]:
            medians = {rate: median_steps(result, devices, rate, target) for rate in rates}
            reached = {rate: steps for rate, steps in medians.items() if steps is not None}
            if not reached:
                found[str(devices)][f"{target:g}"] = None
                continue
            rate = min(reached, key=lambda r: (reached[r], r))
            found[str(devices)][f"{target:g}"] = {"rate": rate, "steps": reached[rate],
                                                   "at_edge": len(rates) > 1 and rate in (rates[0], rates[-1])}
    return found


def median_steps(result, devices, rate, target):
    """The median steps to `target` over the seeds; None where half or more of them missed it."""
    steps = [result["runs"].get(run_key(devices, rate, seed), {}).get("steps", {}).get(f"{target:g}")
             for seed in result["seeds"]]
    steps = [float("inf") if s is None else s for s in steps]
    median = statistics.median(steps)
    return None if median == float("inf") else median


def run(argv):
    try:
        ns = parse(argv)
    except UsageError as error:
        print(f"launch.py rate-sweep: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    path = os.path.join(ns.out, FILE_NAME)
    settings = {"network": ns.network, "dataset": ns.dataset, "batch_size": ns.batch_size, "devices": ns.devices,
                "rates": ns.rates, "targets": ns.targets, "seeds": ns.seeds, "steps": ns.steps,
                "eval_every": ns.eval_every}
    earlier = read_json(path) if os.path.isfile(path) else {}
    runs = earlier.get("runs", {}) if all(earlier.get(k) == v for k, v in settings.items()) else {}
    result = {"command": f"python launch.py rate-sweep {shlex.join(argv)}", **settings,
              "noise_scale": ns.noise_scale, "runs": runs}
    os.makedirs(ns.out, exist_ok=True)
    for devices in ns.devices:
        for rate in ns.rates:
            for seed in ns.seeds:
                key = run_key(devices, rate, seed)
                if key not in runs:
                    runs[key] = one_run(ns, devices, rate, seed)
                    write_json(path, {**result, "best": best_rates(result)}, indent=1)
    write_json(path, {**result, "best": best_rates(result)}, indent=1)
    print(table(result))
    print(f"[rate-sweep] wrote {path}")
    return 0


def table(result):
    """Per device count and target: the best rate, its median steps, the ratio to one device's and, with a noise
    scale, its prediction."""
    from analysis.tables import markdown_table

    best = best_rates(result)
    noise = read_json(os.path.join(ROOT, result["noise_scale"])) if result.get("noise_scale") else None
    rows = []
    for devices in result["devices"][1:]:
        for target in result["targets"]:
            mine, one = best[str(devices)][f"{target:g}"], best["1"][f"{target:g}"]
            ratio = one["steps"] / mine["steps"] if mine and one else None
            predicted = None
            if noise:
                found = noise_scale.ratios(noise["points"], [target], noise["batch_size"], noise["devices"])
                found = found[f"{target:g}"]
                predicted = found and noise_scale.predicted_ratio(max(found["b_simple"], 0.0), result["batch_size"],
                                                                  devices)
            rows.append([f"{devices}", f"{target:g}", rate_text(one), rate_text(mine),
                         "–" if ratio is None else f"{ratio:.2f}", "–" if not predicted else f"{predicted:.2f}",
                         "–" if not (ratio and predicted) else f"{ratio / predicted:.2f}"])
    seeds = ", ".join(map(str, result["seeds"]))
    return (markdown_table(["devices", "target", "one device: best rate (median steps)",
                            "n devices: best rate (median steps)", "ratio of steps", "predicted",
                            "measured / predicted"], rows)
            + f"\nRates tried: {', '.join(f'{r:g}' for r in result['rates'])}; seeds {seeds}; a rate at the grid's "
              f"edge is marked (edge)."
              + (f" `{result['command']}`" if result.get("command") else "") + "\n")


def rate_text(found):
    if not found:
        return "missed"
    return f"{found['rate']:g}{' (edge)' if found['at_edge'] else ''} ({found['steps']:.0f})"


def block(folder):
    """docs' generated table of results/<folder>/rate-sweep.json; where it has not run, how to run it."""
    path = os.path.join(folder, FILE_NAME)
    if not os.path.isfile(path):
        return f"Declared, not run yet: `python launch.py study {os.path.basename(folder)}`.\n"
    return table(read_json(path))
