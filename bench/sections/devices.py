"""10. Devices of fixed capacity: on the paper's profile, the fast workers' median step under SSGD and under ESync, the
standalone baseline's step (one fast device alone), and the fast devices' step while every device of the profile
trains alone at the same time without communicating, each device under its CPU quota (training/devices/cpu_quota.py),
in one run; the same with the sleeping slowdown beside it, which CPU quotas replace. Beside them what the quota costs
SSGD and ASGD (samples/s with quotas, whose exchange waits for the backward pass to end, and without, where MXNet
overlaps them) and ESync's slowest over fastest step, against the declared slowdown."""
import os
import statistics

from analysis.metrics import iter_devices
from analysis.tables import markdown_table
from bench.sections.common import fmt, launch, log
from bench.sections.heterogeneity import standalone_throughputs
from launcher import workers
from training import runlog

MODES = ("sync", "esync", "local")


def measure(cfg, workdir, earlier):
    rows = []
    emulations = {"cpu-quota": {}, "sleeping": {"sleeping_slowdown": True}}
    for emulation in cfg["devices_emulations"]:
        options = emulations[emulation]
        folder = os.path.join(workdir, "devices", emulation)
        extra = [m for m in cfg["devices_throughput_modes"] if m not in MODES]
        summaries = launch(list(MODES) + extra, cfg["devices_profile"], cfg["devices_seconds"], folder, options,
                           snapshot_seconds=0)
        # the forward and backward pass: the computation every scheme's step makes the same (SSGD updates in its
        # aggregation, ESync and the standalone baseline in a local update)
        steps = {mode: summaries[mode]["fast_compute_seconds"] for mode in MODES}
        at_once = fast_step_all_at_once(cfg["devices_profile"], cfg["devices_seconds"], folder,
                                        quotas=emulation == "cpu-quota")
        rows.append({"emulation": emulation, "profile": cfg["devices_profile"],
                     "devices": summaries["sync"]["device_emulation"],
                     "fast_step_seconds": steps, "all_at_once_seconds": at_once,
                     "esync_over_sync": steps["esync"] / steps["sync"],
                     "standalone_over_sync": steps["local"] / steps["sync"],
                     "at_once_over_standalone": at_once / steps["local"],
                     "samples_per_s": {m: summaries[m]["cluster_throughput"] for m in cfg["devices_throughput_modes"]},
                     "esync_slow_over_fast": slow_over_fast(summaries["esync"]),
                     "declared_slowdown": max(float(f) for f in workers.parse_factors(cfg["devices_profile"]))})
        log.info("%s: fast steps sync %.1f ms, esync %.1f ms, standalone %.1f ms, all devices at once %.1f ms",
                 emulation, *(1e3 * steps[m] for m in MODES), 1e3 * at_once)
    return rows


def step_ratio_cells(row):
    if row["emulation"] != runlog.CPU_QUOTA:
        return ["–", f"{row['declared_slowdown']:g}", "–"]
    ratio = row["esync_slow_over_fast"]
    return [f"{ratio:.1f}", f"{row['declared_slowdown']:g}", f"{ratio / row['declared_slowdown']:.3f}"]


def slow_over_fast(run):
    """The slowest devices' median forward and backward pass over the fastest's, in one run."""
    steps = {}
    for _, _, device in iter_devices(run["devices"]):
        if device.get("compute_seconds"):
            steps.setdefault(device.get("slowdown") or 1.0, []).append(device["compute_seconds"])
    return statistics.median(steps[max(steps)]) / statistics.median(steps[min(steps)])


def fast_step_all_at_once(profile, seconds, workdir, quotas):
    """The fast devices' median forward and backward pass while every device of `profile` trains alone at the same
    time, without communicating (the concurrent standalone runs), on its quota or with the sleeping slowdown: against
    one fast device alone, what devices computing at once take from each other."""
    slowdowns = [float(f) for f in profile.split(",")]
    standalone_throughputs(slowdowns, seconds, workdir, quotas)
    fastest = min(slowdowns)
    steps = [runlog.median_step_seconds(runlog.DeviceLog(workers.device_folder(workdir, index)).ordered(),
                                        (runlog.FORWARD_BACKWARD,))
             for index, factor in enumerate(slowdowns) if factor == fastest]
    return statistics.median(steps)


def markdown(results):
    rows = [[r["emulation"], r["profile"]] + [fmt(1e3 * r["fast_step_seconds"][m], ".1f") for m in MODES]
            + [fmt(1e3 * r["all_at_once_seconds"], ".1f"), f"{r['esync_over_sync']:.2f}",
               f"{r['standalone_over_sync']:.2f}", f"{r['at_once_over_standalone']:.2f}"] for r in results["devices"]]
    described = sorted({r["devices"] for r in results["devices"] if r.get("devices")})
    return ["### Devices: the fast workers' median forward and backward pass (ms) under SSGD and ESync, the "
            "standalone baseline's, and the fast devices' while every device trains alone at once", "",
            f"Devices as the runs recorded them: {'; '.join(described)}. \"all at once\": every device of the profile "
            "trains alone at the same time, without communicating; its ratio to the standalone baseline (one fast "
            "device alone) is what devices computing at once take from each other.", "",
            markdown_table(["emulation", "profile", "SSGD", "ESync", "standalone", "all at once", "ESync / SSGD",
                            "standalone / SSGD", "all at once / standalone"], rows), "",
            *quota_costs(results["devices"])]


def quota_costs(rows):
    """What the quota costs SSGD and ASGD, and how closely ESync's devices keep their declared slowdown."""
    cells = [[r["emulation"], r["profile"]] + [fmt(r["samples_per_s"].get(m), ".0f") for m in ("sync", "async")]
             + step_ratio_cells(r) for r in rows if "samples_per_s" in r]
    if not cells:
        return []
    return ["SSGD's and ASGD's samples/s under each emulation: under quotas a worker's exchange waits for its backward "
            "pass to end (a process's threads share its quota), without them MXNet overlaps the two. ESync's slowest "
            "device's median forward and backward pass over its fastest's, against the declared slowdown (a sleeping "
            "device sleeps after its pass: the ratio is the quota's alone).", "",
            markdown_table(["emulation", "profile", "SSGD samples/s", "ASGD samples/s", "ESync slow / fast step",
                            "declared", "measured / declared"], cells), ""]
