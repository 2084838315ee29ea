"""One entry point for every role of an ESync job, chosen by DMLC_ROLE.

One device, no cluster:
    python main.py -m local -n lenet --dataset mnist-5k -c 1 --max-iters 600

The evaluator beside a job whose workers save checkpoints (--train-dir runs/ckpt --save-freq 50 -e 0):
    python main.py -m evaluate --train-dir runs/ckpt -n lenet --dataset mnist-5k -c 1 -ld logs/lenet/sync

A cluster (each line on its machine; DMLC_PS_ROOT_URI is the scheduler's address):
    DMLC_ROLE=scheduler DMLC_PS_ROOT_URI=10.1.1.34 DMLC_PS_ROOT_PORT=9091 DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=2 python main.py -c 1 -m sync
    DMLC_ROLE=server    DMLC_PS_ROOT_URI=10.1.1.34 DMLC_PS_ROOT_PORT=9091 DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=2 python main.py -c 1 -m sync
    DMLC_ROLE=worker    DMLC_PS_ROOT_URI=10.1.1.34 DMLC_PS_ROOT_PORT=9091 DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=2 python main.py -g 0 -m sync -n resnet18-v1
"""
import logging
import os
import sys

import config
from training import failures, fault_injection, modes

ROLES = ("scheduler", "server", "worker")
DMLC_INTEGERS = ("DMLC_PS_ROOT_PORT", "DMLC_NUM_SERVER", "DMLC_NUM_WORKER")
STATE_SERVER_STARTUP = 10.0  # seconds a worker gives a state server started beside it to answer

log = logging.getLogger("main")


class UsageError(Exception):
    """A mistake in the command line or the environment; reported in one line."""


def check_environment(role, mode):
    if role is not None and role not in ROLES:
        raise UsageError(f"DMLC_ROLE={role!r} is not one of {', '.join(ROLES)} (unset it to train on one device)")
    if mode == config.EVALUATE_MODE:
        if role is not None:
            raise UsageError(f"-m {mode} runs beside the cluster, not in it: unset DMLC_ROLE")
        return
    if role is None:
        if modes.MODES[mode].cluster:
            standalone = " or ".join(f"-m {m.name}" for m in modes.MODES.values() if not m.cluster)
            raise UsageError(f"-m {mode} needs a cluster: start the scheduler, servers and workers with DMLC_ROLE "
                             f"and the DMLC_* variables (see README), or use {standalone}")
        return
    if role == "worker" and not modes.MODES[mode].cluster:
        raise UsageError(f"-m {mode} trains without a cluster: unset DMLC_ROLE, or choose a cluster mode "
                         f"(-m {', '.join(modes.cluster_names())})")
    missing = [name for name in ("DMLC_PS_ROOT_URI",) + DMLC_INTEGERS if not os.environ.get(name)]
    if missing:
        raise UsageError(f"DMLC_ROLE={role} needs {', '.join(missing)} in the environment")
    for name in DMLC_INTEGERS:
        value = os.environ[name]
        if not value.isdigit() or int(value) < 1:
            raise UsageError(f"{name}={value!r} must be a positive integer")
    if int(os.environ["DMLC_PS_ROOT_PORT"]) > 65535:
        raise UsageError(f"DMLC_PS_ROOT_PORT={os.environ['DMLC_PS_ROOT_PORT']} is not a port number")
    if role != "scheduler" and os.environ.get("PORT"):
        log.warning("PORT=%s is set: ps-lite binds this %s to that port (unset PORT to let it choose)",
                    os.environ["PORT"], role)


def check_worker(args, num_workers):
    """Everything a worker can check before it waits on the network; returns its data and where it starts."""
    from data import DataError, load_dataset
    from training.checkpoints import CheckpointError, check_train_dir
    from training.devices import DeviceError, check_devices

    try:
        check_devices(args.gpu)
        data = load_dataset(args.data_dir, args.dataset)
        resume = check_train_dir(args)
    except (DataError, DeviceError, CheckpointError) as err:
        raise UsageError(str(err))
    mode = modes.MODES[args.mode]
    check_mode(mode, args, num_workers)
    check_byzantine(args, num_workers)
    check_share(mode, args, num_workers, len(data.train_labels))
    check_folders({"-ld": os.path.join(args.log_dir, args.node_name), "--train-dir": args.train_dir})
    if mode.state_server:
        check_state_server(args)
    return data, resume


def check_mode(mode, args, num_workers):
    """The mode's own checks (training/modes.py)."""
    try:
        if mode.check:
            mode.check(args, num_workers)
    except modes.ModeError as err:
        raise UsageError(str(err))


def check_share(mode, args, num_workers, num_samples):
    """Each training worker's share of the training set (less a validator's held-out samples) holds a batch."""
    training_samples = num_samples - (args.validation_size if mode.validator else 0)
    training_workers = num_workers - mode.validator
    share = training_samples // training_workers
    if share < args.batch_size:
        raise UsageError(f"each of {training_workers} workers gets about {share} training samples, "
                         f"fewer than the batch size {args.batch_size}")


def check_folders(folders):
    """The last of the checks on this machine, because it creates the folders it is given ({flag: folder})."""
    from training.files import UnwritableFolder, check_writable

    try:
        for flag, folder in folders.items():
            if folder:
                check_writable(folder, flag)
    except UnwritableFolder as err:
        raise UsageError(str(err))


def check_byzantine(args, num_workers):
    mode = modes.MODES[args.mode]
    if args.validator and not mode.validator:
        with_validator = " or ".join(f"-m {m.name}" for m in modes.MODES.values() if m.validator)
        raise UsageError(f"--validator belongs to {with_validator}, not -m {args.mode}")
    if not args.byzantine:
        return
    if not mode.cluster:
        raise UsageError("--byzantine needs a cluster mode: a standalone worker has nobody to attack")
    training_workers = num_workers - mode.validator
    if args.byzantine >= training_workers:
        raise UsageError(f"--byzantine {args.byzantine} leaves no honest worker among {training_workers}")


def check_evaluator(args):
    """Everything the evaluator needs before it starts watching: the folders and the test set."""
    from data import DataError, load_test_set
    from training.devices import DeviceError, check_devices

    if not args.train_dir:
        raise UsageError(f"-m {args.mode} needs --train-dir (the folder the workers save checkpoints to)")
    if args.resume:
        raise UsageError(f"--resume is for the workers, not -m {args.mode}")
    try:
        check_devices(args.gpu)
        test_set = load_test_set(args.data_dir, args.dataset)
    except (DataError, DeviceError) as err:
        raise UsageError(str(err))
    check_folders({"-ld": args.log_dir})
    return test_set


def check_ps_role(args):
    """A scheduler or server given the job's --resume --train-dir looks for an intact checkpoint as the workers
    do, so that a job that cannot resume ends everywhere with the same error."""
    from training.checkpoints import CheckpointError, latest_intact_step

    if args.resume and args.train_dir:
        try:
            latest_intact_step(args.train_dir)
        except CheckpointError as err:
            raise UsageError(str(err))


def run_evaluator(args, test_set):
    from training.checkpoints import CheckpointError
    from training.devices import contexts
    from training.evaluator import Evaluator
    from training.model import Model

    images, labels = test_set
    model = Model(args.network, contexts(args.gpu, args.cpu)[:1], images.shape[1:], args.seed)
    try:
        Evaluator(args, model, images, labels).run()
    except CheckpointError as err:
        raise UsageError(str(err))


def check_state_server(args):
    from training.state_client import StateClient, StateServerUnavailable

    client = StateClient(args.state_server_ip, args.state_server_port,
                         retry_for=min(STATE_SERVER_STARTUP, args.sync_timeout))
    try:
        client.state()
    except StateServerUnavailable as err:
        raise UsageError(f"{err} (start it with: python SimpleStateServer/manage.py runserver 0.0.0.0:"
                         f"{args.state_server_port})")
    finally:
        client.close()


def watch_peers(args, role):
    """Start the peer monitor: a dead scheduler, server or worker ends this process instead of blocking it."""
    from training.peers import PeerMonitor, grace_for, resolve

    scheduler = resolve(os.environ["DMLC_PS_ROOT_URI"], int(os.environ["DMLC_PS_ROOT_PORT"]))
    return PeerMonitor(grace_for(args.sync_timeout), state_server_endpoints(args),
                       {peer: "the scheduler" for peer in scheduler}, expected_peers(role),
                       join_timeout=args.sync_timeout).start()


def state_server_endpoints(args):
    """What the peer monitor leaves alone: the state server is no ps-lite peer (it may restart, and a worker may
    not call it for a while; the state client bounds that wait itself)."""
    from training.peers import resolve

    if not modes.MODES[args.mode].state_server:
        return set()
    return resolve(args.state_server_ip, args.state_server_port)


def expected_peers(role):
    """Processes a scheduler or server connects to once the job has formed (ps-lite connects a node to every node
    of another role). None for a worker: its watchdog already bounds joining the cluster."""
    servers, workers = int(os.environ["DMLC_NUM_SERVER"]), int(os.environ["DMLC_NUM_WORKER"])
    return {"scheduler": servers + workers, "server": 1 + workers}.get(role)


def run_ps_role(args, role):
    from training import ps_node

    log.info("ps-lite %s (pid %d): scheduler at %s:%s, %s server(s), %s worker(s)", role, os.getpid(),
             os.environ["DMLC_PS_ROOT_URI"], os.environ["DMLC_PS_ROOT_PORT"],
             os.environ["DMLC_NUM_SERVER"], os.environ["DMLC_NUM_WORKER"])
    fault_injection.point(role, "start")
    ps_node.run(role, traceback_folder(args))
    fault_injection.point(role, "leaving")


def run_training(args, data, resume):
    from training.loop import train

    train(args, modes.scheme_class(args.mode), data, resume)


def traceback_folder(args):
    return os.path.join(args.log_dir, args.node_name)


def main(argv=None):
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s",
                        datefmt="%H:%M:%S")
    args = config.parse_args(argv)
    role = os.environ.get("DMLC_ROLE") or None
    try:
        configure_fault_injection()
        check_environment(role, args.mode)
        if role in ("scheduler", "server"):
            check_ps_role(args)
        elif args.mode == config.EVALUATE_MODE:
            test_set = check_evaluator(args)
        else:
            data, resume = check_worker(args, int(os.environ["DMLC_NUM_WORKER"]) if role else 1)
    except UsageError as err:
        print(f"main.py: error: {err}", file=sys.stderr)
        return 2
    if role in ("scheduler", "server"):
        return run_guarded(role, args, lambda: run_ps_role(args, role), in_cluster=True, peers=watch_peers(args, role))
    if args.mode == config.EVALUATE_MODE:
        return run_guarded("evaluator", args, lambda: run_evaluator(args, test_set), in_cluster=False)
    return run_guarded("worker", args, lambda: run_training(args, data, resume), in_cluster=role is not None,
                       peers=watch_peers(args, role) if role else None)


def configure_fault_injection():
    try:
        fault_injection.configure()
    except ValueError as err:
        raise UsageError(str(err))


def run_guarded(role, args, run, in_cluster, peers=None):
    """Run a role; whatever it raises ends it with one line and a non-zero exit, at once when in a cluster."""
    from training.state_client import StateServerError, StateServerUnavailable

    failures.fail_on_thread_errors(role, traceback_folder(args))
    try:
        code = run() or 0
    except UsageError as err:
        print(f"main.py: error: {err}", file=sys.stderr)
        return leave(2, in_cluster)
    except KeyboardInterrupt:
        log.warning("interrupted")
        return leave(failures.EXIT_INTERRUPTED, in_cluster)
    except Exception as err:
        failures.report(err, role, traceback_folder(args),
                        expected=(StateServerUnavailable, StateServerError, failures.JobSetupError))
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
