"""Table 1 as text: each split's table, ESync's claims in words with the test behind each, ESync beside the paper's
own figures, and each mode's time to several accuracies; paper.json and table1.md written."""
import os

from analysis import metrics, significance, timing
from analysis.paper import (
    COLUMNS,
    LATER_RIVALS,
    PAPER_FIGURE_4,
    PAPER_SPEEDUPS,
    RESULTS_FILE,
    SPLIT_NAMES,
    TABLE_FILE,
    display,
    format_statistic,
)
from analysis.tables import markdown_table
from training.files import write_json, write_text


def split_table(table, target, esync_policy=None):
    headers = ["mode"] + [title.format(target=target) for _, title, _ in COLUMNS]
    rows = []
    for mode, stats in table.items():
        name = display(mode, esync_policy)
        rows.append([name] + [format_statistic(stats[key], spec) if key in stats else "-"
                              for key, _, spec in COLUMNS])
    return markdown_table(headers, rows)


def describe_headline(claims, target, name="ESync"):
    parts = []
    described = (("speedup_vs_ssgd", "{} SSGD's speed to " + f"{target:g}", ".1f", "×"),
                 ("samples_per_s_vs_ssgd", "{} SSGD's samples/s", ".1f", "×"),
                 ("traffic_vs_asgd", "{} of ASGD's traffic", ".2f", ""))
    for key, text, spec, unit in described:
        if key == "speedup_vs_ssgd" and key in claims and claims[key]["mean"] is None:
            parts.append(f"no speedup to {target:g} against SSGD: in no repeat did it reach {target:g} where SSGD "
                         "gave a time or a bound")
        elif key in claims:
            parts.append(text.format(format_statistic(claims[key], spec, unit)))
    if "accuracy_vs_ssgd" in claims:
        parts.append(describe_accuracy_against_ssgd(claims["accuracy_vs_ssgd"]))
    if "accuracy_compared" in claims:
        parts.append(describe_accuracy(claims))
    return f"{name}: " + ", ".join(parts) if parts else ""


def rivals_table(claims, target, name="ESync"):
    """Per rival of LATER_RIVALS that ran: in how many repeats it reached the target after ESync (or never), whose
    lead the test supports and its p ("" where none ran)."""
    rows = []
    for rival, rival_name in LATER_RIVALS.items():
        count = claims.get(f"{rival}_later")
        if count is None:
            continue
        lead = {"esync": name, "rival": rival_name, None: "neither: a tie within the spread"}[count.get("holds")]
        rows.append([rival_name, f"{count['later']} of {count['of']}" if count["of"] else "neither reached it",
                     lead, f"{count['p_value']:.2g}"])
    if not rows:
        return ""
    return (f"{name} against each rival, time to {target:g} (p: {significance.TIME_TEST_NAME}):\n\n"
            + markdown_table(["rival", "repeats in which it reached the target later than ESync, or never",
                              "whose lead holds", "p"], rows))


def paper_figure_4():
    """The paper's samples/s against SSGD's and ASGD's and traffic against ASGD's, as table cells."""
    return [f"{PAPER_FIGURE_4[key]:g}{'' if key == 'traffic_vs_asgd' else '×'}"
            for key in ("samples_per_s_vs_ssgd", "samples_per_s_vs_asgd", "traffic_vs_asgd")]


def beside_the_paper(headline, network, esync_policy=None):
    """A table of each ESync row's speedup over SSGD, samples/s against SSGD and ASGD and traffic against ASGD, the
    paper's figure in the first row ("" without an ESync row)."""
    paper_row = ["the paper", f"{PAPER_SPEEDUPS[network]}×" if network in PAPER_SPEEDUPS else "not in its Table 1",
                 *paper_figure_4()]
    rows = [[display(row, esync_policy), *(format_statistic(claims[key], spec, unit) if key in claims else "-"
                                           for key, spec, unit in (("speedup_vs_ssgd", ".1f", "×"),
                                                                   ("samples_per_s_vs_ssgd", ".1f", "×"),
                                                                   ("samples_per_s_vs_asgd", ".1f", "×"),
                                                                   ("traffic_vs_asgd", ".2f", "")))]
            for row, claims in headline.items() if claims]
    if not rows:
        return ""
    return markdown_table(["", "speedup over SSGD to the target", "samples/s / SSGD's", "samples/s / ASGD's",
                           "traffic / ASGD's"], [paper_row] + rows)


def describe_lead(holds, rival_name):
    return {"esync": "ESync's lead holds", "rival": f"{rival_name}'s lead holds",
            None: "a tie within the repeats' spread"}[holds]


def describe_accuracy_against_ssgd(claim):
    return (f"final accuracy {format_statistic(claim['difference'], '+.3f')} against SSGD's after the same training "
            f"time ({describe_lead(claim['holds'], 'SSGD')}, {significance.TEST_NAME}: p = {claim['p_value']:.2g})")


def describe_accuracy(claims):
    compared = claims["accuracy_compared"]
    if not compared["levelled"]:
        return (f"final accuracy not compared with sequential SGD's: both curves had levelled off in 0 of "
                f"{compared['of']} repeats")
    return (f"final accuracy {format_statistic(claims['accuracy_minus_sequential'], '+.3f')} against sequential "
            f"SGD's (the mean of each curve's last quarter, in the {compared['levelled']} of {compared['of']} "
            "repeats where both had levelled off)")


def format_report(report):
    target = report["target"]
    lines = [f"# Table 1: {report['network']} on {report['dataset']}, {len(report['repeats'])} repeats "
             f"(seeds {', '.join(map(str, report['seeds']))}), mean ± stddev", "",
             f"Links: {'; '.join(report['links']) or 'not recorded'}.", "",
             f"Devices: {'; '.join(report.get('devices') or []) or 'not recorded'}.", "",
             f"A time or speedup marked ≥ is a lower bound: in some repeats the run (or SSGD's) never reached "
             f"{target:g}, and counts with its training time (a run stopped as diverged, with its budget). Levelled "
             f"off: the curves whose last quarter's mean accuracy was within {metrics.PLATEAU_BAND:g} of the quarter's "
             "before.", ""]
    for split in report["splits"]:
        policy = report.get("esync_policy")
        lines += [f"## {SPLIT_NAMES[split]} data", "", split_table(report["cells"][split], target, policy), ""]
        for row, claims in report["headline"][split].items():
            claim = describe_headline(claims, target, display(row, policy))
            if claim:
                lines += [claim, ""]
            rivals = rivals_table(claims, target, display(row, policy))
            if rivals:
                lines += [rivals, ""]
        beside = beside_the_paper(report["headline"][split], report["network"], policy)
        if split == "iid" and beside:
            lines += ["ESync beside the paper's own figures (its cluster: 4 GPUs, 2 CPUs about 117× slower):", "",
                      beside, ""]
        if report.get("thresholds"):
            lines += [f"Time to each accuracy (s), {SPLIT_NAMES[split]}:", "",
                      thresholds_table(report["thresholds"][split], policy), ""]
    if report.get("command"):
        lines += timing.run_by(report["command"], report.get("wall_seconds"))
    return "\n".join(lines)


def thresholds_table(times, esync_policy=None):
    thresholds = list(next(iter(times.values())))
    rows = [[display(mode, esync_policy)]
            + [format_statistic(by_threshold[t], ".1f") for t in thresholds] for mode, by_threshold in times.items()]
    return markdown_table(["mode"] + [f"to {t}" for t in thresholds], rows)


def write_report(report, out_dir):
    """paper.json and table1.md under out_dir; returns the table's text and the paths."""
    os.makedirs(out_dir, exist_ok=True)
    text = format_report(report)
    paths = [os.path.join(out_dir, RESULTS_FILE), os.path.join(out_dir, TABLE_FILE)]
    write_json(paths[0], report, indent=1)
    write_text(paths[1], text + "\n")
    return text, paths
