"""Benchmarks of every scheme on this machine, measured side by side within one run.

    python -m bench.run                 # the full table (about 85 minutes on 2 cores, as root)
    python -m bench.run --only network  # one section (sync_overhead, heterogeneity, state_server, byzantine,
                                        # network, input_pipeline, evaluation, devices, placement,
                                        # checkpointing, virtual_clock, virtual_engine), into
                                        # results-<section>.*
    python -m bench.run --quick         # every section, tiny durations (a smoke test)
    python -m bench.run --only heterogeneity --hosts netns --comm-ratio 3   # that section on shaped links

Run from the repository's root folder.

Writes bench/results.json and bench/results.md (or --out DIR). Sections (each a module of bench/sections/):
  1. sync overhead: our sync mode vs gluon.Trainer(kvstore='dist_sync'), same network, batch, data and cluster, the
     Trainer's servers updating the weights (MXNet's default) and its workers updating them (as ours do);
  2. efficiency under heterogeneity: cluster samples/s / the sum of each worker's standalone samples/s under its
     own slowdown, measured while all run at once (the fair limit when processes share few cores);
  3. time to accuracy and accuracy after a fixed budget, lenet on mnist-5k, slowdown 1,1,4;
  4. state server cost: /apply/ latency with N concurrent clients, and its share of a worker's step time;
  5. traffic: bytes per second each worker sends, as its logs count them;
  6. Byzantine workers: accuracy with one sign-flipping worker of 4 (3 in --quick), plain sync averaging vs Zeno;
  7. network: sync and esync (and async) across network namespaces with rate-limited links (launch.py --hosts
     netns), lenet and resnet18-v1, 3 and 4 workers, over the parameter server with 1 and 2 servers and over MPI's
     ring, butterfly and binary blocks: throughput, bytes per worker per round beside the textbook's figure, the
     busiest link's load; skipped with a note where namespaces cannot be made (needs root);
  8. input pipeline: a training step on CIFAR-10-shaped batches (3x32x32, normalised) without augmentation, with
     CIFAR-10's crops and flips made in the step, with them made one batch ahead (--augment crop), and with d2l's
     resized crops made one batch ahead by Gluon's transforms (--augment resized-crop);
  9. evaluation off the training path: SSGD and LB-BSP on 1,1,4 with rank 0's snapshots and the evaluator process
     against no evaluation at all, and what one snapshot costs rank 0's step (lenet, resnet18-v1);
 10. devices: on 1,1,1,1,20,20 the fast workers' median step under SSGD and ESync, the standalone baseline's and the
     fast devices' while every device trains alone at once, each device under its CPU quota, and with the sleeping
     slowdown beside it; SSGD's and ASGD's samples/s both ways (what the quota's lost overlap costs them) and ESync's
     slowest over fastest step against the declared 20;
 11. placement: a device 20x slower than a fast one pushing and pulling lenet's and resnet18-v1's model (one ps-lite
     worker and one server, nobody to wait for) inside its CPU quota, as when the whole training ran in the quota,
     and outside it, as now that only the computing phases do, beside a fast device's pushpull inside its quota;
     and what entering and leaving the quota around each step costs a fast lenet step; skipped with a note where no
     CPU quota can be given (needs root);
 12. checkpointing: the launcher's runs with their default checkpoints against the same runs without any;
 13. the virtual clock's cost: SSGD, ESync, ASGD and one device on the paper's cell, 30 s of training in real time
     and on the virtual clock, wall seconds side by side;
 14. the virtual job's engine: one seed of a search's trial, ESync on the paper's cell at R = 12, on MXNet's naive
     engine (a virtual job's default) and on its threaded one, alternately: CPU seconds, and whether the logs match.
"""
import argparse
import logging
import os
import sys
import tempfile
import time

from bench.sections import (
    byzantine,
    checkpointing,
    devices,
    evaluation,
    heterogeneity,
    input_pipeline,
    network,
    placement,
    state_server,
    sync_overhead,
    virtual_clock,
    virtual_engine,
)
from launcher import experiment, links, netns
from launcher.cluster import ROOT
from training import modes
from training.checks import UsageError
from training.files import write_json

log = logging.getLogger("bench")

ALL_MODES = ("sync", "async", "esync")

# Heterogeneity runs `modes` on every profile, `accuracy_profile_modes` too on `accuracy_profile`, and ESync once more
# with each of `esync_policies` (variants: training/esync_variants.py) besides the default one; the Byzantine section
# runs (mode, with the attacker) pairs, the network section `network_runs`: each of the three sections, and
# sync_overhead, all of it `repeats` times. The placement section times `placement_networks[network]` pushpulls in
# each placement and `placement_steps` lenet steps each way, the fast device's share the launcher's default for
# `placement_profile` and the slow one's that / `placement_slowdown`.
FULL = dict(repeats=3, trainer_iters={"lenet": 600, "resnet18-v1": 80}, warmup=5,
            profiles=["1,1,4", "1,2,4,8"], accuracy_profile="1,1,4", seconds=12, accuracy_budget=15,
            latency_calls=300,
            modes=["esync", "sync", "async"],
            accuracy_profile_modes=["dcasgd", "dcasgd-paper", "downpour", "nbsync", "backup", "lb-bsp", "zeno", "zeno-async", "fedavg",
                                    "diloco", "fedasync", "fedbuff", "async-local-sgd", "tifl", "feddrop", "hogwild"],
            esync_policies=["apply", "plan", "nonblocking", "overlap", "apply-drift"],
            byzantine_runs=[("zeno", False), ("sync", True), ("zeno", True)], byzantine_profile="1,1,1,1",
            network_runs=network.matrix(), network_seconds={"lenet": 5, "resnet18-v1": 15},
            pipeline_networks={"lenet": 300, "resnet20": 15}, pipeline_batch=128,
            evaluation_modes=["sync", "lb-bsp"], evaluation_profile="1,1,4", evaluation_seconds=15, evaluation_repeats=5,
            snapshot_networks={"lenet": 200, "resnet18-v1": 15},
            devices_profile="1,1,1,1,20,20", devices_seconds=15, devices_emulations=["cpu-quota", "sleeping"],
            devices_throughput_modes=["sync", "async"],
            placement_networks={"lenet": 100, "resnet18-v1": 30}, placement_steps=1000, placement_profile="1,1,4",
            placement_slowdown=20,
            checkpoint_runs={"lenet": ["sync", "esync"], "resnet18-v1": ["sync"]}, checkpoint_profile="1,1,4",
            checkpoint_seconds=12,
            virtual_profile="1,1,1,1,20,20", virtual_seconds=30, virtual_modes=["sync", "esync", "async", "local"],
            virtual_step_seconds=None, virtual_scale=[
                # 64 shares of the sample's 4,000 training images hold 62 each: batches of 32
                ("64 workers, 1 in 4 slow", "sync", ",".join(["1", "1", "1", "4"] * 16), 1, "lenet", {}, ["-b", "32"]),
                ("devices 1,000x apart", "esync", "1,1,1000", 30, "lenet", {}, []),
                ("links at R = 100", "sync", "1,1,4", 10, "lenet", {"comm_ratio": 100.0}, []),
                ("the paper's cluster, R = 12, GPUs at 0.03 s a step", "esync", "1,1,1,1,117,117", 1, "resnet18-v1",
                 {"comm_ratio": 12.0, "step_seconds": 0.03}, [])],
            # a search's trial in the headline cell (results/every-rival-117x-r12-v5)
            virtual_engines=dict(mode="esync", profile="1,1,1,1,117,117", seconds=120, snapshot_seconds=2, repeats=3,
                                 options={"comm_ratio": 12.0, "step_seconds": 0.03, "esync_policy": "apply",
                                          "dataset": "fashion-mnist", "data_dir": None, "holdout": 5000}))
# A smoke test of every section: one run where the full benchmark compares several, no separate accuracy runs, two
# workers where the full benchmark has three or more.
QUICK = dict(repeats=1, trainer_iters={"lenet": 30}, warmup=3,
             profiles=["1,4"], accuracy_profile="1,4", seconds=1, accuracy_budget=0, latency_calls=30,
             modes=["esync"], accuracy_profile_modes=[], esync_policies=[], byzantine_runs=[("zeno", True)],
             byzantine_profile="1,1",
             network_runs=[("lenet", "100mbit", 2, "ring", 1, ("esync",))], network_seconds={"lenet": 1},
             pipeline_networks={"lenet": 6}, pipeline_batch=32,
             evaluation_modes=["sync"], evaluation_profile="1,4", evaluation_seconds=1, evaluation_repeats=1,
             snapshot_networks={"lenet": 5}, devices_profile="1,4", devices_seconds=1, devices_emulations=["cpu-quota"],
             devices_throughput_modes=["sync"],
             placement_networks={"lenet": 3}, placement_steps=20, placement_profile="1,1,4", placement_slowdown=20,
             checkpoint_runs={"lenet": ["sync"]}, checkpoint_profile="1,4", checkpoint_seconds=1,
             virtual_profile="1,4", virtual_seconds=1, virtual_modes=["local"], virtual_step_seconds=0.01,
             virtual_scale=[("8 workers", "sync", ",".join(["1"] * 8), 0.1, "lenet", {}, [])],
             virtual_engines=dict(mode="sync", profile="1,4", seconds=1, snapshot_seconds=0.5, repeats=1,
                                  options={"step_seconds": 0.01}))


def unknown_modes(cfg):
    """The modes a configuration runs that do not train on every device of a profile: neither cluster modes of
    training/modes.py nor Hogwild! (one process per device)."""
    chosen = set(ALL_MODES) | set(cfg["modes"]) | set(cfg["accuracy_profile_modes"])
    chosen |= {mode for mode, _ in cfg["byzantine_runs"]}
    chosen |= {mode for *_, run_modes in cfg["network_runs"] for mode in run_modes}
    return sorted(chosen - set(modes.cluster_names()) - {modes.HOGWILD})


# Each section is a module of bench/sections/ (their order here is the order they run in): its measure(cfg, workdir,
# earlier) -> its results, `earlier` holding the sections that ran before it; its markdown(results) -> its table.
SECTIONS = {"sync_overhead": sync_overhead, "heterogeneity": heterogeneity, "state_server": state_server,
            "byzantine": byzantine, "network": network, "input_pipeline": input_pipeline, "evaluation": evaluation,
            "devices": devices, "placement": placement, "checkpointing": checkpointing, "virtual_clock": virtual_clock,
            "virtual_engine": virtual_engine}
TABLE_ORDER = ("sync_overhead", "heterogeneity", "byzantine", "state_server", "network", "input_pipeline",
               "evaluation", "devices", "placement", "checkpointing", "virtual_clock", "virtual_engine")


def markdown(results):
    return "\n".join(line for key in TABLE_ORDER if key in results for line in SECTIONS[key].markdown(results)) + "\n"


def check_links(cfg, only):
    """UsageError unless the heterogeneity section's launcher runs accept the link options (and this machine can
    make the namespaces they ask for); the other sections keep their own links."""
    defaults = experiment.handed_on(experiment.options())
    if all(value == defaults[name] for name, value in cfg["links"].items()):
        return
    if only != "heterogeneity":
        raise UsageError("the link and aggregation options apply to the heterogeneity section: add --only "
                         "heterogeneity")
    chosen = [m for m in dict.fromkeys(cfg["modes"] + cfg["accuracy_profile_modes"]) if m in modes.cluster_names()]
    run = experiment.build(experiment.options(modes=",".join(chosen), slowdown=cfg["profiles"][0], max_time=1.0,
                                              **cfg["links"]))
    if run.cluster.hosts == "netns":
        try:
            netns.check_available(run.cluster.netns_prefix)
        except netns.NetnsUnavailable as error:
            raise UsageError(str(error))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny durations: checks that every section is produced")
    p.add_argument("--out", default=os.path.join(ROOT, "bench"), help="folder for results.json and results.md")
    p.add_argument("--only", choices=list(SECTIONS), help="run one section; writes results-<section>.json/md")
    link_options = p.add_argument_group("the heterogeneity section's links and aggregation (launch.py's options)")
    experiment.add_aggregation_options(link_options)
    links.add_host_options(link_options)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", datefmt="%H:%M:%S")
    cfg = dict(QUICK if args.quick else FULL, links=experiment.handed_on(args))
    unknown = unknown_modes(cfg)
    if unknown:
        print(f"run.py: error: not a mode that trains on every device of a profile: {', '.join(unknown)}",
              file=sys.stderr)
        return 2
    try:
        check_links(cfg, args.only)
    except UsageError as error:
        print(f"run.py: error: {error}", file=sys.stderr)
        return 2
    started = time.time()
    sections = [args.only] if args.only else list(SECTIONS)
    results = {"config": cfg}
    with tempfile.TemporaryDirectory(prefix="esync-bench-") as workdir:
        for name in sections:
            results[name] = SECTIONS[name].measure(cfg, workdir, results)
    results["seconds"] = time.time() - started
    os.makedirs(args.out, exist_ok=True)
    stem = f"results-{args.only}" if args.only else "results"
    write_json(os.path.join(args.out, f"{stem}.json"), results)
    table = markdown(results)
    with open(os.path.join(args.out, f"{stem}.md"), "w") as f:
        f.write(table)
    print(table)
    log.info("took %.0f s; wrote %s", results["seconds"], os.path.join(args.out, stem + ".{json,md}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
