"""A communication regime stated so that it means the same on any machine: the ratio R of one transfer of the
model over a worker's link to one step of the fastest worker.

A link rate alone says little: 20 Mbit/s is a fast link for lenet on 2 cores and a slow one for ResNet-50 on a GPU.
With `--comm-ratio R` the launcher measures, before the first run, the fastest worker's step (its device, its
slowdown, one compute thread, alone: `main.py -m local` for PROBE_STEPS steps, the median of its own-step phases
after PROBE_WARMUP) and the model's bytes (the run's meta.json), and sets each worker link to

    rate = 8 x model bytes / (R x fast step)       bits per second

so that pushing (or pulling) the whole model once over a worker link lasts R fast steps. TCP/IP headers (about
4 %) are not counted.

The ESync paper's cluster, derived (the paper states neither its link nor its step times per network): a GTX 1080Ti
step of ResNet-18-v1 at batch 64 takes about 0.03 s (the paper's "about 0.03 s" GPU step), its weights are 44.7 MB
(11.2M float32). Over 1 Gbit/s one transfer takes 44.7e6 x 8 / 1e9 = 0.36 s, R = 0.36 / 0.03 = 12 (PAPER_RATIO);
over 10 Gbit/s R = 1.2. The paper's Figure 5 (its GPUs computing a small share of the time under SSGD) fits the
1 Gbit/s reading.
"""
import dataclasses
import logging
import os
import subprocess
import sys
import tempfile

from launcher import commands
from training import config, modes, runlog
from training.clocks import network
from training.devices import threads

log = logging.getLogger("launch")

PAPER_RATIO = 12.0
PROBE_STEPS = 100
PROBE_WARMUP = 10
PROBE_TIMEOUT = 300.0


class MeasurementFailed(Exception):
    """The fast step could not be measured; the message is one line."""


def rate_for(ratio, fast_step_seconds, model_bytes):
    """Bits per second at which one transfer of `model_bytes` lasts `ratio` fast steps."""
    return int(round(8 * model_bytes / (ratio * fast_step_seconds)))


def describe_rate(bits_per_second):
    return f"{bits_per_second / 1e6:.3g}mbit"


def probe_argv(experiment, log_dir):
    """main.py alone on the fastest worker's device and slowdown, with the workers' own options. No --seed: a step's
    time does not depend on it, and without it the repeats of one command share one measurement."""
    fastest = experiment.fastest_worker
    return ([commands.MAIN_PY, "-m", modes.STANDALONE, "-n", experiment.network, "--dataset", experiment.dataset,
             "-dd", experiment.data_dir]
            + commands.device_flags(experiment.devices[fastest]) + ["--slowdown", experiment.slowdowns[fastest]]
            + (["--device-share", f"{experiment.device_share:g}"] if experiment.device_share else [])
            + config.flags_for_mode(experiment.worker_args, modes.STANDALONE)
            + ["--max-iters", str(PROBE_STEPS), "-e", "0", "-ld", log_dir, "--node-name", "probe"])


def period_of(records):
    """The mean seconds from one step's start to the next's after warm-up: the step's own phases and the loop's
    work between steps, as a run pays them; an evaluation (the probe's last step) left out."""
    warm = max(1, min(PROBE_WARMUP, len(records) - 1))
    span = records[-1]["total_time"] - records[warm - 1]["total_time"]
    evaluating = sum(step.get(runlog.EVALUATION, 0.0) for r in records[warm:] for step in r["time"].values())
    return max(0.0, span - evaluating) / max(1, len(records) - warm)


def fast_step_of(records):
    """The median seconds of a step's own phases (batch, compute, local update, emulated slowdown) after warm-up."""
    return runlog.median_step_seconds(records, runlog.OWN_STEP_PHASES, PROBE_WARMUP)


def measure(experiment):
    """(fast step, its forward and backward pass, in seconds; model bytes; the step's period, in seconds) measured
    by one short standalone run; MeasurementFailed otherwise."""
    with tempfile.TemporaryDirectory(prefix="esync-probe-") as log_dir:
        argv = [sys.executable] + probe_argv(experiment, log_dir)
        env = {k: v for k, v in os.environ.items() if not k.startswith("DMLC_")}
        env.update(threads.ONE_THREAD)  # as every worker of a cluster mode computes
        try:
            result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=PROBE_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise MeasurementFailed(f"--comm-ratio: timing the fast step took more than {PROBE_TIMEOUT:g} s")
        if result.returncode != 0:
            last = (result.stderr.strip().splitlines() or ["no output"])[-1]
            raise MeasurementFailed(f"--comm-ratio: timing the fast step failed (exit {result.returncode}): {last}")
        folders = [path for _, _, path in runlog.device_folders(log_dir)]
        if not folders:
            raise MeasurementFailed(f"--comm-ratio: timing the fast step logged nothing under {log_dir}")
        device_log = runlog.DeviceLog(folders[0])
        records = device_log.ordered()
        compute = runlog.median_step_seconds(records, (runlog.FORWARD_BACKWARD,), PROBE_WARMUP)
        return fast_step_of(records), compute, device_log.meta["param_bytes"], period_of(records)


def resolve(experiment, measured=None):
    """The experiment with its links' rates set from --comm-ratio (unchanged without it). `measured` caches the
    measurements of earlier calls by what they ran, so that the runs of one command share one measurement."""
    if experiment.comm_ratio is None or experiment.clock != "real":  # a virtual clock charges the ratio itself
        return experiment
    measured = {} if measured is None else measured
    key = tuple(probe_argv(experiment, ""))
    first = key not in measured
    if first:
        measured[key] = measure(experiment)
    step, compute, model_bytes, _ = measured[key]
    rate = rate_for(experiment.comm_ratio, step, model_bytes)
    regime = {"comm_ratio": experiment.comm_ratio, "fast_step_seconds": step, "fast_compute_seconds": compute,
              "model_bytes": model_bytes,
              "rate_bps": rate, "transfer_seconds": 8 * model_bytes / rate}
    ps_rate = experiment.ps_rate or network.server_bits(experiment.ps_link, rate)
    resolved = dataclasses.replace(
        experiment, worker_rate=rate, ps_rate=ps_rate, bandwidth=describe_rate(rate),
        ps_bandwidth=experiment.ps_bandwidth if experiment.ps_rate else describe_rate(ps_rate), regime=regime)
    if not first:
        print(f"links: each worker link at {rate / 1e6:.3f} Mbit/s, the parameter servers' at {ps_rate / 1e6:.3f} "
              f"Mbit/s (the measurement before the first run, ratio {experiment.comm_ratio:g})", flush=True)
        return resolved
    print(f"links: --comm-ratio {experiment.comm_ratio:g}: the fastest worker's step takes {1e3 * step:.2f} ms alone "
          f"and {experiment.network} has {model_bytes} bytes of weights, so each worker link runs at "
          f"{rate / 1e6:.3f} Mbit/s (a transfer of the model: {8e3 * model_bytes / rate:.1f} ms), the parameter "
          f"servers' at {ps_rate / 1e6:.3f} Mbit/s", flush=True)
    return resolved


# ----------------------------------------------------------------------------------------------
# A device calibrated for the virtual clock: `launch.py calibrate`


def calibrate(argv):
    """`launch.py calibrate [--out FILE] LAUNCHER-OPTIONS`: the fast step of the launcher's options (network, data,
    batch size after --, the fastest worker's device and CPU quota), measured as for --comm-ratio and written to FILE
    for `--clock virtual --step-seconds FILE`. Exit 0, 1 where the measurement failed, 2 for bad input."""
    import json
    import shlex
    import socket

    from training.checks import UsageError
    from training.faults.failures import EXIT_FAILURE, EXIT_USAGE
    from training.files import write_json

    try:
        out, run = parse_calibration(argv)
        step, compute, model_bytes, period = measure(run)
    except UsageError as error:
        print(f"launch.py calibrate: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except MeasurementFailed as error:
        print(f"launch.py calibrate: {str(error).replace('--comm-ratio: ', '')}", file=sys.stderr)
        return EXIT_FAILURE
    record = {"network": run.network, "dataset": run.dataset, "batch_size": batch_size_of(run.worker_args),
              "step_seconds": step, "overhead_seconds": max(0.0, period - step), "period_seconds": period,
              "compute_seconds": compute, "model_bytes": model_bytes, "steps": PROBE_STEPS,
              "device": run.devices[run.fastest_worker], "device_share": run.device_share,
              "devices_described": run.devices_described, "measured_on": socket.gethostname(),
              "command": "python launch.py calibrate " + shlex.join(argv)}
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    write_json(out, record, indent=1)
    print(json.dumps(record, indent=1))
    print(f"a step of {run.network} at batch {record['batch_size']}: {step * 1e3:.2f} ms; written to {out}")
    return 0


def parse_calibration(argv):
    """(the file to write, the Experiment whose fast step is measured) of `launch.py calibrate`'s arguments."""
    import argparse

    from launcher import experiment as launcher_options

    p = argparse.ArgumentParser(prog="launch.py calibrate", description=calibrate.__doc__.splitlines()[0])
    p.add_argument("--out", default="devices.json", help="the file to write (default devices.json)")
    ns, rest = p.parse_known_args(argv)
    return ns.out, launcher_options.parse(["--modes", modes.STANDALONE, "--max-iters", str(PROBE_STEPS), *rest])


def batch_size_of(worker_args):
    """The batch size the workers' arguments give (main.py's default without -b)."""
    import argparse

    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("-b", "--batch-size", type=int, default=config.default("batch_size"))
    return p.parse_known_args(list(worker_args))[0].batch_size


def device_charges(given, network, dataset, worker_args):
    """(step seconds, overhead seconds) of --step-seconds: a number and no overhead, or what a calibration file
    gives for this run; (None, 0) without it."""
    if given is None or isinstance(given, float):
        return given, 0.0
    try:
        return float(given), 0.0
    except ValueError:
        record = calibrated_record(given, network, dataset, worker_args)
        return float(record["step_seconds"]), float(record.get("overhead_seconds") or 0.0)


def calibrated_record(path, network, dataset, worker_args):
    """The record of a calibration file for a run of `network` on `dataset` at its batch size; ValueError (one
    line) where the file is not one, or was measured for another network, data set or batch size."""
    from training.files import read_json

    try:
        record = read_json(path)
        step = float(record["step_seconds"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{path} is neither a number of seconds nor a file of launch.py calibrate ({error})") from None
    wanted = {"network": network, "dataset": dataset, "batch_size": batch_size_of(worker_args)}
    differing = {key: record.get(key) for key, value in wanted.items() if record.get(key) != value}
    if differing:
        said = ", ".join(f"{key} {value}" for key, value in differing.items())
        raise ValueError(f"{path} was calibrated for {said}, not for this run's "
                         + ", ".join(f"{key} {wanted[key]}" for key in differing))
    if not step > 0:
        raise ValueError(f"{path}: a step of {step} s")
    return record

