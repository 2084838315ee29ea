"""1. Sync overhead: our sync mode against gluon.Trainer(kvstore='dist_sync'), same network, batch, data and
cluster (1 server, 2 workers), the update in the same place: on the servers (MXNet's default; ours with
--update-on-servers), or on each worker from the pulled sums (update_on_kvstore=False; ours by default). Then our
async against the Trainer on dist_async (the servers apply each gradient as it comes, in both). All alternate
within a repeat."""
import glob
import json
import os
import statistics
import time

from analysis.tables import markdown_table
from bench.sections.common import DATA_FLAGS, log
from launcher.cluster import ROOT, ProcessGroup, start_ps_job, tail
from training import runlog


def throughput_from_step_ends(step_ends, samples_per_step, warmup):
    ends = step_ends[warmup:]
    return samples_per_step * (len(ends) - 1) / (ends[-1] - ends[0])


def run_ps_job(group, worker_argv, num_workers, timeout, mode="sync"):
    main = os.path.join(ROOT, "main.py")
    workers = start_ps_job(group, [main, "-m", mode], [worker_argv] * num_workers)
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


def trainer_throughput(network, iters, warmup, workdir, update_on_workers=False, kvstore="dist_sync"):
    out = os.path.join(workdir, "trainer-steps.json")
    argv = ["-m", "bench.trainer_worker", "-n", network, *DATA_FLAGS, "--iters", str(iters),
            "--out", out, "--kvstore", kvstore] + (["--update-on-workers"] if update_on_workers else [])
    with ProcessGroup(os.path.join(workdir, "trainer")) as group:
        run_ps_job(group, argv, 2, timeout=600, mode="async" if kvstore == "dist_async" else "sync")
    with open(out) as f:
        steps = json.load(f)
    return 2 * throughput_from_step_ends(steps["step_ends"], steps["batch_size"], warmup)


def our_sync_throughput(network, iters, warmup, workdir, mode="sync", flags=()):
    logs = os.path.join(workdir, "ours")
    argv = [os.path.join(ROOT, "main.py"), "-m", mode, "-n", network, *DATA_FLAGS, "-c", "1",
            "--max-iters", str(iters), "-e", "0", "-ld", logs, "--node-name", "node", *flags]
    with ProcessGroup(os.path.join(workdir, "ours-processes")) as group:
        run_ps_job(group, argv, 2, timeout=600, mode=mode)
    # The worker that trained longest: under ASGD the first to reach --max-iters stops the others with it.
    # Its last round is left out: rank 0 evaluates in it, and the Trainer run does not.
    folders = sorted(glob.glob(os.path.join(logs, "node", "*-worker*")))
    records = max((runlog.DeviceLog(folder).ordered()[:-1] for folder in folders), key=len)
    return 2 * throughput_from_step_ends([r["total_time"] for r in records], records[0]["num_samples"], warmup)


def ours_servers_updating(network, iters, warmup, workdir):
    return our_sync_throughput(network, iters, warmup, workdir, flags=["--update-on-servers"])


def workers_updating(network, iters, warmup, workdir):
    return trainer_throughput(network, iters, warmup, workdir, update_on_workers=True)


def trainer_async(network, iters, warmup, workdir):
    return trainer_throughput(network, iters, warmup, workdir, kvstore="dist_async")


def our_async(network, iters, warmup, workdir):
    return our_sync_throughput(network, iters, warmup, workdir, mode="async")


# result key: how it is measured, in the order they run within a repeat
MEASURED = {"trainer": trainer_throughput, "ours_servers_update": ours_servers_updating,
            "trainer_workers_update": workers_updating, "ours": our_sync_throughput,
            "trainer_async": trainer_async, "ours_async": our_async}
# ratio key: (ours, the baseline); "ratio": each as the user gets it, ours and MXNet's defaults
RATIOS = {"ratio": ("ours", "trainer"), "ratio_servers_update": ("ours_servers_update", "trainer"),
          "ratio_workers_update": ("ours", "trainer_workers_update"), "ratio_async": ("ours_async", "trainer_async")}


def with_one_retry(measure, network, iters, warmup, run_dir):
    """A ps-lite job on a loaded machine occasionally fails to start; one failure is logged and run again."""
    try:
        return measure(network, iters, warmup, run_dir)
    except RuntimeError as err:
        log.warning("%s failed, running it again: %s", measure.__name__, err)
        return measure(network, iters, warmup, run_dir + "-again")


def measure(cfg, workdir, earlier):
    rows = []
    for network, iters in cfg["trainer_iters"].items():
        runs = {key: [] for key in MEASURED}
        for repeat in range(cfg["repeats"]):
            for key, how in MEASURED.items():
                run_dir = os.path.join(workdir, f"sync-{network}-{repeat}-{key}")
                runs[key].append(with_one_retry(how, network, iters, cfg["warmup"], run_dir))
            log.info("sync vs Trainer, %s, repeat %d: servers update %.0f vs %.0f, workers update %.0f vs %.0f "
                     "samples/s; async %.0f vs %.0f", network, repeat,
                     *(runs[key][-1] for key in ("ours_servers_update", "trainer", "ours", "trainer_workers_update",
                                                 "ours_async", "trainer_async")))
        row = {"network": network, **{key: statistics.median(values) for key, values in runs.items()}}
        for ratio, (ours, baseline) in RATIOS.items():
            row[ratio + "s"] = [a / b for a, b in zip(runs[ours], runs[baseline])]
            row[ratio] = statistics.median(row[ratio + "s"])
        rows.append(row)
    return rows


# ratio key: (ours, the Trainer), as the table names them
RATIO_NAMES = {"ratio": ("SSGD (each worker updates)", "dist_sync, MXNet's default (the servers update)"),
               "ratio_servers_update": ("SSGD --update-on-servers", "dist_sync, MXNet's default (the servers update)"),
               "ratio_workers_update": ("SSGD (each worker updates)", "dist_sync, update_on_kvstore=False"),
               "ratio_async": ("ASGD", "dist_async")}


def markdown(results):
    rows = []
    for r in results["sync_overhead"]:
        for ratio, (ours, baseline) in RATIOS.items():
            if ratio not in r:  # a section from before this comparison was measured
                continue
            repeats = ", ".join(f"{x:.2f}" for x in r.get(ratio + "s", []))
            rows.append([r["network"], *RATIO_NAMES[ratio], f"{r[ours]:.0f}", f"{r[baseline]:.0f}",
                         f"**{r[ratio]:.2f}**" + (f" ({repeats})" if repeats else "")])
    return ["### Sync overhead: ours / gluon.Trainer, 1 server, 2 workers", "",
            "Samples/s, medians of the repeats; ratios: the median of each repeat's ratio (each repeat's).", "",
            markdown_table(["network", "ours", "gluon.Trainer on", "ours (samples/s)", "Trainer (samples/s)",
                            "ours / Trainer"], rows), ""]
