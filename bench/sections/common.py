"""What the benchmark's sections share: launcher runs read back into summaries, each worker's step times, ESync's
policies as rows of a table, and the cells of the tables."""
import contextlib
import functools
import io
import logging
import os

from analysis import summary
from analysis.tables import format_cell
from launcher import experiment, preflight, runner
from launcher.cluster import ROOT
from launcher.experiment import DEFAULT_SNAPSHOT_SECONDS
from training import config, esync_variants, runlog

log = logging.getLogger("bench")

DATA = {"dataset": "mnist-5k", "data_dir": os.path.join(ROOT, "data")}  # the launcher's options
DATA_FLAGS = ["--dataset", DATA["dataset"], "-dd", DATA["data_dir"]]  # a worker's command line

fmt = functools.partial(format_cell, missing="–")  # a number of the tables, or a dash where there is none


def launch(modes, profile, seconds, workdir, launcher_options=None, network="lenet",
           snapshot_seconds=DEFAULT_SNAPSHOT_SECONDS, worker_options=()):
    """Summaries of the modes run by the launcher (`launcher_options`: more of its options, by attribute name);
    accuracy from the evaluator process's tests of rank 0's snapshots every `snapshot_seconds` (0: no evaluation,
    for the runs that measure throughput)."""
    logs = os.path.join(workdir, "logs")
    launcher_options = dict(launcher_options or {})
    run = experiment.build(experiment.options(
        modes=",".join(modes), network=network, devices=",".join(["cpu"] * len(profile.split(","))),
        slowdown=profile, max_time=float(seconds), log_dir=logs, progress_every=1000.0, figures=False,
        snapshot_seconds=snapshot_seconds, **DATA, **launcher_options), worker_options)
    preflight.check_machine(run)
    output = io.StringIO()  # the launcher's progress lines: kept for the error, off the benchmark's own output
    with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
        code = runner.run(run)
    if code != 0:
        raise RuntimeError(f"the launcher failed ({code}):\n{output.getvalue()[-6000:]}")
    attacked = bool(launcher_options.get("byzantine"))
    summaries = {}
    for mode in modes:
        folder = runlog.run_folder(mode, attacked)
        summaries[mode] = summary.load_summary(os.path.join(logs, network), folder)
        summaries[mode]["step_times"] = worker_step_times(os.path.join(logs, network, folder))
    return summaries


def worker_step_times(mode_folder):
    """Per worker: the mean seconds of its own steps (batch, compute, local update, emulated slowdown), the share of
    its time they take (the rest is aggregation, the state server and waiting for others) and the share the state
    server's round trips take. Evaluation is left out."""
    workers = []
    for _, name, folder in runlog.device_folders(mode_folder):
        if runlog.rank_in_folder(name) is None:
            continue
        steps = [s for r in runlog.DeviceLog(folder).ordered() for s in r["time"].values()]
        own = sum(s.get(k, 0.0) for s in steps for k in runlog.OWN_STEP_PHASES)
        total = sum(v for s in steps for k, v in s.items() if k != runlog.EVALUATION)
        if steps and total > 0:
            check_ready = sum(s.get(runlog.CHECK_READY, 0.0) for s in steps)
            workers.append({"step_seconds": own / len(steps), "busy": own / total, "check_ready": check_ready / total})
    return workers


def policy_row(variant):
    """The heterogeneity table's row of an ESync variant (training/esync_variants.py): 'esync' for the default
    policy, 'esync-plan', 'esync-adaptive-overlap', ..."""
    return "esync" if variant == config.default("esync_policy") else esync_variants.PREFIX + variant


def runs_with_policies(modes, variants, profile, seconds, workdir, snapshot_seconds=DEFAULT_SNAPSHOT_SECONDS,
                       launcher_options=None):
    """The modes' summaries, plus one row per further ESync variant ('esync-plan', ...)."""
    summaries = launch(modes, profile, seconds, workdir, launcher_options, snapshot_seconds=snapshot_seconds)
    for variant in variants:
        configuration = esync_variants.composition(variant)
        summaries[policy_row(variant)] = launch(["esync"], profile, seconds, os.path.join(workdir, variant),
                                                {**(launcher_options or {}), **configuration.launcher_options()},
                                                snapshot_seconds=snapshot_seconds,
                                                worker_options=configuration.worker_flags())["esync"]
    return summaries


def devices_of(summary):
    return [d for node in summary["devices"].values() for d in node.values()]
