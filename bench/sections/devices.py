"""10. Devices of fixed capacity: on the paper's profile, the fast workers' median step under SSGD and under ESync, and
the standalone baseline's step, each device under its CPU quota (training/devices/cpu_quota.py), in one run; the same with the
sleeping slowdown beside it, which CPU quotas replace."""
import os

from analysis.tables import markdown_table
from bench.sections.common import fmt, launch, log

MODES = ("sync", "esync", "local")


def measure(cfg, workdir, earlier):
    rows = []
    emulations = {"cpu-quota": {}, "sleeping": {"sleeping_slowdown": True}}
    for emulation in cfg["devices_emulations"]:
        options = emulations[emulation]
        folder = os.path.join(workdir, "devices", emulation)
        summaries = launch(list(MODES), cfg["devices_profile"], cfg["devices_seconds"], folder, options,
                           snapshot_seconds=0)
        # the forward and backward pass: the computation every scheme's step makes the same (SSGD updates in its
        # aggregation, ESync and the standalone baseline in a local update)
        steps = {mode: summaries[mode]["fast_compute_seconds"] for mode in MODES}
        rows.append({"emulation": emulation, "profile": cfg["devices_profile"],
                     "devices": summaries["sync"]["device_emulation"],
                     "fast_step_seconds": steps,
                     "esync_over_sync": steps["esync"] / steps["sync"],
                     "standalone_over_sync": steps["local"] / steps["sync"]})
        log.info("%s: fast steps sync %.1f ms, esync %.1f ms, standalone %.1f ms", emulation,
                 *(1e3 * steps[m] for m in MODES))
    return rows


def markdown(results):
    rows = [[r["emulation"], r["profile"]] + [fmt(1e3 * r["fast_step_seconds"][m], ".1f") for m in MODES]
            + [f"{r['esync_over_sync']:.2f}", f"{r['standalone_over_sync']:.2f}"] for r in results["devices"]]
    described = sorted({r["devices"] for r in results["devices"] if r.get("devices")})
    return ["### Devices: the fast workers' median forward and backward pass (ms) under SSGD and ESync, and the "
            "standalone baseline's", "",
            f"Devices as the runs recorded them: {'; '.join(described)}.", "",
            markdown_table(["emulation", "profile", "SSGD", "ESync", "standalone", "ESync / SSGD",
                            "standalone / SSGD"], rows), ""]
