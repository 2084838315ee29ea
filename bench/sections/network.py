"""7. Network: sync and esync (and async) across network namespaces with rate-limited links (launch.py --hosts
netns), over the parameter server with 1 and 2 servers and over MPI's ring, butterfly and binary blocks: throughput,
bytes per worker per round beside the textbook's figure, the busiest link's load, every run `repeats` times (one
repeat of every run after another, so that a slow spell of the machine falls on all of them alike) and the fastest
transport and mode named only where the repeats support it; skipped with a note where namespaces cannot be made
(needs root)."""
import json
import os
import statistics

from analysis import significance
from analysis.tables import markdown_table
from bench.sections.common import (
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
from launcher import netns
from training import runlog
from training.transport import collectives, traffic

# (collective, servers): one and two parameter servers, then every MPI collective
TRANSPORTS = ((collectives.PS, 1), (collectives.PS, 2)) + tuple((name, 1) for name in collectives.MPI_ALGORITHMS)


def matrix():
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


def measure(cfg, workdir, earlier):
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
    repeats = [one_repeat(cfg, os.path.join(workdir, f"repeat-{index + 1}"), prefix)
               for index in range(cfg["repeats"])]
    return {"rows": [combined(runs) for runs in zip(*repeats)]}


def one_repeat(cfg, workdir, prefix):
    """A row of one run for every (network, rate, workers, transport, mode), in the order of the table."""
    rows = []
    for network, rate, workers, collective, servers, run_modes in cfg["network_runs"]:
        run_dir = os.path.join(workdir, f"net-{network}-{rate}-{workers}-{collective}-{servers}")
        summaries = launch(list(run_modes), ",".join(["1"] * workers), cfg["network_seconds"][network], run_dir,
                           launcher_options(rate, collective, servers, prefix), network, snapshot_seconds=0)
        for mode, run in summaries.items():
            mode_folder = os.path.join(run_dir, "logs", network, mode)
            rows.append(network_row(network, rate, workers, collective, servers, mode, run, read_links(mode_folder),
                                    sent_per_round(mode_folder)))
    return rows


SPREAD = ("samples_per_s", "rounds_per_s", "busiest_link_utilisation", "final_accuracy")  # stddev over the repeats


def combined(runs):
    """One run's row over its repeats: the mean of each number, the stddevs of SPREAD, each repeat's values, and
    the bytes each server carried summed over the repeats."""
    row = over_repeats(runs, SPREAD)
    row["ps_bytes"] = [sum(carried) for carried in zip(*(run["ps_bytes"] for run in runs))]
    return row


def setting(row):
    return f"{row['network']} at {row['rate']}, {row['workers']} workers"


def transport_verdicts(rows):
    """{(setting, mode): significance.verdict} of the transports' rounds/s, where a mode ran over several."""
    return leaders(rows, lambda r: (setting(r), r["mode"]), lambda r: transport_label(r["collective"], r["servers"]),
                   lambda r: repeats_of(r, "rounds_per_s"))


def mode_verdicts(rows):
    """{(setting, transport): significance.verdict} of the modes' samples/s, where several ran over a transport."""
    return leaders(rows, lambda r: (setting(r), transport_label(r["collective"], r["servers"])),
                   lambda r: r["mode"], lambda r: repeats_of(r, "samples_per_s"))


def verdict_lines(rows):
    """Which transport moves a mode's rounds fastest, and which mode trains the most samples/s over a transport, in
    each setting, beyond the repeats' spread (significance.TEST_NAME)."""
    return too_few_repeats(rows) or [
        f"Leaders ({significance.TEST_NAME} over the repeats; otherwise the rows that tie):", "",
        *(f"- rounds/s, {where}, {mode}: {leader_text(verdict)}"
          for (where, mode), verdict in transport_verdicts(rows).items()),
        *(f"- samples/s, {where}, {transport}: {leader_text(verdict)}"
          for (where, transport), verdict in mode_verdicts(rows).items())]


def launcher_options(rate, collective, servers, prefix):
    """The launcher's options for a run over `collective`: every transport's workers on the same devices, the
    launcher's CPU quotas as root."""
    return {"hosts": "netns", "bandwidth": rate, "num_servers": servers, "collective": collective,
            "netns_prefix": prefix}


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


def markdown(results):
    section = results["network"]
    lines = ["### Network: hosts as namespaces, every link limited to the rate (tc tbf)", ""]
    if "skipped" in section:
        return lines + [f"Skipped: {section['skipped']}.", ""]
    headers = ["network", "link", "workers", "transport", "mode", "samples/s", "rounds/s", "sent per round (MB)",
               "textbook (MB)", "busiest link", "split", "final accuracy"]
    rows = []
    for r in section["rows"]:
        total = sum(r["ps_bytes"])
        split = " / ".join(f"{b / total:.0%}" for b in r["ps_bytes"]) if r["servers"] > 1 and total else "–"
        spread = r.get("spread", {})
        rows.append([r["network"], r["rate"], str(r["workers"]), transport_label(r["collective"], r["servers"]),
                     r["mode"], with_spread(r["samples_per_s"], spread.get("samples_per_s"), ".0f"),
                     with_spread(r["rounds_per_s"], spread.get("rounds_per_s"), ".2f"),
                     f"{r['sent_per_round'] / 1e6:.3f}", f"{r['textbook_per_round'] / 1e6:.3f}",
                     with_spread(r["busiest_link_utilisation"], spread.get("busiest_link_utilisation"), ".0%"), split,
                     with_spread(r["final_accuracy"], spread.get("final_accuracy"), ".3f")])
    return lines + ["Workers at the same speed, as root each under its CPU quota, MPI's ranks too. "
                    + repeats_note(section["rows"]) + " "
                    + "Sent per round: "
                    "the bytes each worker logged sending per round (mean over workers and rounds, each worker's "
                    "first round left out), beside the textbook's figure for "
                    "one aggregation of the model (parameter server M; ring and binary blocks 2(N−1)/N·M; butterfly "
                    "log2(N)·M). Busiest link: the highest rate any link carrying the aggregation (the parameter "
                    "servers', or over MPI the workers') reached in a 2 s window, in either direction, as a share of "
                    "its limit. Split: each server's share of the bytes.",
                    "", markdown_table(headers, rows), "", *verdict_lines(section["rows"]), ""]
