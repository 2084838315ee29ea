"""What a process checks before it starts or joins a job, each problem reported as one UsageError line.

main.py runs these checks for its own role; the launcher runs a worker's checks for every worker before it
starts any process.
"""
import argparse
import logging
import os

from training import modes

from training.transport import collectives
from training.options import ModeError

ROLES = ("scheduler", "server", "worker")
DMLC_INTEGERS = ("DMLC_PS_ROOT_PORT", "DMLC_NUM_SERVER", "DMLC_NUM_WORKER")
STATE_SERVER_STARTUP = 10.0  # seconds a worker gives a state server started beside it to answer

log = logging.getLogger("main")  # its lines are main.py's


def first_sentence(doc):
    """A docstring's first sentence on one line: a parser's description (--help), where the first line may break
    mid-sentence."""
    text = " ".join(doc.split())
    end = text.find(". ")
    return text if end < 0 else text[:end + 1]


class OneLineErrorParser(argparse.ArgumentParser):
    """Reports a bad argument in one line instead of the whole usage text."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


class UsageError(Exception):
    """A mistake in the command line or the environment; reported in one line, exit code 2."""


def check_environment(role, mode, collective=collectives.PS):
    """The DMLC variables of `role` for `mode`, a catalog mode or the evaluator (which is not one)."""
    if role is not None and role not in ROLES:
        raise UsageError(f"DMLC_ROLE={role!r} is not one of {', '.join(ROLES)} (unset it to train on one device)")
    if mode not in modes.MODES:
        if role is not None:
            raise UsageError(f"-m {mode} runs beside the cluster, not in it: unset DMLC_ROLE")
        return
    if collectives.uses_mpi(collective):
        return  # check_collective: MPI's workers have no DMLC role
    if role is None:
        if modes.MODES[mode].cluster:
            standalone = " or ".join(f"-m {m.name}" for m in modes.MODES.values() if not m.cluster)
            raise UsageError(f"-m {mode} needs a cluster: start the scheduler, servers and workers with DMLC_ROLE "
                             f"and the DMLC_* variables (see README), or use {standalone}")
        return
    if role == "worker" and not modes.MODES[mode].cluster:
        raise UsageError(f"-m {mode} trains without a cluster: unset DMLC_ROLE, or choose a cluster mode "
                         f"(-m {', '.join(modes.cluster_names())})")
    check_dmlc_variables(role)


def check_collective(role, args):
    """--collective other than ps: a synchronous mode whose workers mpiexec started, with no ps-lite role."""
    if not collectives.uses_mpi(args.collective):
        return
    mode = modes.MODES.get(args.mode)
    if mode is None or not mode.synchronous:
        synchronous = ", ".join(modes.synchronous_names())
        raise UsageError(f"--collective {args.collective} sums the updates of a synchronous mode (-m {synchronous}); "
                         f"-m {args.mode} has no such aggregation: use --collective {collectives.PS}")
    if role is not None:
        raise UsageError(f"--collective {args.collective} runs the workers under mpiexec without ps-lite (no scheduler "
                         f"or servers): unset DMLC_ROLE")


def mpi_workers(args):
    """The number of workers of an MPI job, from MPI (which this starts); a rank alone is refused."""
    try:
        _, world = collectives.mpi_world(args.collective)
    except ImportError as err:
        raise UsageError(f"--collective {args.collective} needs MPICH and mpi4py (pip install -r requirements.txt): "
                         f"{err}")
    if world.Get_size() < 2:
        raise UsageError(f"--collective {args.collective}: this process is alone in its MPI job; start the workers "
                         f"together with mpiexec -n N (see docs/clusters.md)")
    return world.Get_size()


def check_dmlc_variables(role):
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


def check_worker(args, num_workers, virtual=False):
    """Everything a worker can check before it waits on the network; returns its data and where it starts.
    `virtual`: a worker of a job on a virtual clock, whose state server is in its process."""
    from data import DataError, load_dataset, resolve_data_dir
    from training.checkpoints import CheckpointError, check_train_dir
    from training.devices import DeviceError, check_devices
    from training.snapshots import SnapshotError, check_snapshot_dir

    searched = args.data_dir is None
    check_device_share(args.device_share)
    try:
        check_devices(args.gpu)
        check_snapshot_dir(args)
        args.data_dir = resolve_data_dir(args.data_dir, args.dataset)
        data = load_dataset(args.data_dir, args.dataset, args.holdout)
        resume = check_train_dir(args)
    except (DataError, DeviceError, CheckpointError, SnapshotError) as err:
        raise UsageError(str(err))
    mode = modes.MODES[args.mode]
    check_mode(mode, args, num_workers)
    check_worker_index(args.worker_index, num_workers)
    check_byzantine(args, num_workers)
    check_share(mode, args, num_workers, len(data.train_labels))
    check_folders({"-ld": os.path.join(args.log_dir, args.node_name), "--train-dir": args.train_dir,
                   "--snapshot-dir": args.snapshot_dir})
    if mode.state_server and not virtual:
        check_state_server(args)
    log.info("%s%s", data.source, " (-dd not given: the first of the data folders that holds it)" if searched else "")
    return data, resume


def check_worker_index(index, num_workers):
    """A position among the job's workers (validators included)."""
    if index is not None and index >= num_workers:
        raise UsageError(f"--worker-index {index}: the job has {num_workers} workers, at positions 0 to "
                         f"{num_workers - 1}")


def check_device_share(share):
    """A --device-share this machine can give: at most its cores, with a CPU controller this process may use."""
    from training.devices import cpu_quota

    if share is None:
        return
    cores = len(os.sched_getaffinity(0))
    if share > cores:
        raise UsageError(f"--device-share {share:g}: this machine has {cores} core(s)")
    if cpu_quota.opened_by_launcher():
        return
    try:
        cpu_quota.controller()
    except cpu_quota.QuotaUnavailable as err:
        raise UsageError(f"--device-share needs a CPU quota: {err}")


def check_mode(mode, args, num_workers):
    """The mode's own checks (its scheme's Options.check)."""
    try:
        mode.check(args, num_workers)
    except ModeError as err:
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
    if not args.byzantine:
        return
    if not mode.cluster:
        raise UsageError("--byzantine needs a cluster mode: a standalone worker has nobody to attack")
    training_workers = num_workers - mode.validator
    if args.byzantine >= training_workers:
        raise UsageError(f"--byzantine {args.byzantine} leaves no honest worker among {training_workers}")


def check_evaluator(args):
    """Everything the evaluator needs before it starts watching: the folders and the test set."""
    from data import DataError, load_test_set, resolve_data_dir
    from training.devices import DeviceError, check_devices

    if not args.train_dir:
        raise UsageError(f"-m {args.mode} needs --train-dir (the folder the workers save checkpoints to)")
    if args.resume:
        raise UsageError(f"--resume is for the workers, not -m {args.mode}")
    try:
        check_devices(args.gpu)
        args.data_dir = resolve_data_dir(args.data_dir, args.dataset)
        test_set = load_test_set(args.data_dir, args.dataset, args.holdout)
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


def check_state_server(args):
    from coordination.client import StateClient, StateServerUnavailable

    client = StateClient(args.state_server_ip, args.state_server_port,
                         retry_for=min(STATE_SERVER_STARTUP, args.sync_timeout))
    try:
        client.state()
    except StateServerUnavailable as err:
        raise UsageError(f"{err} (start it with: python SimpleStateServer/manage.py runserver 0.0.0.0:"
                         f"{args.state_server_port})")
    finally:
        client.close()
