"""The `beside-paper` block of `launch.py docs` (analysis/doc_tables.py): ESync against SSGD, ASGD and one fast device
beside the paper's own figures."""
import os
import statistics

from analysis import paper, paper_text, regime_map, significance
from analysis import scheme_names
from analysis.regime_map import cell_name, cells_at_targets
from analysis.tables import markdown_table
from training import modes
from training.files import read_json


def beside_paper_block(*folders):
    """Per folder's cell, target and ESync configuration: its speedup over SSGD and over one fast device (the ratio
    of their median times with its paired 95 % interval, and the exact test's p), samples/s against SSGD's and
    ASGD's and traffic against ASGD's (means of the repeats' paired ratios), the paper's own figures first."""
    results = [read_json(os.path.join(folder, regime_map.RESULTS_FILE)) for folder in folders]
    networks = sorted({result["network"] for result in results})
    speedups = ", ".join(f"{n}: {paper.PAPER_SPEEDUPS[n]}×" if n in paper.PAPER_SPEEDUPS else f"{n} not in its Table 1"
                         for n in networks)
    rows = [["the paper", "0.8", "–", speedups, "–", *paper_text.paper_figure_4()]]
    for result, (target, cell) in ((r, found) for r in results for found in cells_at_targets(r)):
        schemes = cell["schemes"]
        for scheme in (s for s in schemes if scheme_names.mode_of(s)[0] == modes.ESYNC):
            rows.append([cell_name(result, cell), f"{target:g}", scheme_names.display(scheme),
                         speedup_text(schemes, paper.BASELINE, scheme), speedup_text(schemes, modes.STANDALONE, scheme),
                         paired_ratio_text(schemes, scheme, paper.BASELINE, samples_per_s),
                         paired_ratio_text(schemes, scheme, paper.TRAFFIC_BASELINE, samples_per_s),
                         paired_ratio_text(schemes, scheme, paper.TRAFFIC_BASELINE, traffic, unit="")])
    return markdown_table(["cell", "target", "ESync", "speedup over SSGD (95 % interval), p",
                           "over one fast device (95 % interval), p", "samples/s / SSGD's", "samples/s / ASGD's",
                           "traffic / ASGD's"], rows) + "\n"


def speedup_text(schemes, rival, scheme):
    """The rival's median time over the scheme's, its interval (a bound where a miss makes it one) and the test's
    p-value; – where either did not run."""
    theirs, ours = schemes.get(rival, {}).get("censored_times"), schemes[scheme]["censored_times"]
    if theirs and ours and not any(reached for _, reached in ours):
        return "never reached"
    found = significance.ratio_interval(theirs, ours) if theirs and ours else None
    if found is None:
        return "–"
    p = significance.p_value(ours, theirs)
    bound = {"lower": "≥ ", "upper": "≤ "}.get(found["bound"], "")
    both = all(any(not reached for _, reached in times) for times in (theirs, ours))
    return (f"{bound}{found['ratio']:.2f}× ({found['low']:.2f}–{found['high']:.2f}), p = {p:.2g}"
            + (", misses on both sides" if both else ""))


def samples_per_s(numbers):
    return numbers["samples_per_s"]["values"]


def traffic(numbers):
    """Bytes a second through the workers' links, repeat by repeat."""
    return [None if b is None or s is None else b * s
            for b, s in zip(numbers["bytes_per_sample"]["values"], numbers["samples_per_s"]["values"])]


def paired_ratio_text(schemes, scheme, rival, measure, unit="×"):
    """The mean over the repeats of the scheme's measure over the rival's on the same seed."""
    if rival not in schemes:
        return "–"
    ratios = [a / b for a, b in zip(measure(schemes[scheme]), measure(schemes[rival])) if a is not None and b]
    return f"{statistics.fmean(ratios):.2f}{unit}" if ratios else "–"
