"""One entry point for every role of an ESync job, chosen by DMLC_ROLE (a worker started by mpiexec has none).

One device, no cluster:
    python main.py -m local -n lenet --dataset mnist-5k -c 1 --max-iters 600

The evaluator beside a job whose workers save checkpoints (--train-dir runs/ckpt --save-freq 50 -e 0):
    python main.py -m evaluate --train-dir runs/ckpt -n lenet --dataset mnist-5k -c 1 -ld logs/lenet/sync

A cluster (each line on its machine; DMLC_PS_ROOT_URI is the scheduler's address):
    DMLC_ROLE=scheduler DMLC_PS_ROOT_URI=10.1.1.34 DMLC_PS_ROOT_PORT=9091 DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=2 python main.py -c 1 -m sync
    DMLC_ROLE=server    DMLC_PS_ROOT_URI=10.1.1.34 DMLC_PS_ROOT_PORT=9091 DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=2 python main.py -c 1 -m sync
    DMLC_ROLE=worker    DMLC_PS_ROOT_URI=10.1.1.34 DMLC_PS_ROOT_PORT=9091 DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=2 python main.py -g 0 -m sync -n resnet18-v1

The workers of a synchronous mode over MPI instead (--collective ring, butterfly or binary-blocks; no DMLC role,
no scheduler or servers; the rank and the number of workers come from MPI):
    mpiexec -hosts 10.1.1.34,10.1.1.35 -n 2 python main.py -c 1 -m sync --collective ring -n resnet18-v1
"""
import logging
import os
import sys

from training import config, modes, mxnet_internals
from training.faults import failures, fault_injection
from training.checks import (
    UsageError,
    check_collective,
    check_environment,
    check_evaluator,
    check_ps_role,
    check_worker,
    mpi_workers,
)
from training.devices.threads import limit_compute_threads
from training.transport import collectives

log = logging.getLogger("main")


def run_evaluator(args, test_set):
    from data import normalisation
    from training.checkpoints import CheckpointError
    from training.devices import contexts
    from training.evaluator import Evaluator
    from training.model import Model

    images, labels = test_set
    model = Model(args.network, contexts(args.gpu, args.cpu)[:1], images.shape[1:], args.seed,
                  normalisation(args.dataset), args.eval_batch_size)
    try:
        Evaluator(args, model, images, labels).run()
    except CheckpointError as err:
        raise UsageError(str(err))


def watch_peers(args, role):
    """Start the peer monitor: a dead scheduler, server or worker ends this process instead of blocking it."""
    from training.faults.peers import PeerMonitor, grace_for, resolve

    scheduler = resolve(os.environ["DMLC_PS_ROOT_URI"], int(os.environ["DMLC_PS_ROOT_PORT"]))
    return PeerMonitor(grace_for(args.sync_timeout), state_server_endpoints(args),
                       {peer: "the scheduler" for peer in scheduler}, expected_peers(role),
                       join_timeout=args.sync_timeout).start()


def state_server_endpoints(args):
    """What the peer monitor leaves alone: the state server is no ps-lite peer (it may restart, and a worker may
    not call it for a while; the state client bounds that wait itself)."""
    from training.faults.peers import resolve

    if not modes.MODES[args.mode].state_server:
        return set()
    return resolve(args.state_server_ip, args.state_server_port)


def expected_peers(role):
    """Processes a scheduler or server connects to once the job has formed (ps-lite connects a node to every node
    of another role). None for a worker: its watchdog already bounds joining the cluster."""
    servers, workers = int(os.environ["DMLC_NUM_SERVER"]), int(os.environ["DMLC_NUM_WORKER"])
    return {"scheduler": servers + workers, "server": 1 + workers}.get(role)


def run_ps_role(args, role):
    from training.transport import ps_node

    log.info("ps-lite %s (pid %d): scheduler at %s:%s, %s server(s), %s worker(s)", role, os.getpid(),
             os.environ["DMLC_PS_ROOT_URI"], os.environ["DMLC_PS_ROOT_PORT"],
             os.environ["DMLC_NUM_SERVER"], os.environ["DMLC_NUM_WORKER"])
    fault_injection.point(role, "start")
    ps_node.run(role, traceback_folder(args))
    fault_injection.point(role, "leaving")


def run_training(args, data, resume):
    from training.loop import train
    from coordination.protocol import JOB_ENV

    if args.job_id:  # every state-server client of this process asks about this job
        os.environ[JOB_ENV] = args.job_id
    quota = device_quota(args)
    try:
        train(args, modes.scheme_class(args.mode), data, resume, quota)
    finally:
        if quota:
            quota.close()


def device_quota(args):
    """With --device-share, this worker's device (its CPU quota, which its computing phases run under); else None."""
    from training.devices import cpu_quota

    if not args.device_share:
        return None
    try:
        device = cpu_quota.DeviceQuota(args.device_share / args.slowdown)
    except (cpu_quota.QuotaUnavailable, OSError) as err:
        raise UsageError(f"--device-share: could not give this worker its CPU quota: {err}")
    log.info("emulated device: %s", device.describe())
    return device


def traceback_folder(args):
    return os.path.join(args.log_dir, args.node_name)


def main(argv=None):
    mxnet_internals.install()  # before anything imports MXNet (this module's imports do not)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s",
                        datefmt="%H:%M:%S")
    args = config.parse_args(argv)
    role = os.environ.get("DMLC_ROLE") or None
    try:
        configure_fault_injection()
        check_collective(role, args)
        check_environment(role, args.mode, args.collective)
        threads = limit_compute_threads(role)
        if role in ("scheduler", "server"):
            check_ps_role(args)
        elif args.mode == config.EVALUATE_MODE:
            test_set = check_evaluator(args)
        else:
            data, resume = check_worker(args, job_workers(role, args))
    except UsageError as err:
        print(f"main.py: error: {err}", file=sys.stderr)
        return failures.EXIT_USAGE
    if threads:
        log.info("%s: %s (OMP_NUM_THREADS chooses otherwise)", role, threads)
    if role in ("scheduler", "server"):
        return run_guarded(role, args, lambda: run_ps_role(args, role), in_cluster=True, peers=watch_peers(args, role))
    if args.mode == config.EVALUATE_MODE:
        return run_guarded("evaluator", args, lambda: run_evaluator(args, test_set), in_cluster=False)
    if args.mode == modes.HOGWILD and args.hogwild_rank is None:
        from training.hogwild import run_coordinator

        return run_coordinator(args, list(sys.argv[1:] if argv is None else argv), data)
    return run_guarded("worker", args, lambda: run_training(args, data, resume),
                       in_cluster=role is not None or collectives.uses_mpi(args.collective),
                       peers=watch_peers(args, role) if role else None)


def job_workers(role, args):
    """The number of workers of this worker's job: ps-lite's DMLC_NUM_WORKER, MPI's ranks, or 1 alone."""
    if role:
        return int(os.environ["DMLC_NUM_WORKER"])
    return mpi_workers(args) if collectives.uses_mpi(args.collective) else 1


def configure_fault_injection():
    try:
        fault_injection.configure()
    except ValueError as err:
        raise UsageError(str(err))


def run_guarded(role, args, run, in_cluster, peers=None):
    """Run a role; whatever it raises ends it with one line and a non-zero exit, at once when in a cluster."""
    from coordination.protocol import StateServerError, StateServerUnavailable

    failures.fail_on_thread_errors(role, traceback_folder(args))
    if in_cluster:
        failures.end_on_interrupts(log)
    try:
        code = run() or 0
    except UsageError as err:
        print(f"main.py: error: {err}", file=sys.stderr)
        return leave(failures.EXIT_USAGE, in_cluster)
    except KeyboardInterrupt:
        if in_cluster:
            failures.end_interrupted(log)
        log.warning("interrupted")
        return failures.EXIT_INTERRUPTED
    except Exception as err:
        failures.report(err, role, traceback_folder(args),
                        expected=(StateServerUnavailable, StateServerError, failures.JobSetupError,
                                  collectives.CollectiveFailed))
        return leave(failures.EXIT_FAILURE, in_cluster)
    if peers:
        peers.stop()
    return code


def leave(code, in_cluster):
    """A process of a cluster that fails ends now: leaving the cluster properly is a barrier with the other
    nodes, which would wait for ones that are stuck or gone (their own watchdogs and peer monitors end them)."""
    if in_cluster:
        failures.end_now(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
