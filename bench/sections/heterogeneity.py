"""2. Efficiency under heterogeneity: cluster samples/s over the sum of each worker's standalone samples/s under its
own slowdown, measured while all run at once (the fair limit when processes share few cores); 3. time to accuracy
and accuracy after a fixed budget; 5. traffic: bytes per second each worker sends, as its logs count them."""
import os
import statistics

from analysis import metrics
from analysis.tables import markdown_table
from bench.sections.common import DATA_FLAGS, devices_of, fmt, launch, log, runs_with_policies
from launcher import limit, workers
from training.modes import ESYNC


def standalone_throughputs(slowdowns, seconds, workdir, quotas=True):
    """Each worker's samples/s alone on its slowdown (under its device's CPU quota where the launcher's runs have
    one, unless not `quotas`), all running at the same time; their logs in limit.device_folder(workdir, index)."""
    share = workers.device_share(slowdowns)[0] if quotas else None
    try:
        return limit.concurrent_standalone(slowdowns, seconds, workdir, ["-n", "lenet", *DATA_FLAGS], share)
    except limit.LimitFailed as error:
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
            rows.append({
                "profile": profile, "mode": mode, "samples_per_s": run["cluster_throughput"],
                "standalone_sum": limit, "efficiency": run["cluster_throughput"] / limit,
                "ideal_sync_efficiency": ideal_sync,
                "time_to_85": curve.get("time_to_accuracy") if curve.get("target_accuracy") == 0.85 else None,
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


def markdown(results):
    links = sorted({r["links"] for r in results["heterogeneity"] if r.get("links")})
    headers = ["profile", "mode", "samples/s", "efficiency", "SSGD ideal", "busy", "whole-step bound",
               "time to 85% (s)", "accuracy at budget", "final accuracy", "push = pull (kB/s per worker)"]
    rows = []
    for r in results["heterogeneity"]:
        traffic = None if r["bytes_per_s_per_worker"] is None else r["bytes_per_s_per_worker"] / 1e3
        rows.append([r["profile"], r["mode"], f"{r['samples_per_s']:.0f}", f"{r['efficiency']:.2f}",
                     f"{r['ideal_sync_efficiency']:.2f}", fmt(r["busy"], ".2f"), fmt(r["whole_step_bound"], ".2f"),
                     fmt(r["time_to_85"], ".1f"), fmt(r["accuracy_at_budget"], ".3f"),
                     fmt(r["final_accuracy"], ".3f"), fmt(traffic, ".0f")])
    return ["### Heterogeneity (lenet, mnist-5k): efficiency = cluster samples/s / sum of standalone samples/s", "",
            f"Links: {'; '.join(links) or 'loopback (no link limit)'}.", "",
            "busy: share of a worker's time in its own steps (the rest: aggregation, state server, waiting); "
            "whole-step bound: the efficiency ESync's rounds allow at the workers' step times in that run if "
            "aggregating and the state server cost nothing (a round lasts the slowest step; a worker fits whole "
            "steps only).", "",
            markdown_table(headers, rows), ""]
