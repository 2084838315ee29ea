"""4. State server cost: /apply/ latency with N concurrent clients, and its share of a worker's step time."""
import multiprocessing
import os
import statistics
import time

from bench.sections.common import policy_row, runs_with_policies
from launcher.cluster import STATE_TOKEN_VARIABLE, ProcessGroup, start_state_server
from training import config
from training.transport.state_client import StateClient


TOKEN, JOB = "a-benchmark-token-of-24-characters", "bench"  # as a launcher job's requests carry them


def apply_latencies(num_workers, calls, workdir):
    """/apply/ round trips of `num_workers` client processes calling at once, as workers do (threads of one process
    would wait for each other's interpreter lock), each request with the job's token and id."""
    with ProcessGroup(os.path.join(workdir, "state-server"), {STATE_TOKEN_VARIABLE: TOKEN}) as group:
        port = start_state_server(group)
        with StateClient("127.0.0.1", port, token=TOKEN, job=JOB) as admin:
            admin.init(num_workers)
        context = multiprocessing.get_context("fork")
        start, results = context.Barrier(num_workers), context.Queue()
        clients = [context.Process(target=_timed_applies, args=(port, rank, calls, start, results))
                   for rank in range(num_workers)]
        for client in clients:
            client.start()
        latencies = [results.get(timeout=60 + calls) for _ in clients]
        for client in clients:
            client.join()
    flat = sorted(x for per_worker in latencies for x in per_worker)
    return {"p50_ms": 1000 * flat[len(flat) // 2], "p99_ms": 1000 * flat[int(len(flat) * 0.99) - 1]}


def _timed_applies(port, rank, calls, start, results):
    latencies = []
    with StateClient("127.0.0.1", port, token=TOKEN, job=JOB) as client:
        client.state()  # connected before the clock starts
        start.wait()
        for k in range(1, calls + 1):
            begun = time.perf_counter()
            client.apply(rank, k, 0.01 * (rank + 1), time.time())
            latencies.append(time.perf_counter() - begun)
    results.put(latencies)


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
