"""A job on a virtual clock: every worker a thread of this process, run by the scheduler one at a time.

    python -m training.clocks.job JOB.json

JOB.json (the launcher writes it with --clock virtual): {"workers": [each worker's main.py arguments, in the order
of their positions], "step_seconds": the seconds a step of one batch takes on a device of slowdown 1, "overhead":
seconds each step besides, "jitter": σ (clocks/virtual.py), "ratio": R (a transfer of the model lasts R fast steps
over a worker's link) or null for loopback, "latency": seconds a transfer, "num_servers": the parameter servers
(default 1), "ps_bandwidth": their links' rate ("100mbit") or a multiple of the workers' ("6x"), null: the
workers' (clocks/network.py), "round_trip": seconds a request to the state server's rules (clocks/coordination.py),
"server_apply": seconds a server adds a pushed megabyte, "link_slowdowns": each worker's link this many times
slower (default none), "seed": the jitter's seed}. Each worker trains as `main.py` would with those arguments (the same
training loop and scheme), on one clock of its own; the test set is evaluated in the loop every --eval-seconds of
virtual time, at no virtual cost. Exit codes: 0, 1 a worker failed, 2 bad input.
"""
import json
import logging
import os
import sys

from training import config, modes
from training.checks import UsageError
from training.clocks import network, virtual
from training.clocks.scheduler import Scheduler
from training.faults.failures import EXIT_FAILURE, EXIT_USAGE
from training.transport.collectives import SPLIT_ABOVE, SPLIT_VARIABLE

log = logging.getLogger("virtual")

def refusal(mode, args=None):
    """Why `mode` (with the worker's or the launcher's `args`) does not run on the virtual clock, or None: each
    scheme says (Scheme.virtual_refusal)."""
    why = modes.scheme_class(mode).virtual_refusal(args)
    return None if why is None else (why if why.startswith(mode) else f"{mode} {why}")


def read_job(path):
    """The job's arguments, each worker's parsed; UsageError (one line) for a job that cannot run."""
    try:
        with open(path) as f:
            job = json.load(f)
        workers = [config.parse_args(argv) for argv in job["workers"]]
        step_seconds = float(job["step_seconds"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise UsageError(f"{path}: not a virtual job: {error}") from None
    if not workers or not step_seconds > 0:
        raise UsageError(f"{path}: a virtual job needs workers and a positive step time")
    for args in workers:
        why = refusal(args.mode, args)
        if why:
            raise UsageError(f"--clock virtual: {why}")
    return job, workers


def build(job, workers, links):
    """(scheduler, each worker's (args, clock, transport)) of a job on `links` (clocks/network.py Network)."""
    from training.clocks.coordination import VirtualCoordination
    from training.transport.virtual import VirtualTransport
    from training.transport.virtual_servers import VirtualServers

    scheduler = Scheduler(len(workers))
    coordination = VirtualCoordination(scheduler, float(job.get("round_trip") or 0.0))
    mode = modes.MODES[workers[0].mode]
    servers = VirtualServers(scheduler, links) if mode.cluster and not mode.synchronous else None
    ratio = job.get("ratio")
    parts = []
    for rank, args in enumerate(workers):
        device = virtual.Device(float(job["step_seconds"]), args.slowdown, args.batch_size,
                                float(job.get("jitter") or 0.0), float(job.get("overhead") or 0.0))
        clock = virtual.VirtualClock(scheduler, rank, device, job.get("seed", args.seed))
        transport = (VirtualTransport(scheduler, rank, links, coordination, servers, args.collective)
                     if mode.cluster else None)
        args.clock = {"kind": "virtual", "step_seconds": device.step_seconds, "overhead": device.overhead,
                      "slowdown": device.slowdown,
                      "batch_size": device.batch_size, "jitter": device.jitter, "ratio": ratio,
                      "latency": links.workers[rank].latency, "num_servers": links.num_servers,
                      "sums": network.SUMS,
                      "ps_bandwidth": job.get("ps_bandwidth"), "round_trip": coordination.round_trip,
                      "server_apply": links.apply_seconds_per_byte * 1e6,
                      "link_seconds_per_byte": links.workers[rank].seconds_per_byte}
        parts.append((args, clock, transport))
    return scheduler, parts


def run(path):
    from training.checks import check_worker
    from training.loop import train

    job, workers = read_job(path)
    data, resume = check_worker(workers[0], len(workers), virtual=True)  # one copy of the data, every worker's share taken from it
    ratio = job.get("ratio")
    scheduler, parts = build(job, workers, network_for(job, workers, data))
    log.info("a job of %d worker(s) on a virtual clock: %s s a step at slowdown 1, links %s", len(workers),
             job["step_seconds"], f"R = {ratio:g}" if ratio else "free (loopback)")
    scheme = modes.scheme_class(workers[0].mode)
    scheduler.run([lambda a=a, c=c, t=t: train(a, scheme, data, resume, clock=c, transport=t) for a, c, t in parts])
    log.info("the virtual job ended after %d events, at %.3f virtual seconds", scheduler.events, max(scheduler.times))


def network_for(job, workers, data):
    """The job's links: each worker's on which a transfer of the model lasts `ratio` fast steps (free without one),
    each server's at --ps-bandwidth, the keys placed as ps-lite places them."""
    worker = network.Link(latency=float(job.get("latency") or 0.0))
    if job.get("ratio"):
        worker = network.Link.from_ratio(job["ratio"], float(job["step_seconds"]), model_bytes(workers[0], data),
                                         worker.latency)
    try:
        server = network.server_link(job.get("ps_bandwidth"), worker)
    except ValueError as error:
        raise UsageError(f"ps_bandwidth: {error}") from None
    slower = [float(f) for f in job.get("link_slowdowns") or []] or [1.0] * len(workers)
    if len(slower) != len(workers) or not all(f >= 1 for f in slower):
        raise UsageError(f"link_slowdowns {slower}: give one factor of 1 or more per worker")
    apply = float(job.get("server_apply") or 0.0) / 1e6  # seconds a megabyte, a byte
    return network.Network(tuple(network.Link(worker.seconds_per_byte * f, worker.latency) for f in slower),
                           (server,) * int(job.get("num_servers") or 1),
                           int(os.environ.get(SPLIT_VARIABLE, SPLIT_ABOVE)), apply)


def model_bytes(args, data):
    from data import normalisation
    from training.devices import contexts
    from training.model import Model

    return Model(args.network, contexts(args.gpu, args.cpu), data.train_images.shape[1:], args.seed,
                 normalisation(args.dataset), args.eval_batch_size).param_bytes


def main(argv=None):
    from training import mxnet_internals

    mxnet_internals.install()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(threadName)s %(name)s %(levelname)s %(message)s",
                        datefmt="%H:%M:%S")
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m training.clocks.job JOB.json", file=sys.stderr)
        return EXIT_USAGE
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    # The workers compute one at a time, each operator awaited before the next: MXNet's naive engine runs each in
    # the calling thread, with the threaded engine's results and less CPU (bench/results-virtual_engine.md).
    os.environ.setdefault("MXNET_ENGINE_TYPE", "NaiveEngine")
    try:
        run(argv[0])
    except UsageError as error:
        print(f"virtual job: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as error:  # a worker's failure: one line here, its traceback in the log above
        log.exception("the virtual job failed")
        print(f"virtual job: failed: {error}", file=sys.stderr)
        return EXIT_FAILURE
    return 0


if __name__ == "__main__":
    sys.exit(main())
