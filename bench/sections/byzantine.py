"""6. Byzantine workers: accuracy with one sign-flipping worker, plain sync averaging against Zeno, every run
`repeats` times."""
import os

from analysis import significance
from analysis.tables import markdown_table
from bench.sections.common import (
    devices_of,
    launch,
    leader_text,
    leaders,
    log,
    over_repeats,
    repeats_note,
    repeats_of,
    too_few_repeats,
    with_spread,
)

SIGN_FLIP = {"byzantine": 1, "attack": "signflip", "attack_scale": 10.0}
SPREAD = ("final_accuracy", "samples_per_s", "attacker_layers_accepted", "honest_layers_accepted")


def measure(cfg, workdir, earlier):
    """Accuracy with the first worker of the profile flipping its update's sign (x10): plain sync averaging vs
    Zeno's validator, beside a Zeno run without the attacker; each row the mean of its repeats."""
    repeats = [one_repeat(cfg, os.path.join(workdir, f"repeat-{index + 1}")) for index in range(cfg["repeats"])]
    return [over_repeats(runs, SPREAD) for runs in zip(*repeats)]


def one_repeat(cfg, workdir):
    """A row of one run for every (mode, with the attacker or not), in the order of the table."""
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


def label(row):
    return row["mode"] + (" with the attacker" if row["attacker"] else "")


def markdown(results):
    workers = len(results["config"]["byzantine_profile"].split(","))
    headers = ["mode", "attacker", "final accuracy", "samples/s", "attacker's layer updates accepted",
               "honest layer updates accepted"]
    rows = []
    for r in results["byzantine"]:
        spread = r.get("spread", {})
        rows.append([r["mode"], "yes" if r["attacker"] else "no",
                     with_spread(r["final_accuracy"], spread.get("final_accuracy"), ".3f"),
                     with_spread(r["samples_per_s"], spread.get("samples_per_s"), ".0f"),
                     with_spread(r["attacker_layers_accepted"], spread.get("attacker_layers_accepted"), ".0%"),
                     with_spread(r["honest_layers_accepted"], spread.get("honest_layers_accepted"), ".0%")])
    return [f"### Byzantine workers: {workers} workers (lenet, mnist-5k), the first one sends -10 x its update", "",
            repeats_note(results["byzantine"]), "", markdown_table(headers, rows), "",
            *verdict_lines(results["byzantine"]), ""]


def verdict_lines(rows):
    """The highest final accuracy, and the rows that tie with it, beyond the repeats' spread."""
    return too_few_repeats(rows) or [
        f"- final accuracy: {leader_text(verdict)} ({significance.TEST_NAME} over the repeats)."
        for verdict in leaders(rows, lambda r: "all", label, lambda r: repeats_of(r, "final_accuracy")).values()]
