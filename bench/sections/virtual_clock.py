"""13. The virtual clock's cost: each mode of the paper's cell trained the same training time in real time and on
the virtual clock (its devices charged the fast step `launch.py calibrate` measures here), wall seconds side by side.
A virtual run computes every device's steps on one core and pays nothing for idle devices; a real one pays its wall
time, idle devices and all, on the cores the devices share. Then the scale it reaches: jobs of many workers, devices
far apart, costly links and a large network, each one virtual run, its wall seconds and the largest resident memory
of any process it started."""
import os
import re
import resource
import time

from analysis.tables import markdown_table
from bench.sections.common import DATA, launch, log
from launcher import comm_ratio, experiment
from training import runlog


def measure(cfg, workdir, earlier):
    profile, seconds = cfg["virtual_profile"], cfg["virtual_seconds"]
    folder = os.path.join(workdir, "virtual_clock")
    step, overhead = (cfg["virtual_step_seconds"], 0.0) if cfg["virtual_step_seconds"] else calibrated(profile, folder)
    rows = []
    for mode in cfg["virtual_modes"]:
        walls, results = {}, {}
        for clock in (runlog.REAL_CLOCK, runlog.VIRTUAL_CLOCK):
            options = ({"clock": clock, "step_seconds": step, "step_overhead": overhead}
                       if clock == runlog.VIRTUAL_CLOCK else {})
            started = time.perf_counter()
            results[clock] = launch([mode], profile, seconds, os.path.join(folder, f"{mode}-{clock}"), options)[mode]
            walls[clock] = time.perf_counter() - started
        rows.append({"mode": mode, "real_wall_seconds": walls[runlog.REAL_CLOCK],
                     "virtual_wall_seconds": walls[runlog.VIRTUAL_CLOCK],
                     "ratio": walls[runlog.VIRTUAL_CLOCK] / walls[runlog.REAL_CLOCK],
                     "real_samples_per_s": results[runlog.REAL_CLOCK]["cluster_throughput"],
                     "virtual_samples_per_s": results[runlog.VIRTUAL_CLOCK]["cluster_throughput"]})
        log.info("%s on %s, %g s of training: %.1f s of wall time in real time, %.1f s on the virtual clock", mode,
                 profile, seconds, walls[runlog.REAL_CLOCK], walls[runlog.VIRTUAL_CLOCK])
    scale = [scale_run(folder, step, *run) for run in cfg["virtual_scale"]]
    return {"profile": profile, "seconds": seconds, "step_seconds": step, "overhead_seconds": overhead, "rows": rows,
            "scale": scale}


def scale_run(folder, step, label, mode, profile, seconds, network, options, worker_options):
    """One virtual run of the scale table: its wall seconds and the peak memory of the processes it started."""
    started = time.perf_counter()
    result = launch([mode], profile, seconds, os.path.join(folder, "scale", re.sub(r"[^a-z0-9]+", "-", label.lower())),
                    {"clock": runlog.VIRTUAL_CLOCK, "step_seconds": step, **options}, network=network,
                    snapshot_seconds=seconds, worker_options=worker_options)[mode]
    wall = time.perf_counter() - started
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # the largest child so far, kilobytes
    log.info("%s: %.1f s of wall time, %.0f MB at most", label, wall, peak_mb)
    return {"label": label, "mode": mode, "network": network, "workers": len(profile.split(",")),
            "seconds": seconds, "wall_seconds": wall, "peak_mb": peak_mb, "rounds": result["num_rounds"]}


def calibrated(profile, folder):
    """(a fast step's own seconds, the loop's seconds beside them) on this machine under the profile's fast device's
    quota, as launch.py calibrate measures them."""
    run = experiment.build(experiment.options(modes="local", network="lenet", slowdown=profile,
                                              max_iters=comm_ratio.PROBE_STEPS, log_dir=folder, **DATA))
    probe = comm_ratio.measure(run)
    return probe.step, max(0.0, probe.period - probe.step)


def markdown(results):
    section = results["virtual_clock"]
    rows = [[r["mode"], f"{r['real_wall_seconds']:.1f}", f"{r['virtual_wall_seconds']:.1f}", f"**{r['ratio']:.2f}**",
             f"{r['real_samples_per_s']:.0f}", f"{r['virtual_samples_per_s']:.0f}"] for r in section["rows"]]
    return [f"### The virtual clock's cost: {section['seconds']:g} s of training on {section['profile']}, real time "
            f"against the virtual clock", "",
            f"Wall seconds of one launcher run each, start to table; the virtual devices charged "
            f"{1e3 * section['step_seconds']:.2f} ms a fast step and {1e3 * section.get('overhead_seconds', 0):.2f} ms "
            "beside it (this machine's, as `launch.py calibrate` measures them, but in --quick). One run each.", "",
            markdown_table(["mode", "wall s, real", "wall s, virtual", "virtual / real", "samples/s, real",
                            "samples/s, virtual"], rows), ""] + scale_markdown(section)


def scale_markdown(section):
    if not section.get("scale"):
        return []
    rows = [[r["label"], r["network"], str(r["workers"]), f"{r['seconds']:g}", str(r["rounds"]),
             f"{r['wall_seconds']:.1f}", f"{r['peak_mb']:.0f}"] for r in section["scale"]]
    return ["The scale one virtual run reaches here (each on one core; memory: the largest resident set of any process "
            "the benchmark had started by then):", "",
            markdown_table(["run", "network", "workers", "virtual s", "rounds", "wall s", "peak MB"], rows), ""]
