"""The `validation` block of `launch.py docs` (analysis/doc_tables.py): the same cells taken in real time and on the
virtual clock, side by side."""
import os
import statistics

from analysis import paper, regime_map
from analysis import scheme_names
from analysis.regime_map import cell_name, cells_at_targets, horizon_of
from analysis.tables import markdown_table
from training.files import read_json


def block(folder):
    """The same cells taken in real time (FOLDER/real/regimes.json) and on the virtual clock (FOLDER/virtual/): per
    cell and scheme, each one's median time to the target and whether it lies inside the real runs' spread, and
    whether the schemes' order agrees; then each device's samples/s both ways and the asynchronous schemes'
    staleness."""
    real, simulated = (read_json(os.path.join(folder, kind, regime_map.RESULTS_FILE)) for kind in ("real", "virtual"))
    rows = []
    for (target, cell), (_, twin) in zip(cells_at_targets(real), cells_at_targets(simulated)):
        medians = {}
        for kind, of in (("real", cell), ("virtual", twin)):
            horizon = horizon_of(of)
            medians[kind] = {s: statistics.median(t if reached else horizon for t, reached in n["censored_times"])
                             for s, n in of["schemes"].items() if n["censored_times"]}
        same = same_order(medians["real"], medians["virtual"])
        for scheme in cell["schemes"]:
            numbers, twins = cell["schemes"][scheme], twin["schemes"][scheme]
            rows.append([cell_name(real, cell, clock=False), f"{target:g}", scheme_names.display(scheme),
                         median_text(medians["real"].get(scheme), numbers),
                         median_text(medians["virtual"].get(scheme), twins),
                         inside_text(medians["virtual"].get(scheme), numbers, twins, horizon_of(cell)),
                         "yes" if same else "**no**"])
    walls = [f"{kind} {result['wall_seconds']:.0f} s" for kind, result in (("real", real), ("virtual", simulated))
             if result.get("wall_seconds")]
    return (markdown_table(["cell", "target", "scheme", "median time, real", "median time, virtual",
                            "virtual median inside the real times' range", "same order of the schemes"], rows) + "\n"
            + "\n" + markdown_table(["cell", "scheme", "device", "samples/s, real", "samples/s, virtual",
                                     "virtual / real", "a fast device's local step, ms: real / virtual (ratio)"],
                                    device_rows(real, simulated)) + "\n"
            + staleness_text(real, simulated)
            + (f"\nWall time of the two maps: {', '.join(walls)}.\n" if walls else ""))


def same_order(real, simulated):
    """Whether no two schemes that the real medians order come in the other order on the virtual clock (equal
    medians, as two misses at the budget, order nothing)."""
    return not any(real[a] < real[b] and simulated[a] > simulated[b]
                   for a in real for b in real if a in simulated and b in simulated)


def inside_text(median, numbers, twins, horizon):
    """Whether a virtual median lies within the real repeats' times (a miss counted at the budget); where most
    virtual repeats missed the target, whether a real one missed it too."""
    times = [t if reached else horizon for t, reached in numbers["censored_times"]]
    if median is None or not times:
        return "-"
    if 2 * twins["reached"] < len(twins["censored_times"]):
        return "yes (a miss)" if numbers["reached"] < len(times) else "**no** (a miss)"
    return "yes" if min(times) <= median <= max(times) else "**no**"


def device_rows(real, simulated):
    """Per cell, scheme and device: its mean samples/s in real time and on the virtual clock, and their ratio."""
    rows = []
    for cell, twin in zip(real["cells"], simulated["cells"]):
        for scheme, numbers in cell["schemes"].items():
            twins = twin["schemes"].get(scheme, {})
            for device, rate in numbers.get("device_samples_per_s", {}).items():
                other = twins.get("device_samples_per_s", {}).get(device, {})
                ratio = other["mean"] / rate["mean"] if other.get("mean") and rate.get("mean") else None
                rows.append([cell_name(real, cell, clock=False), scheme_names.display(scheme), device,
                             statistic_text(rate, ".0f"), statistic_text(other, ".0f"),
                             "-" if ratio is None else f"{ratio:.2f}", local_step_text(numbers, twins)])
    return rows


def local_step_text(numbers, twins):
    """A fast device's median local step (its own phases and its question to the rules), real / virtual, in ms."""
    real, virtual = ((of.get("fast_local_step_ms") or {}).get("mean") for of in (numbers, twins))
    return "-" if not (real and virtual) else f"{real:.1f} / {virtual:.1f} ({real / virtual:.2f})"


def statistic_text(stat, spec):
    return paper.format_statistic(stat, spec) if stat else "-"


def staleness_text(real, simulated):
    """The asynchronous schemes' staleness, median and 90th percentile of the rounds, real against virtual."""
    rows = []
    for cell, twin in zip(real["cells"], simulated["cells"]):
        for scheme, numbers in cell["schemes"].items():
            twins = twin["schemes"].get(scheme, {})
            if (numbers.get("staleness_median") or {}).get("n"):
                rows.append([cell_name(real, cell, clock=False), scheme_names.display(scheme),
                             *(statistic_text(of.get(key), ".1f") for of in (numbers, twins)
                               for key in ("staleness_median", "staleness_p90"))])
    if not rows:
        return ""
    return "\n" + markdown_table(["cell", "scheme", "staleness median, real", "p90, real", "median, virtual",
                                  "p90, virtual"], rows) + "\n"


def median_text(median, numbers):
    if median is None:
        return "not run"
    return f"{median:.1f} s ({numbers['reached']} of {len(numbers['censored_times'])} reached)"
