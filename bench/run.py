"""Benchmarks of every scheme on this machine, measured side by side within one run.

    python -m bench.run                 # the full table (about 25 minutes on 2 cores)
    python -m bench.run --only network  # one section (sync_overhead, heterogeneity, state_server, byzantine,
                                        # network), written to its own results-<section>.json/md
    python -m bench.run --quick         # every section, tiny durations (a smoke test)
    python -m bench.run --only heterogeneity --hosts netns --comm-ratio 3   # that section on shaped links

Run from the repository's root folder.

Writes bench/results.json and bench/results.md (or --out DIR). Sections:
  1. sync overhead: our sync mode vs gluon.Trainer(kvstore='dist_sync'), same network, batch, data and cluster;
  2. efficiency under heterogeneity: cluster samples/s / the sum of each worker's standalone samples/s under its
     own slowdown, measured while all run at once (the fair limit when processes share few cores);
  3. time to accuracy and accuracy after a fixed budget, lenet on mnist-5k, slowdown 1,1,4;
  4. state server cost: /apply/ latency with N concurrent clients, and its share of a worker's step time;
  5. traffic: bytes per second each worker sends, as its logs count them;
  6. Byzantine workers: accuracy with one sign-flipping worker of 4 (3 in --quick), plain sync averaging vs Zeno;
  7. network: sync and esync (and async) across network namespaces with rate-limited links (launch.py --hosts
     netns), lenet and resnet18-v1, 3 and 4 workers, over the parameter server with 1 and 2 servers and over MPI's
     ring, butterfly and binary blocks: throughput, bytes per worker per round beside the textbook's figure, the
     busiest link's load; skipped with a note where namespaces cannot be made (needs root);
  8. input pipeline: a training step on CIFAR-10-shaped batches (3x32x32, normalised) without augmentation, with
     CIFAR-10's crops and flips made in the step, with them made one batch ahead (--augment crop), and with d2l's
     resized crops made one batch ahead by Gluon's transforms (--augment resized-crop).
"""
import argparse
import glob
import json
import logging
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time

from analysis import summary
from launcher import experiment, limit, netns
from launcher.cluster import ROOT, ProcessGroup, start_ps_job, start_state_server, tail
from training import collectives, config, esync_variants, modes, runlog, traffic
from training.checks import UsageError
from training.files import write_json
from training.state_client import StateClient

log = logging.getLogger("bench")

PY = sys.executable
DATA = ["--dataset", "mnist-5k", "-dd", os.path.join(ROOT, "data")]

ALL_MODES = ("sync", "async", "esync")
TRANSPORTS = (("ps", 1), ("ps", 2), ("ring", 1), ("butterfly", 1), ("binary-blocks", 1))  # (collective, servers)


def network_matrix():
    """(network, rate per link, workers, collective, servers, modes) of each launcher run of the network section.
    lenet: both rates, 4 workers, sync and esync over every transport (and async over one server), and 3 workers
    at 100 Mbit/s; resnet18-v1 (45 MB a round): sync at 100 Mbit/s with 4 workers. Left out to keep the section
    near 10 minutes (each mode costs about 10 s of start-up on top of its training): resnet18-v1 at 1 Gbit/s, with 3
    workers, and its esync and async."""
    runs = []
    for rate in ("1gbit", "100mbit"):
        for collective, servers in TRANSPORTS:
            extra = ("async",) if (collective, servers) == ("ps", 1) else ()
            runs.append(("lenet", rate, 4, collective, servers, ("sync", "esync") + extra))
    runs += [("lenet", "100mbit", 3, collective, servers, ("sync",)) for collective, servers in TRANSPORTS]
    runs += [("resnet18-v1", "100mbit", 4, collective, servers, ("sync",)) for collective, servers in TRANSPORTS]
    return runs
EVAL_EVERY = 5          # rank 0 evaluates every 5 global iterations in the runs that time accuracy

# Heterogeneity runs `modes` on every profile, `accuracy_profile_modes` too on `accuracy_profile`, and ESync once more
# with each of `esync_policies` (variants: training/esync_variants.py) besides the default one; the Byzantine section
# runs (mode, with the attacker) pairs.
FULL = dict(repeats=3, trainer_iters={"lenet": 300, "resnet18-v1": 25}, warmup=5,
            profiles=["1,1,4", "1,2,4,8"], accuracy_profile="1,1,4", seconds=12, accuracy_budget=15,
            latency_calls=300,
            modes=["esync", "sync", "async"],
            accuracy_profile_modes=["dcasgd", "dcasgd-paper", "downpour", "nbsync", "backup", "lb-bsp", "zeno", "zeno-async", "fedavg",
                                    "fedasync", "tifl", "feddrop", "hogwild"],
            esync_policies=["apply", "plan", "nonblocking", "overlap"],
            byzantine_runs=[("zeno", False), ("sync", True), ("zeno", True)], byzantine_profile="1,1,1,1",
            network_runs=network_matrix(), network_seconds={"lenet": 5, "resnet18-v1": 15},
            pipeline_networks={"lenet": 300, "resnet20": 15}, pipeline_batch=128)
# A smoke test of every section: one run where the full benchmark compares several, no separate accuracy runs, two
# workers where the full benchmark has three or more.
QUICK = dict(repeats=1, trainer_iters={"lenet": 30}, warmup=3,
             profiles=["1,4"], accuracy_profile="1,4", seconds=1, accuracy_budget=0, latency_calls=30,
             modes=["esync"], accuracy_profile_modes=[], esync_policies=[], byzantine_runs=[("zeno", True)],
             byzantine_profile="1,1",
             network_runs=[("lenet", "100mbit", 2, "ring", 1, ("esync",))], network_seconds={"lenet": 1},
             pipeline_networks={"lenet": 6}, pipeline_batch=32)


def unknown_modes(cfg):
    """The modes a configuration runs that do not train on every device of a profile: neither cluster modes of
    training/modes.py nor Hogwild! (one process per device)."""
    chosen = set(ALL_MODES) | set(cfg["modes"]) | set(cfg["accuracy_profile_modes"])
    chosen |= {mode for mode, _ in cfg["byzantine_runs"]}
    chosen |= {mode for *_, run_modes in cfg["network_runs"] for mode in run_modes}
    return sorted(chosen - set(modes.cluster_names()) - {modes.HOGWILD})


# ------------------------------------------------------------------------------------------------
# 1. Sync overhead against gluon.Trainer


def throughput_from_step_ends(step_ends, samples_per_step, warmup):
    ends = step_ends[warmup:]
    return samples_per_step * (len(ends) - 1) / (ends[-1] - ends[0])


def run_ps_job(group, worker_argv, num_workers, timeout):
    main = os.path.join(ROOT, "main.py")
    workers = start_ps_job(group, [main, "-m", "sync"], [worker_argv] * num_workers)
    deadline = time.monotonic() + timeout
    while any(w.poll() is None for w in workers):
        failed = group.failed()
        if failed or time.monotonic() > deadline:
            detail = f"{failed.name} exited {failed.poll()}:\n{tail(failed.output, 10)}" if failed else "timeout"
            raise RuntimeError(f"benchmark job failed ({detail})")
        time.sleep(0.2)
    if any(w.poll() != 0 for w in workers):
        raise RuntimeError(f"benchmark job failed; see {group.out_dir}")
    group.wait(group.procs, 30)


def trainer_throughput(network, iters, warmup, workdir):
    out = os.path.join(workdir, "trainer-steps.json")
    argv = ["-m", "bench.trainer_worker", "-n", network, *DATA, "--iters", str(iters),
            "--out", out]
    with ProcessGroup(os.path.join(workdir, "trainer")) as group:
        run_ps_job(group, argv, 2, timeout=600)
    with open(out) as f:
        steps = json.load(f)
    return 2 * throughput_from_step_ends(steps["step_ends"], steps["batch_size"], warmup)


def our_sync_throughput(network, iters, warmup, workdir):
    logs = os.path.join(workdir, "ours")
    argv = [os.path.join(ROOT, "main.py"), "-m", "sync", "-n", network, *DATA, "-c", "1", "--max-iters", str(iters),
            "-e", "0", "-ld", logs, "--node-name", "node"]
    with ProcessGroup(os.path.join(workdir, "ours-processes")) as group:
        run_ps_job(group, argv, 2, timeout=600)
    folder = sorted(glob.glob(os.path.join(logs, "node", "*-rank0")))[0]
    records = runlog.DeviceLog(folder).ordered()[:-1]  # rank 0 evaluates in the last iteration; the Trainer run does not
    return 2 * throughput_from_step_ends([r["total_time"] for r in records], records[0]["num_samples"], warmup)


def with_one_retry(measure, network, iters, warmup, run_dir):
    """A ps-lite job on a loaded machine occasionally fails to start; one failure is logged and run again."""
    try:
        return measure(network, iters, warmup, run_dir)
    except RuntimeError as err:
        log.warning("%s failed, running it again: %s", measure.__name__, err)
        return measure(network, iters, warmup, run_dir + "-again")


def sync_overhead(cfg, workdir, earlier):
    rows = []
    for network, iters in cfg["trainer_iters"].items():
        ratios, ours_all, theirs_all = [], [], []
        for repeat in range(cfg["repeats"]):
            run_dir = os.path.join(workdir, f"sync-{network}-{repeat}")
            theirs = with_one_retry(trainer_throughput, network, iters, cfg["warmup"], run_dir + "-trainer")
            ours = with_one_retry(our_sync_throughput, network, iters, cfg["warmup"], run_dir + "-ours")
            ratios.append(ours / theirs)
            ours_all.append(ours)
            theirs_all.append(theirs)
            log.info("sync vs Trainer, %s, repeat %d: %.0f vs %.0f samples/s", network, repeat, ours, theirs)
        rows.append({"network": network, "ours": statistics.median(ours_all),
                     "trainer": statistics.median(theirs_all), "ratio": statistics.median(ratios),
                     "ratios": ratios})
    return rows


# ------------------------------------------------------------------------------------------------
# 2. Efficiency under heterogeneity, 3. time to accuracy, 5. traffic


def standalone_throughputs(slowdowns, seconds, workdir):
    """Each worker's samples/s alone on its slowdown, all running at the same time."""
    try:
        return limit.concurrent_standalone(slowdowns, seconds, workdir, ["-n", "lenet", *DATA])
    except limit.LimitFailed as error:
        raise RuntimeError(str(error))


def launch(modes, profile, seconds, workdir, launcher_options=(), network="lenet", eval_every=EVAL_EVERY,
           worker_options=()):
    """Summaries of the modes run by launch.py; eval_every 0: rank 0 evaluates once, at the end."""
    logs = os.path.join(workdir, "logs")
    devices = ",".join(["cpu"] * len(profile.split(",")))
    argv = [PY, os.path.join(ROOT, "launch.py"), "--modes", ",".join(modes), "-n", network, *DATA,
            "--devices", devices, "--slowdown", profile, "--max-time", str(seconds), "-ld", logs,
            "--progress-every", "1000", "--no-figures", *launcher_options, "--", "-e", str(eval_every),
            *worker_options]
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"launch.py failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    attacked = "--byzantine" in launcher_options
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


def whole_step_bound(step_times):
    """The efficiency ESync's rounds allow at the workers' own step times if aggregating and asking the state
    server cost nothing: a round lasts the slowest step, and worker i fits floor(slowest / its step) steps in it."""
    steps = [w["step_seconds"] for w in step_times]
    slowest = max(steps)
    return sum(int(slowest / c + 1e-9) for c in steps) / slowest / sum(1 / c for c in steps)


def policy_row(variant):
    """The heterogeneity table's row of an ESync variant (training/esync_variants.py): 'esync' for the default
    policy, 'esync-plan', 'esync-adaptive-overlap', ..."""
    return "esync" if variant == config.default("esync_policy") else esync_variants.PREFIX + variant


def runs_with_policies(modes, variants, profile, seconds, workdir, eval_every=EVAL_EVERY, launcher_options=()):
    """The modes' summaries, plus one row per further ESync variant ('esync-plan', ...)."""
    summaries = launch(modes, profile, seconds, workdir, launcher_options, eval_every=eval_every)
    for variant in variants:
        launcher_flags, worker_flags = esync_variants.flags(variant)
        summaries[policy_row(variant)] = launch(["esync"], profile, seconds, os.path.join(workdir, variant),
                                                [*launcher_flags, *launcher_options], eval_every=eval_every,
                                                worker_options=worker_flags)["esync"]
    return summaries


def devices_of(summary):
    return [d for node in summary["devices"].values() for d in node.values()]


def accuracy_at(summary, budget):
    points = [(t, a) for device in devices_of(summary) for _, t, a in device.get("accuracy_points", [])]
    before = [a for t, a in sorted(points) if t <= budget]
    return before[-1] if before else None


def traffic_per_worker(summary):
    """Bytes/s each worker sends, as it logged them; None when the workers send nothing over a network (Hogwild!)."""
    rates = [d["sent_bytes"] / d["elapsed_time"] for d in devices_of(summary) if d["sent_bytes"] is not None]
    return statistics.mean(rates) if rates else None


def heterogeneity(cfg, workdir, earlier):
    rows = []
    links = cfg.get("links", [])
    for profile in cfg["profiles"]:
        slowdowns = [float(f) for f in profile.split(",")]
        modes = cfg["modes"] + (cfg["accuracy_profile_modes"] if profile == cfg["accuracy_profile"] else [])
        run_dir = os.path.join(workdir, "profile-" + profile.replace(",", "-"))
        limit = sum(standalone_throughputs(slowdowns, cfg["seconds"], run_dir))
        # Throughput runs evaluate only at the end, like the standalone runs they are compared with: on a machine
        # with fewer cores than processes, inline evaluation would take the cores from training.
        summaries = runs_with_policies(modes, cfg["esync_policies"], profile, cfg["seconds"], run_dir, eval_every=0,
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
                "whole_step_bound": whole_step_bound(run["step_times"]) if mode.startswith("esync") else None,
                "check_ready": statistics.mean(w["check_ready"] for w in run["step_times"]),
                "links": run.get("links"),
            })
            log.info("%s on %s: %.0f samples/s, efficiency %.2f", mode, profile, run["cluster_throughput"],
                     run["cluster_throughput"] / limit)
    return rows


# ------------------------------------------------------------------------------------------------
# 6. Byzantine workers


SIGN_FLIP = ["--byzantine", "1", "--attack", "signflip", "--attack-scale", "10"]


def byzantine(cfg, workdir, earlier):
    """Accuracy with the first worker of the profile flipping its update's sign (x10): plain sync averaging vs
    Zeno's validator, beside a Zeno run without the attacker."""
    runs = {}
    for with_attack, folder, options in ((False, "clean", ()), (True, "attack", SIGN_FLIP)):
        modes = [mode for mode, attacked in cfg["byzantine_runs"] if attacked == with_attack]
        if modes:
            summaries = launch(modes, cfg["byzantine_profile"], cfg["seconds"], os.path.join(workdir, folder), options)
            runs.update({(mode, with_attack): run for mode, run in summaries.items()})
    rows = []
    for (mode, with_attack), run in runs.items():
        workers = devices_of(run)
        honest = [d for d in workers if not d.get("byzantine")]
        rows.append({
            "mode": mode, "attacker": with_attack, "final_accuracy": run["final_accuracy"],
            "samples_per_s": run["cluster_throughput"],
            "attacker_layers_accepted": _share_accepted([d for d in workers if d.get("byzantine")]),
            "honest_layers_accepted": _share_accepted(honest),
        })
        log.info("%s%s: final accuracy %s", mode, " with a sign flipper" if with_attack else "", run["final_accuracy"])
    return rows


def _share_accepted(devices):
    judged = [d for d in devices if "accepted_layers" in d]
    total = sum(d["accepted_layers"] + d["rejected_layers"] for d in judged)
    return sum(d["accepted_layers"] for d in judged) / total if total else None


# ------------------------------------------------------------------------------------------------
# 7. Network: hosts as namespaces, rate-limited links


def network_dimension(cfg, workdir, earlier):
    """Per network, link rate, number of workers and transport (the parameter server with 1 or 2 servers, or an MPI
    collective): each mode's throughput, the bytes each worker logged per round against the textbook's figure, and
    the load of the links that carry the aggregation; {"skipped": reason} when this machine or user cannot make
    namespaces."""
    prefix = netns.unique_prefix()
    try:
        netns.check_available(prefix)
    except netns.NetnsUnavailable as error:
        log.warning("network section skipped: %s", error)
        return {"skipped": str(error)}
    rows = []
    for network, rate, workers, collective, servers, run_modes in cfg["network_runs"]:
        run_dir = os.path.join(workdir, f"net-{network}-{rate}-{workers}-{collective}-{servers}")
        options = ["--hosts", "netns", "--bandwidth", rate, "-s", str(servers), "--collective", collective,
                   "--netns-prefix", prefix]
        summaries = launch(list(run_modes), ",".join(["1"] * workers), cfg["network_seconds"][network], run_dir,
                           options, network, eval_every=0)
        for mode, run in summaries.items():
            mode_folder = os.path.join(run_dir, "logs", network, mode)
            rows.append(network_row(network, rate, workers, collective, servers, mode, run, read_links(mode_folder),
                                    sent_per_round(mode_folder)))
    return {"rows": rows}


def read_links(mode_dir):
    with open(os.path.join(mode_dir, "processes", "network.json")) as f:
        return json.load(f)


def transport_label(collective, servers):
    return f"ps ×{servers}" if collective == collectives.PS else collective


def textbook_bytes(collective, workers, model_bytes):
    """What each worker sends per aggregation as textbooks count it: the parameter server's M, or the collective's."""
    if collective == collectives.PS:
        return model_bytes
    return traffic.textbook(collective, workers, model_bytes)


def sent_per_round(mode_folder):
    """The bytes a worker sends in a round, as the workers logged them: the mean over workers and rounds, leaving
    out each worker's first round (rank 0 also initialises the servers or broadcasts then) where there are more."""
    per_worker = []
    for _, _, folder in runlog.device_folders(mode_folder):
        records = runlog.DeviceLog(folder).ordered()
        steady = records[1:] or records
        per_worker.append(statistics.mean(r[runlog.SENT_BYTES] for r in steady))
    return statistics.mean(per_worker)


def network_row(network, rate, workers, collective, servers, mode, run, links, sent):
    # The links that carry the aggregation: the parameter servers', or over MPI the workers' own.
    prefix = "w" if collectives.uses_mpi(collective) else "ps"
    carriers = [link for name, link in links["links"].items() if name.startswith(prefix)]
    busiest = max(max(link["peak_rx_bytes_per_s"], link["peak_tx_bytes_per_s"]) * 8 / link["rate_bps"]
                  for link in carriers)
    row = {"network": network, "rate": rate, "workers": workers, "collective": collective, "servers": servers,
           "mode": mode, "samples_per_s": run["cluster_throughput"], "rounds": run.get("num_rounds"),
           "rounds_per_s": run.get("rounds_per_second"), "final_accuracy": run["final_accuracy"],
           "sent_per_round": sent,
           "textbook_per_round": textbook_bytes(collective, workers, run["param_bytes"]),
           "busiest_link_utilisation": busiest,
           "ps_bytes": [link["rx_bytes"] + link["tx_bytes"] for name, link in links["links"].items()
                        if name.startswith("ps")]}
    log.info("%s at %s, %d workers, %s, %s: %.0f samples/s, %.2f rounds/s, busiest link at %.0f%% of its rate",
             network, rate, workers, transport_label(collective, servers), mode, row["samples_per_s"],
             row["rounds_per_s"] or 0, 100 * busiest)
    return row


# ------------------------------------------------------------------------------------------------
# 4. State server cost


def apply_latencies(num_workers, calls, workdir):
    """/apply/ round trips of `num_workers` client processes calling at once, as workers do (threads of one process
    would wait for each other's interpreter lock)."""
    with ProcessGroup(os.path.join(workdir, "state-server")) as group:
        port = start_state_server(group)
        with StateClient("127.0.0.1", port) as admin:
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
    with StateClient("127.0.0.1", port) as client:
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
                                  os.path.join(workdir, "policies"), eval_every=0)
        rows = [{"mode": mode, "check_ready": statistics.mean(w["check_ready"] for w in run["step_times"])}
                for mode, run in runs.items()]
    share = {r["mode"]: r["check_ready"] for r in rows}
    return {policy: share[policy_row(policy)] for policy in policies}


def state_server_cost(cfg, workdir, earlier):
    latency = apply_latencies(3, cfg["latency_calls"], workdir)
    return {"workers": 3, **latency, "share": check_ready_shares(cfg, workdir, earlier)}


# ------------------------------------------------------------------------------------------------
# 8. The input pipeline


PIPELINES = ("plain", "augmented in the step", "augmented ahead", "resized crops ahead")


def pipeline_streams(images, labels, batch):
    from data import Augmented, BatchStream, Prefetched, ResizedCropped

    return {"plain": BatchStream(images, labels, batch, seed=1),
            "augmented in the step": Augmented(BatchStream(images, labels, batch, seed=1), seed=2),
            "augmented ahead": Prefetched(Augmented(BatchStream(images, labels, batch, seed=1), seed=2)),
            "resized crops ahead": Prefetched(ResizedCropped(BatchStream(images, labels, batch, seed=1), seed=2))}


def timed_steps(model, trainer, stream, steps):
    """Seconds per step (the batch, forward and backward, the update) over `steps` steps."""
    import mxnet as mx

    start = time.perf_counter()
    for _ in range(steps):
        images, labels = stream.next()
        model.forward_backward(images, labels)
        trainer.step(1)
    mx.nd.waitall()
    return (time.perf_counter() - start) / steps


def input_pipeline(cfg, workdir, earlier):
    """Per network, the median over 3 interleaved blocks of each pipeline's seconds per step, in one process."""
    import mxnet as mx
    import numpy as np
    from mxnet import gluon

    from data import CIFAR10_MEAN, CIFAR10_STD
    from training.model import Model

    batch = cfg["pipeline_batch"]
    rows = []
    for network, steps in cfg["pipeline_networks"].items():
        images = np.random.RandomState(0).randint(0, 256, size=(4 * batch, 3, 32, 32)).astype(np.uint8)
        labels = np.arange(len(images)) % 10
        model = Model(network, [mx.cpu()], (3, 32, 32), normalise=(CIFAR10_MEAN, CIFAR10_STD))
        trainer = gluon.Trainer(model.trainable, "sgd", {"learning_rate": 1e-4, "momentum": 0.9}, kvstore=None)
        streams = pipeline_streams(images, labels, batch)
        timed_steps(model, trainer, streams["plain"], 2)  # warm-up
        blocks = {name: [] for name in PIPELINES}
        for _ in range(3):
            for name in PIPELINES:
                blocks[name].append(timed_steps(model, trainer, streams[name], steps))
        step = {name: statistics.median(times) for name, times in blocks.items()}
        rows.append({"network": network, "batch": batch, "steps": steps, "seconds": step,
                     "ratio": {name: step[name] / step["plain"] for name in PIPELINES}})
    return rows


# ------------------------------------------------------------------------------------------------
# Output


def fmt(value, spec=".2f"):
    return "–" if value is None else format(value, spec)


def markdown(results):
    parts = {"sync_overhead": sync_overhead_markdown, "heterogeneity": heterogeneity_markdown,
             "byzantine": byzantine_markdown, "state_server": state_server_markdown, "network": network_markdown,
             "input_pipeline": input_pipeline_markdown}
    return "\n".join(line for key, part in parts.items() if key in results for line in part(results)) + "\n"


def sync_overhead_markdown(results):
    lines = ["### Sync overhead: ours / gluon.Trainer(kvstore='dist_sync'), 1 server, 2 workers", "",
             "| network | ours (samples/s) | Trainer (samples/s) | ratio (median) |", "|---|---|---|---|"]
    for r in results["sync_overhead"]:
        lines.append(f"| {r['network']} | {r['ours']:.0f} | {r['trainer']:.0f} | {r['ratio']:.2f} |")
    return lines + [""]


def heterogeneity_markdown(results):
    links = sorted({r["links"] for r in results["heterogeneity"] if r.get("links")})
    lines = ["### Heterogeneity (lenet, mnist-5k): efficiency = cluster samples/s / sum of standalone samples/s", "",
             f"Links: {'; '.join(links) or 'loopback (no link limit)'}.", "",
             "busy: share of a worker's time in its own steps (the rest: aggregation, state server, waiting); "
             "whole-step bound: the efficiency ESync's rounds allow at the workers' step times in that run if "
             "aggregating and the state server cost nothing (a round lasts the slowest step; a worker fits whole "
             "steps only).", "",
             "| profile | mode | samples/s | efficiency | SSGD ideal | busy | whole-step bound | time to 85% (s) "
             "| accuracy at budget | final accuracy | push = pull (kB/s per worker) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results["heterogeneity"]:
        traffic = None if r["bytes_per_s_per_worker"] is None else r["bytes_per_s_per_worker"] / 1e3
        lines.append(f"| {r['profile']} | {r['mode']} | {r['samples_per_s']:.0f} | {r['efficiency']:.2f} | "
                     f"{r['ideal_sync_efficiency']:.2f} | {fmt(r['busy'], '.2f')} | "
                     f"{fmt(r['whole_step_bound'], '.2f')} | {fmt(r['time_to_85'], '.1f')} | "
                     f"{fmt(r['accuracy_at_budget'], '.3f')} | {fmt(r['final_accuracy'], '.3f')} | "
                     f"{fmt(traffic, '.0f')} |")
    return lines + [""]


def byzantine_markdown(results):
    workers = len(results["config"]["byzantine_profile"].split(","))
    lines = [f"### Byzantine workers: {workers} workers (lenet, mnist-5k), the first one sends -10 x its update", "",
              "| mode | attacker | final accuracy | samples/s | attacker's layer updates accepted "
              "| honest layer updates accepted |", "|---|---|---|---|---|---|"]
    for r in results["byzantine"]:
        lines.append(f"| {r['mode']} | {'yes' if r['attacker'] else 'no'} | {fmt(r['final_accuracy'], '.3f')} | "
                     f"{r['samples_per_s']:.0f} | {fmt(r['attacker_layers_accepted'], '.0%')} | "
                     f"{fmt(r['honest_layers_accepted'], '.0%')} |")
    return lines + [""]


def input_pipeline_markdown(results):
    lines = ["### Input pipeline: a step on CIFAR-10-shaped batches (ms; ratio to no augmentation)", "",
             "| network | batch | " + " | ".join(PIPELINES) + " |", "|---|---|" + "---|" * len(PIPELINES)]
    for row in results["input_pipeline"]:
        cells = [f"{1000 * row['seconds'][p]:.1f} ({row['ratio'][p]:.2f})" for p in PIPELINES]
        lines.append(f"| {row['network']} | {row['batch']} | " + " | ".join(cells) + " |")
    return lines + [""]


def state_server_markdown(results):
    cost = results["state_server"]
    return [f"### State server: /apply/ with {cost['workers']} concurrent clients", "",
            f"p50 {cost['p50_ms']:.2f} ms, p99 {cost['p99_ms']:.2f} ms; share of a lenet worker's step time: "
            + ", ".join(f"{p} policy {100 * s:.1f}%" for p, s in cost["share"].items()), ""]


def network_markdown(results):
    section = results["network"]
    lines = ["### Network: hosts as namespaces, every link limited to the rate (tc tbf)", ""]
    if "skipped" in section:
        return lines + [f"Skipped: {section['skipped']}.", ""]
    lines += ["Workers at the same speed. Sent per round: the bytes each worker logged sending per round (mean over "
              "workers and rounds, each worker's first round left out), beside the textbook's figure for one "
              "aggregation of the model (parameter "
              "server M; ring and binary blocks 2(N−1)/N·M; butterfly log2(N)·M). Busiest link: the highest rate "
              "any link carrying the aggregation (the parameter servers', or over MPI the workers') reached in a "
              "2 s window, in either direction, as a share of its limit. Split: each server's share of the bytes.",
              "",
              "| network | link | workers | transport | mode | samples/s | rounds/s | sent per round (MB) "
              "| textbook (MB) | busiest link | split | final accuracy |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in section["rows"]:
        total = sum(r["ps_bytes"])
        split = " / ".join(f"{b / total:.0%}" for b in r["ps_bytes"]) if r["servers"] > 1 and total else "–"
        lines.append(f"| {r['network']} | {r['rate']} | {r['workers']} | "
                     f"{transport_label(r['collective'], r['servers'])} | {r['mode']} | {r['samples_per_s']:.0f} | "
                     f"{fmt(r['rounds_per_s'], '.2f')} | {r['sent_per_round'] / 1e6:.3f} | "
                     f"{r['textbook_per_round'] / 1e6:.3f} | {r['busiest_link_utilisation']:.0%} | {split} | "
                     f"{fmt(r['final_accuracy'], '.3f')} |")
    return lines + [""]


def check_links(cfg, only):
    """UsageError unless the heterogeneity section's launcher runs accept the link options (and this machine can
    make the namespaces they ask for); the other sections keep their own links."""
    if cfg["links"] == experiment.passed_on(experiment.build_parser().parse_args(["--modes", "sync"])):
        return
    if only != "heterogeneity":
        raise UsageError("the link and aggregation options apply to the heterogeneity section: add --only "
                         "heterogeneity")
    chosen = [m for m in dict.fromkeys(cfg["modes"] + cfg["accuracy_profile_modes"]) if m in modes.cluster_names()]
    run = experiment.parse(["--modes", ",".join(chosen), "--slowdown", cfg["profiles"][0], "--max-time", "1",
                            *cfg["links"]])
    if run.hosts == "netns":
        try:
            netns.check_available(run.netns_prefix)
        except netns.NetnsUnavailable as error:
            raise UsageError(str(error))


# Each section is f(cfg, workdir, earlier) -> its results; `earlier` holds the sections that ran before it.
SECTIONS = {"sync_overhead": sync_overhead, "heterogeneity": heterogeneity, "state_server": state_server_cost,
            "byzantine": byzantine, "network": network_dimension, "input_pipeline": input_pipeline}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny durations: checks that every section is produced")
    p.add_argument("--out", default=os.path.join(ROOT, "bench"), help="folder for results.json and results.md")
    p.add_argument("--only", choices=list(SECTIONS), help="run one section; writes results-<section>.json/md")
    link_options = p.add_argument_group("the heterogeneity section's links and aggregation (launch.py's options)")
    experiment.add_aggregation_options(link_options)
    experiment.add_host_options(link_options)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", datefmt="%H:%M:%S")
    cfg = dict(QUICK if args.quick else FULL, links=experiment.passed_on(args))
    unknown = unknown_modes(cfg)
    if unknown:
        print(f"run.py: error: not a mode that trains on every device of a profile: {', '.join(unknown)}",
              file=sys.stderr)
        return 2
    try:
        check_links(cfg, args.only)
    except UsageError as error:
        print(f"run.py: error: {error}", file=sys.stderr)
        return 2
    started = time.time()
    sections = [args.only] if args.only else list(SECTIONS)
    results = {"config": cfg}
    with tempfile.TemporaryDirectory(prefix="esync-bench-") as workdir:
        for name in sections:
            results[name] = SECTIONS[name](cfg, workdir, results)
    results["seconds"] = time.time() - started
    os.makedirs(args.out, exist_ok=True)
    stem = f"results-{args.only}" if args.only else "results"
    write_json(os.path.join(args.out, f"{stem}.json"), results)
    table = markdown(results)
    with open(os.path.join(args.out, f"{stem}.md"), "w") as f:
        f.write(table)
    print(table)
    log.info("took %.0f s; wrote %s", results["seconds"], os.path.join(args.out, stem + ".{json,md}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
