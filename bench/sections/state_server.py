"""4. State server cost: /apply/ latency with N concurrent clients, and its share of a worker's step time."""
import os
import statistics

from bench.sections.common import policy_row, runs_with_policies
from launcher import calibrate
from training import config


def apply_latencies(num_workers, calls, workdir):
    """/apply/ round trips of `num_workers` client processes calling at once, as workers do: the median and the
    99th percentile, in milliseconds (measured as `launch.py calibrate` measures them: launcher/calibrate.py)."""
    flat = calibrate.apply_latencies(num_workers, calls, workdir)
    return {"p50_ms": 1000 * flat[len(flat) // 2], "p99_ms": 1000 * flat[int(len(flat) * 0.99) - 1]}


def check_ready_shares(cfg, workdir, earlier):
    """The state server's share of an ESync worker's time, per policy, on the accuracy profile: read from the
    heterogeneity section's runs when it ran, else from runs of its own."""
    policies = [config.default("esync_policy"), *cfg["esync_policies"]]
    rows = [r for r in earlier.get("heterogeneity", []) if r["profile"] == cfg["accuracy_profile"]]
    if not rows:
        runs = runs_with_policies(["esync"], cfg["esync_policies"], cfg["accuracy_profile"], cfg["seconds"],
                                  os.path.join(workdir, "policies"), snapshot_seconds=0)
        rows = [{"mode": mode, "check_ready": statistics.mean(w["check_ready"] for w in run["step_times"])}
                for mode, run in runs.items()]
    share = {r["mode"]: r["check_ready"] for r in rows}
    return {policy: share[policy_row(policy)] for policy in policies}


def measure(cfg, workdir, earlier):
    latency = apply_latencies(3, cfg["latency_calls"], workdir)
    return {"workers": 3, **latency, "share": check_ready_shares(cfg, workdir, earlier)}


def markdown(results):
    cost = results["state_server"]
    return [f"### State server: /apply/ with {cost['workers']} concurrent clients", "",
            f"p50 {cost['p50_ms']:.2f} ms, p99 {cost['p99_ms']:.2f} ms; share of a lenet worker's step time: "
            + ", ".join(f"{p} policy {100 * s:.1f}%" for p, s in cost["share"].items()), ""]
