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
(11.2M float32). Over 1 Gbit/s one transfer takes 44.7e6 x 8 / 1e9 = 0.36 s, R = 0.36 / 0.03 = 12;
over 10 Gbit/s R = 1.2. The paper's Figure 5 (its GPUs computing a small share of the time under SSGD) fits the
1 Gbit/s reading.
"""
import dataclasses
import logging
import math
import os
import statistics
import subprocess
import sys
import tempfile

from launcher import commands
from training import config, modes, runlog
from training.clocks import network
from training.devices import threads

log = logging.getLogger("launch")

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
    cluster = experiment.cluster
    fastest = cluster.fastest_worker
    return ([commands.MAIN_PY, "-m", modes.STANDALONE, "-n", experiment.network, "--dataset", experiment.dataset,
             "-dd", experiment.data_dir]
            + commands.device_flags(cluster.devices[fastest]) + ["--slowdown", cluster.slowdowns[fastest]]
            + (["--device-share", f"{cluster.device_share:g}"] if cluster.device_share else [])
            + config.flags_for_mode(experiment.worker_args, modes.STANDALONE)
            + ["--max-iters", str(PROBE_STEPS), "-e", "0", "-ld", log_dir, "--node-name", "probe"])


def probe_key(experiment):
    """What a measurement of the fast step depends on: the probe's command line, or the calibration given instead."""
    return (*probe_argv(experiment, ""), experiment.link_probe)


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


@dataclasses.dataclass(frozen=True)
class Probe:
    """What one short standalone run on the fastest worker's device measured."""
    step: float          # seconds of a step's own phases (median)
    compute: float       # of its forward and backward pass
    model_bytes: int
    period: float        # seconds from one step's start to the next's (mean)
    jitter: float        # the spread of log step seconds, from their interquartile range (a log-normal's sigma)


def jitter_of(records):
    """The log-normal spread of a step's own seconds after warm-up: the interquartile range of their logarithms /
    1.349, which a few slow outliers (a collection, a page fault) do not move."""
    steps = [sum(step.get(phase, 0.0) for phase in runlog.OWN_STEP_PHASES) for record in records
             for step in record["time"].values()][PROBE_WARMUP:]
    logs = sorted(math.log(seconds) for seconds in steps if seconds > 0)
    if len(logs) < 4:
        return 0.0
    quartiles = statistics.quantiles(logs, n=4)
    return (quartiles[2] - quartiles[0]) / 1.349


def measure(experiment):
    """The Probe of one short standalone run of the experiment's fastest worker; MeasurementFailed otherwise."""
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
        return Probe(fast_step_of(records), compute, device_log.meta["param_bytes"], period_of(records),
                     jitter_of(records))


def resolve(experiment, measured=None):
    """The experiment with its links' rates set from --comm-ratio (unchanged without it). `measured` caches the
    measurements of earlier calls by what they ran, so that the runs of one command share one measurement."""
    if experiment.cluster.comm_ratio is None or experiment.backend.charges_time:  # a virtual clock charges it itself
        return experiment
    measured = {} if measured is None else measured
    key = probe_key(experiment)
    first = key not in measured
    if first:
        measured[key] = experiment.link_probe or measure(experiment)
    probe = measured[key]
    step, compute, model_bytes = probe.step, probe.compute, probe.model_bytes
    cluster = experiment.cluster
    rate = rate_for(cluster.comm_ratio, step, model_bytes)
    regime = {"comm_ratio": cluster.comm_ratio, "fast_step_seconds": step, "fast_compute_seconds": compute,
              "model_bytes": model_bytes,
              "rate_bps": rate, "transfer_seconds": 8 * model_bytes / rate}
    ps_rate = cluster.ps_rate or network.server_bits(cluster.ps_link, rate)
    resolved = dataclasses.replace(experiment, cluster=dataclasses.replace(
        cluster, worker_rate=rate, ps_rate=ps_rate, bandwidth=describe_rate(rate),
        ps_bandwidth=cluster.ps_bandwidth if cluster.ps_rate else describe_rate(ps_rate), regime=regime))
    if not first:
        print(f"links: each worker link at {rate / 1e6:.3f} Mbit/s, the parameter servers' at {ps_rate / 1e6:.3f} "
              f"Mbit/s (the measurement before the first run, ratio {cluster.comm_ratio:g})", flush=True)
        return resolved
    print(f"links: --comm-ratio {cluster.comm_ratio:g}: the fastest worker's step takes {1e3 * step:.2f} ms alone "
          f"({'as calibrated' if experiment.link_probe else 'measured now'}) "
          f"and {experiment.network} has {model_bytes} bytes of weights, so each worker link runs at "
          f"{rate / 1e6:.3f} Mbit/s (a transfer of the model: {8e3 * model_bytes / rate:.1f} ms), the parameter "
          f"servers' at {ps_rate / 1e6:.3f} Mbit/s", flush=True)
    return resolved
