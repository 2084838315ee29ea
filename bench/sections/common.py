"""What the benchmark's sections share: launcher runs read back into summaries, each worker's step times, ESync's
policies as rows of a table, a row's repeats combined and the leaders they support, and the cells of the tables."""
import contextlib
import functools
import io
import logging
import os

from analysis import significance, summary
from analysis.paper import statistics_of
from analysis.tables import format_cell
from launcher import checks, experiment, runner
from launcher.cluster import ROOT
from launcher.experiment import DEFAULT_SNAPSHOT_SECONDS
from training import config, esync_variants, runlog

log = logging.getLogger("bench")

DATA = {"dataset": "mnist-5k", "data_dir": os.path.join(ROOT, "data")}  # the launcher's options
DATA_FLAGS = ["--dataset", DATA["dataset"], "-dd", DATA["data_dir"]]  # a worker's command line

fmt = functools.partial(format_cell, missing="–")  # a number of the tables, or a dash where there is none


def launch(modes, profile, seconds, workdir, launcher_options=None, network="lenet",
           snapshot_seconds=DEFAULT_SNAPSHOT_SECONDS, worker_options=()):
    """Summaries of the modes run by the launcher (`launcher_options`: more of its options, by attribute name, the
    data set's among them where not the shipped sample);
    accuracy from the evaluator process's tests of rank 0's snapshots every `snapshot_seconds` (0: no evaluation,
    for the runs that measure throughput)."""
    logs = os.path.join(workdir, "logs")
    launcher_options = dict(launcher_options or {})
    run = experiment.build(experiment.options(
        modes=",".join(modes), network=network, devices=",".join(["cpu"] * len(profile.split(","))),
        slowdown=profile, max_time=float(seconds), log_dir=logs, progress_every=1000.0, figures=False,
        snapshot_seconds=snapshot_seconds, **{**DATA, **launcher_options}), worker_options)
    checks.check_machine(run)
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
        if runlog.index_in_folder(name) is None:
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


def over_repeats(runs, spread_keys):
    """One row of a table over its repeats (each run a row of one repeat, the same keys): the mean of every number
    that differs between them (anything else as the first repeat has it: the row's names, its number of workers),
    the stddev over the repeats of each of `spread_keys` (None below two), their values per repeat for the tests of
    who leads, and the number of repeats."""
    over = {key: statistics_of([run[key] for run in runs]) for key in runs[0] if numeric(key, runs)}
    row = {key: over[key]["mean"] if key in over and differ(key, runs) else runs[0][key] for key in runs[0]}
    row.update(repeats=len(runs), spread={key: over.get(key, {}).get("std") for key in spread_keys},
               per_repeat={key: [run[key] for run in runs] for key in spread_keys})
    return row


def numeric(key, runs):
    return any(isinstance(run[key], (int, float)) and not isinstance(run[key], bool) for run in runs)


def differ(key, runs):
    return any(run[key] != runs[0][key] for run in runs)


def repeats_of(row, key):
    """The repeats' values of `key` in a row of over_repeats; [] where a repeat has none."""
    values = row["per_repeat"][key]
    return values if values and all(v is not None for v in values) else []


def leaders(rows, group_of, label_of, values_of, lower_is_better=False):
    """{group: significance.verdict}: in each group of rows (group_of(row)), the row with the best mean of its
    repeats' values (values_of(row), [] where it has none) against every other row of the group, beyond their
    spread; the rows named by label_of(row), groups with fewer than two rows with values left out."""
    grouped = {}
    for row in rows:
        values = values_of(row)
        if values:
            grouped.setdefault(group_of(row), {})[label_of(row)] = values
    found = {}
    for group, values in grouped.items():
        if len(values) < 2:
            continue
        best = (min if lower_is_better else max)(values, key=lambda label: significance.location(values[label]))
        signed = {label: [v if lower_is_better else -v for v in vs] for label, vs in values.items()}
        found[group] = significance.verdict(best, signed)
    return found


def repeats_note(rows):
    """What each number of a table over_repeats made is: "Each number the mean of 3 repeats ± their stddev."."""
    repeats = max(r.get("repeats", 1) for r in rows)
    return f"Each number the mean of {repeats} repeats ± their stddev." if repeats > 1 else "One run each."


def too_few_repeats(rows):
    """["One run per row: no leader is named."] where no row has the repeats to judge a lead by, else []."""
    if max(r.get("repeats", 1) for r in rows) < significance.MIN_REPEATS:
        return ["One run per row: no leader is named."]
    return []


def leader_text(verdict):
    """The winner in bold, or which rows tie and which are behind the best of them beyond the spread."""
    if verdict["winner"]:
        return f"**{verdict['winner']}**"
    leader, behind = verdict["tied"][0], [row for row in verdict["p_values"] if row not in verdict["tied"]]
    return (f"no winner: {', '.join(verdict['tied'])} tie"
            + (f"; behind {leader} beyond the spread: {', '.join(behind)}" if behind else ""))


def with_spread(value, spread, spec):
    """A mean with its stddev over the repeats ("0.85 ± 0.07"), or the value alone where there is no spread."""
    return fmt(value, spec) if spread is None or value is None else f"{fmt(value, spec)} ± {fmt(spread, spec)}"
