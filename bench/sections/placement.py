"""11. Placement of a device's CPU quota: how long a device 20x slower than a fast one takes to push and pull its
model (one ps-lite worker and one server on loopback, nobody to wait for) inside its quota, as when the whole
training ran in the quota's group, and outside it, as now that only the computing phases do, beside a fast device's
pushpull inside its quota; and what entering and leaving the group around each step costs a fast device's step
(bench/placement_cost.py). Skipped with a note where no CPU quota can be given (needs root)."""
import json
import os

from analysis.tables import markdown_table
from bench.sections.common import fmt, log
from bench.sections.sync_overhead import run_ps_job
from launcher.cluster import ProcessGroup
from launcher.workers import default_device_share
from training.devices import cpu_quota

STEP_NETWORK = "lenet"  # the network whose fast step is timed both ways
PUSHPULL_TARGET = 1.5   # the new placement's pushpull within this many times the fast device's
STEP_TARGET = 0.02      # entering and leaving around each step: at most this share of a fast step
JOB_TIMEOUT = 600


def measure(cfg, workdir, earlier):
    try:
        cpu_quota.controller()
    except cpu_quota.QuotaUnavailable as error:
        log.warning("placement section skipped: %s", error)
        return {"skipped": str(error)}
    cores = len(os.sched_getaffinity(0))
    fast = default_device_share(cfg["placement_profile"].split(","), cores)
    rows = [network_row(cfg, network, fast, os.path.join(workdir, "placement", network))
            for network in cfg["placement_networks"]]
    return {"profile": cfg["placement_profile"], "cores": cores, "fast_cores": fast,
            "slowdown": cfg["placement_slowdown"], "rows": rows}


def network_row(cfg, network, fast, folder):
    steps = cfg["placement_steps"] if network == STEP_NETWORK else 0
    argv = ["-m", "bench.placement_cost", "-n", network, "--fast-cores", str(fast),
            "--slowdown", str(cfg["placement_slowdown"]), "--pushpulls", str(cfg["placement_networks"][network]),
            "--steps", str(steps), "--tag", quota_tag()]
    row = with_one_retry(argv, folder)
    log_row(row)
    return row


def quota_tag():
    """The tag of the worker's groups: this benchmark's alone, which it removes whatever the worker left."""
    return f"bench{os.getpid()}"


def with_one_retry(argv, folder):
    """A ps-lite job on a loaded machine occasionally fails to start; one failure is logged and run again."""
    try:
        return worker_result(argv, folder)
    except RuntimeError as err:
        log.warning("the placement job failed, running it again: %s", err)
        return worker_result(argv, folder + "-again")


def worker_result(argv, folder):
    """The JSON object bench.placement_cost printed as the worker of a job of one worker and one server. Its
    processes are stopped and its quotas' groups removed whatever happens."""
    try:
        with ProcessGroup(folder) as group:
            run_ps_job(group, argv, 1, JOB_TIMEOUT)
            (worker,) = [proc for proc in group.procs if proc.role == "worker"]
    finally:
        for kind in ("fast", "slow"):  # bench.placement_cost's groups: <tag>fast-<pid>, <tag>slow-<pid>
            cpu_quota.remove_groups(f"{quota_tag()}{kind}", keep_alive=False)
    with open(worker.output) as f:
        printed = [line for line in f if line.startswith("{")]
    return json.loads(printed[-1])


def log_row(row):
    seconds = row["pushpull_seconds"]
    log.info("%s pushpull: fast device %.1f ms, slow device inside its quota %.1f ms, outside %.1f ms",
             row["network"], *(1e3 * seconds[name] for name in ("fast", "old", "new")))
    if "step" in row:
        log.info("%s fast step: %.2f ms entering and leaving each step, %.2f ms inside throughout (%+.1f %%)",
                 row["network"], 1e3 * row["step"]["per_step"], 1e3 * row["step"]["entered_once"],
                 100 * row["step"]["overhead"])


def met(condition):
    return "yes" if condition else "**no**"


def pushpull_row(row):
    seconds = row["pushpull_seconds"]
    new, old = seconds["new"] / seconds["fast"], seconds["old"] / seconds["fast"]
    return [row["network"], f"{row['param_bytes'] / 1e6:.1f}", str(row["pushpulls"]),
            *(fmt(1e3 * seconds[name], ".1f") for name in ("fast", "old", "new")),
            f"{old:.1f}", f"{new:.2f}", met(new <= PUSHPULL_TARGET)]


def step_row(row):
    step = row["step"]
    return [row["network"], str(step["steps"]), fmt(1e3 * step["per_step"], ".2f"),
            fmt(1e3 * step["entered_once"], ".2f"), f"{step['overhead']:+.1%}", fmt(1e3 * step["switch"], ".3f"),
            met(step["overhead"] < STEP_TARGET)]


def pushpull_lines(section):
    fast, slowdown = section["fast_cores"], section["slowdown"]
    return [f"A fast device: {fast:.3g} of a core (the launcher's default for {section['profile']} on "
            f"{section['cores']} cores); a slow one {slowdown:g}x slower: {fast / slowdown:.3g} of a core. One "
            "pushpull of every parameter in the sync schemes' keys (gradients, packed BatchNorm statistics, control), "
            "a ps-lite job of one worker and one server on loopback (dist_sync), each right after a computing phase "
            "of its device that ends at a random point of its quota's period, as a step's does: median ms, the three "
            f"placements taking turns. Target: the new placement within {PUSHPULL_TARGET:g}x of the fast device's.",
            "", markdown_table(["network", "MB", "pushpulls", "fast device (ms)", "slow, old: inside (ms)",
                                "slow, new: outside (ms)", "old / fast", "new / fast",
                                f"new within {PUSHPULL_TARGET:g}x"], [pushpull_row(r) for r in section["rows"]]), ""]


def step_lines(section):
    timed = [r for r in section["rows"] if "step" in r]
    if not timed:
        return []
    first = timed[0]["step"]
    return [f"A fast device's training step (forward, backward, SGD update; batch {first['batch']}) with "
            "`quota.computing()` around each step against a loop inside the group entered once, in blocks of "
            f"{first['block']} steps taking turns (ABBA...): median ms; enter + leave: the two writes to cgroup.procs "
            f"alone. Target: an overhead under {STEP_TARGET:.0%}.", "",
            markdown_table(["network", "steps each way", "entered per step (ms)", "entered once (ms)", "overhead",
                            "enter + leave (ms)", f"under {STEP_TARGET:.0%}"], [step_row(r) for r in timed]), ""]


def markdown(results):
    section = results["placement"]
    lines = ["### Placement of a device's CPU quota: a slow device's pushpull inside its quota (old) and outside "
             "it (new), and what the placement costs a fast step", ""]
    if "skipped" in section:
        return lines + [f"Skipped: {section['skipped']}.", ""]
    return lines + pushpull_lines(section) + step_lines(section)
