"""14. The engine a virtual job computes on: MXNet's naive engine, the job's default (training/clocks/job.py: its
workers compute one at a time, each operator awaited before the next), against the threaded one, the same job on
each alternately: CPU seconds of the job's processes, wall seconds, and whether every run wrote the same iteration
logs and final weights."""
import contextlib
import glob
import os
import resource
import statistics
import time

from analysis.tables import markdown_table
from bench.sections.common import launch, log
from training import runlog

ENGINES = {"naive": None, "threaded": "ThreadedEnginePerDevice"}  # None: the job's own default, the naive engine


def measure(cfg, workdir, earlier):
    run = cfg["virtual_engines"]
    mode, profile, seconds, options = run["mode"], run["profile"], run["seconds"], run["options"]
    folder = os.path.join(workdir, "virtual_engine")
    runs = {name: [] for name in ENGINES}
    written = set()
    for repeat in range(run["repeats"]):
        for name in ENGINES:
            logs = os.path.join(folder, f"{name}-{repeat}")
            before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
            with engine(name):
                launch([mode], profile, seconds, logs, {"clock": runlog.VIRTUAL_CLOCK, **options},
                       snapshot_seconds=run["snapshot_seconds"])
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
            runs[name].append({"cpu_seconds": cpu, "wall_seconds": time.perf_counter() - started})
            written.add(logged_bytes(os.path.join(logs, "logs")))
            log.info("%s on %s, %g virtual s, %s engine: %.1f s of CPU", mode, profile, seconds, name, cpu)
    return {"mode": mode, "profile": profile, "seconds": seconds, "snapshot_seconds": run["snapshot_seconds"],
            "options": options, "runs": runs, "same_logs": len(written) == 1}


@contextlib.contextmanager
def engine(name):
    """MXNET_ENGINE_TYPE for the jobs started inside, as `name` sets it; the environment as it was after."""
    before = os.environ.pop("MXNET_ENGINE_TYPE", None)
    if ENGINES[name]:
        os.environ["MXNET_ENGINE_TYPE"] = ENGINES[name]
    try:
        yield
    finally:
        os.environ.pop("MXNET_ENGINE_TYPE", None)
        if before is not None:
            os.environ["MXNET_ENGINE_TYPE"] = before


def logged_bytes(logs):
    """Every iteration log and final model of a run, as one comparable value."""
    paths = sorted(glob.glob(os.path.join(logs, "*", "*", "*", "*", "*")))
    return tuple(open(p, "rb").read() for p in paths
                 if os.path.basename(p).startswith("iter-") or p.endswith(runlog.FINAL_MODEL_FILE))


def markdown(results):
    section = results["virtual_engine"]
    cpu = {name: [r["cpu_seconds"] for r in runs] for name, runs in section["runs"].items()}
    rows = [[name, ", ".join(f"{c:.1f}" for c in cpu[name]),
             ", ".join(f"{r['wall_seconds']:.1f}" for r in section["runs"][name]),
             f"**{statistics.median(cpu[name]) / statistics.median(cpu['threaded']):.2f}**"] for name in cpu]
    options = ", ".join(f"{k} {v}" for k, v in section["options"].items() if v is not None)
    return [f"### The virtual job's engine: {section['mode']} on {section['profile']}, {section['seconds']:g} virtual s "
            f"({options}), a snapshot every {section['snapshot_seconds']:g} s", "",
            "The same job on each engine alternately, in one run: CPU seconds of its processes (user and system) and "
            "wall seconds, each run. The same iteration logs and final weights on both: "
            f"{'yes' if section['same_logs'] else '**no**'}.", "",
            markdown_table(["engine", "CPU s, each run", "wall s, each run", "median CPU / threaded's"], rows), ""]
