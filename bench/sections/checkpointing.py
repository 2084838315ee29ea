"""10. Checkpoints to restart from: the launcher's runs with their default checkpoints (every CHECKPOINT_EVERY global
iterations, the newest KEPT_CHECKPOINTS kept) against the same runs without any, samples/s side by side."""
import os
import statistics

from analysis.tables import markdown_table
from bench.sections.common import launch, log
from launcher.commands import CHECKPOINT_EVERY, KEPT_CHECKPOINTS


def measure(cfg, workdir, earlier):
    profile, seconds = cfg["checkpoint_profile"], cfg["checkpoint_seconds"]
    runs = []
    for network, modes in cfg["checkpoint_runs"].items():
        for repeat in range(cfg["repeats"]):
            folder = os.path.join(workdir, "checkpointing", f"{network}-{repeat}")
            bare = launch(modes, profile, seconds, os.path.join(folder, "none"), {"checkpoint_every": 0},
                          network=network, snapshot_seconds=0)
            saving = launch(modes, profile, seconds, os.path.join(folder, "saving"), network=network,
                            snapshot_seconds=0)
            for mode in modes:
                without, with_ = bare[mode]["cluster_throughput"], saving[mode]["cluster_throughput"]
                runs.append({"network": network, "mode": mode, "repeat": repeat, "samples_per_s_without": without,
                             "samples_per_s_with": with_, "ratio": with_ / without,
                             "checkpoints": saving[mode]["num_rounds"] // CHECKPOINT_EVERY})
                log.info("%s %s: %.2f of the samples/s without checkpoints", network, mode, runs[-1]["ratio"])
    return {"runs": runs, "profile": profile, "seconds": seconds, "every": CHECKPOINT_EVERY}


def markdown(results):
    section = results["checkpointing"]
    ratios = {}
    for r in section["runs"]:
        ratios.setdefault((r["network"], r["mode"]), []).append(r)
    rows = []
    for (network, mode), runs in ratios.items():
        values = [r["ratio"] for r in runs]
        rows.append([network, mode, f"{statistics.mean(r['samples_per_s_without'] for r in runs):.0f}",
                     f"{statistics.mean(r['samples_per_s_with'] for r in runs):.0f}",
                     f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})",
                     f"{statistics.mean(r['checkpoints'] for r in runs):.0f}"])
    return [f"### Checkpoints to restart from: every {section['every']} global iterations, the newest "
            f"{KEPT_CHECKPOINTS} kept, against none ({section['profile']}, {section['seconds']:g} s runs)", "",
            "Each pair of runs one after the other; samples/s the mean over the pairs; ratio = with / without, median "
            "(lowest–highest) over the pairs; checkpoints saved per run.", "",
            markdown_table(["network", "mode", "samples/s, none", "samples/s, checkpoints", "ratio", "checkpoints"],
                           rows), ""]
