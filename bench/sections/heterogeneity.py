"""2. Efficiency under heterogeneity: cluster samples/s over the sum of each worker's standalone samples/s under its
own slowdown, measured while all run at once (the fair limit when processes share few cores); 3. time to accuracy
and accuracy after a fixed budget; 5. traffic: bytes per second each worker sends, as its logs count them."""
import os
import statistics

from analysis import metrics, significance
from analysis.paper import with_lower_bounds as statistics_of_repeats
from analysis.tables import markdown_table
from bench.sections.common import (
    DATA_FLAGS,
    devices_of,
    fmt,
    launch,
    leader_text,
    leaders,
    log,
    over_repeats,
    repeats_note,
    repeats_of,
    runs_with_policies,
    too_few_repeats,
    with_spread,
)
from launcher import workers
from training.modes import ESYNC


def standalone_throughputs(slowdowns, seconds, workdir, quotas=True):
    """Each worker's samples/s alone on its slowdown (under its device's CPU quota where the launcher's runs have
    one, unless not `quotas`), all running at the same time; their logs in workers.device_folder(workdir, index)."""
    share = workers.device_share(slowdowns)[0] if quotas else None
    try:
        return workers.concurrent_standalone(slowdowns, seconds, workdir, ["-n", "lenet", *DATA_FLAGS], share)
    except workers.LimitFailed as error:
        raise RuntimeError(str(error))


def whole_step_bound(step_times):
    """The efficiency ESync's rounds allow at the workers' own step times if aggregating and asking the state
    server cost nothing: a round lasts the slowest step, and worker i fits floor(slowest / its step) steps in it."""
    steps = [w["step_seconds"] for w in step_times]
    slowest = max(steps)
    return sum(int(slowest / c + 1e-9) for c in steps) / slowest / sum(1 / c for c in steps)


def accuracy_at(summary, budget):
    """The last accuracy the run's evaluator (or evaluating worker) measured up to `budget` seconds of training."""
    before = [a for _, t, a in sorted(metrics.curve_points(summary), key=lambda p: p[1]) if t <= budget]
    return before[-1] if before else None


def traffic_per_worker(summary):
    """Bytes/s each worker sends, as it logged them; None when the workers send nothing over a network (Hogwild!)."""
    rates = [d["sent_bytes"] / d["elapsed_time"] for d in devices_of(summary) if d["sent_bytes"] is not None]
    return statistics.mean(rates) if rates else None


def measure(cfg, workdir, earlier):
    repeats = [one_repeat(cfg, os.path.join(workdir, f"repeat-{index + 1}")) for index in range(cfg["repeats"])]
    return [combined(runs) for runs in zip(*repeats)]


def one_repeat(cfg, workdir):
    """A row of one run for every (profile, mode), in the order of the table."""
    rows = []
    links = cfg.get("links", {})
    for profile in cfg["profiles"]:
        slowdowns = [float(f) for f in profile.split(",")]
        modes = cfg["modes"] + (cfg["accuracy_profile_modes"] if profile == cfg["accuracy_profile"] else [])
        run_dir = os.path.join(workdir, "profile-" + profile.replace(",", "-"))
        limit = sum(standalone_throughputs(slowdowns, cfg["seconds"], run_dir))
        # Throughput runs evaluate nothing, like the standalone runs they are compared with: on a machine with fewer
        # cores than processes even the evaluator process takes some of the cores from training.
        summaries = runs_with_policies(modes, cfg["esync_policies"], profile, cfg["seconds"], run_dir,
                                       snapshot_seconds=0,
                                       launcher_options=links)
        accuracy = (launch(modes, profile, cfg["accuracy_budget"], os.path.join(run_dir, "accuracy"), links)
                    if profile == cfg["accuracy_profile"] and cfg["accuracy_budget"] else {})
        ideal_sync = len(slowdowns) * min(1 / f for f in slowdowns) / sum(1 / f for f in slowdowns)
        for mode, run in summaries.items():
            curve = accuracy.get(mode, {})
            reached = curve.get("time_to_accuracy") if curve.get("target_accuracy") == 0.85 else None
            rows.append({
                "profile": profile, "mode": mode, "samples_per_s": run["cluster_throughput"],
                "standalone_sum": limit, "efficiency": run["cluster_throughput"] / limit,
                "ideal_sync_efficiency": ideal_sync,
                "time_to_85": reached,
                "time_to_85_bound": curve.get("elapsed_time") if curve and reached is None else None,
                "accuracy_at_budget": accuracy_at(curve, cfg["accuracy_budget"]) if curve else None,
                "final_accuracy": curve.get("final_accuracy", run["final_accuracy"]),
                "bytes_per_s_per_worker": traffic_per_worker(run),
                "busy": statistics.mean(w["busy"] for w in run["step_times"]),
                "whole_step_bound": whole_step_bound(run["step_times"]) if mode.startswith(ESYNC) else None,
                "check_ready": statistics.mean(w["check_ready"] for w in run["step_times"]),
                "links": run.get("links"),
            })
            log.info("%s on %s: %.0f samples/s, efficiency %.2f", mode, profile, run["cluster_throughput"],
                     run["cluster_throughput"] / limit)
    return rows


SPREAD = ("samples_per_s", "efficiency", "accuracy_at_budget", "final_accuracy")  # their stddev over the repeats


def combined(runs):
    """One (profile, mode)'s row over its repeats: the mean of each number (a time to 85 % counted at least its
    run's training time where a repeat never got there: the mean is then a lower bound, `time_to_85_lower_bound`),
    the stddevs of SPREAD and of the time, and each repeat's values for the tests of who leads."""
    row = over_repeats(runs, SPREAD)
    times = statistics_of_repeats([run["time_to_85"] for run in runs], [run["time_to_85_bound"] for run in runs])
    row.update(time_to_85=times["mean"], time_to_85_lower_bound=times["lower_bound"])
    row["spread"]["time_to_85"] = times["std"]
    row["per_repeat"].update({key: [run[key] for run in runs] for key in ("time_to_85", "time_to_85_bound")})
    del row["time_to_85_bound"]
    return row


def verdicts(rows, key, lower_is_better):
    """{profile: significance.verdict} of the rows that measured `key` in every repeat: the best mean against every
    other row of the profile, beyond the repeats' spread."""
    return leaders(rows, lambda r: r["profile"], lambda r: r["mode"], lambda r: repeat_values(r, key), lower_is_better)


def repeat_values(row, key):
    """Each repeat's value of `key` (a time to 85 % counted at least its training time where never reached); [] where
    a repeat has none."""
    if key != "time_to_85":
        return repeats_of(row, key)
    per_repeat = row["per_repeat"]
    values = significance.censored_times(per_repeat[key], per_repeat["time_to_85_bound"])
    return values if len(values) == len(per_repeat[key]) else []


def markdown(results):
    rows_of = results["heterogeneity"]
    links = sorted({r["links"] for r in rows_of if r.get("links")})
    headers = ["profile", "mode", "samples/s", "efficiency", "SSGD ideal", "busy", "whole-step bound",
               "time to 85% (s)", "accuracy at budget", "final accuracy", "push = pull (kB/s per worker)"]
    rows = []
    for r in rows_of:
        traffic = None if r["bytes_per_s_per_worker"] is None else r["bytes_per_s_per_worker"] / 1e3
        spread = r.get("spread", {})
        time = with_spread(r["time_to_85"], spread.get("time_to_85"), ".1f")
        if r.get("time_to_85_lower_bound"):
            time = f"≥ {time}"
        rows.append([r["profile"], r["mode"], with_spread(r["samples_per_s"], spread.get("samples_per_s"), ".0f"),
                     with_spread(r["efficiency"], spread.get("efficiency"), ".2f"),
                     f"{r['ideal_sync_efficiency']:.2f}", fmt(r["busy"], ".2f"), fmt(r["whole_step_bound"], ".2f"),
                     time, with_spread(r["accuracy_at_budget"], spread.get("accuracy_at_budget"), ".3f"),
                     with_spread(r["final_accuracy"], spread.get("final_accuracy"), ".3f"), fmt(traffic, ".0f")])
    return ["### Heterogeneity (lenet, mnist-5k): efficiency = cluster samples/s / sum of standalone samples/s", "",
            f"Links: {'; '.join(links) or 'loopback (no link limit)'}. "
            + repeats_note(rows_of), "",
            "busy: share of a worker's time in its own steps (the rest: aggregation, state server, waiting); "
            "whole-step bound: the efficiency ESync's rounds allow at the workers' step times in that run if "
            "aggregating and the state server cost nothing (a round lasts the slowest step; a worker fits whole "
            "steps only); ≥: a lower bound (a repeat never reached 85 %, counted at its training time).", "",
            markdown_table(headers, rows), "", *verdict_lines(rows_of), ""]


def verdict_lines(rows):
    """Who leads each profile in efficiency and in time to 85 %, beyond the spread (significance.TEST_NAME)."""
    measures = (("efficiency", "efficiency", False, significance.TEST_NAME),
                ("time to 85 %", "time_to_85", True, significance.TIME_TEST_NAME))
    return too_few_repeats(rows) or [
        f"- {title} on {profile}: {leader_text(verdict)} ({test} over the repeats)."
        for title, key, lower, test in measures for profile, verdict in verdicts(rows, key, lower).items()]
