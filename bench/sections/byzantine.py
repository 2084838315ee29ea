"""6. Byzantine workers: accuracy with one sign-flipping worker, plain sync averaging against Zeno."""
import os

from analysis.tables import markdown_table
from bench.sections.common import devices_of, fmt, launch, log

SIGN_FLIP = {"byzantine": 1, "attack": "signflip", "attack_scale": 10.0}


def measure(cfg, workdir, earlier):
    """Accuracy with the first worker of the profile flipping its update's sign (x10): plain sync averaging vs
    Zeno's validator, beside a Zeno run without the attacker."""
    runs = {}
    for with_attack, folder, options in ((False, "clean", {}), (True, "attack", SIGN_FLIP)):
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


def markdown(results):
    workers = len(results["config"]["byzantine_profile"].split(","))
    headers = ["mode", "attacker", "final accuracy", "samples/s", "attacker's layer updates accepted",
               "honest layer updates accepted"]
    rows = [[r["mode"], "yes" if r["attacker"] else "no", fmt(r["final_accuracy"], ".3f"),
             f"{r['samples_per_s']:.0f}", fmt(r["attacker_layers_accepted"], ".0%"),
             fmt(r["honest_layers_accepted"], ".0%")] for r in results["byzantine"]]
    return [f"### Byzantine workers: {workers} workers (lenet, mnist-5k), the first one sends -10 x its update", "",
            markdown_table(headers, rows), ""]
