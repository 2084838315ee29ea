"""The command lines of an experiment's processes: each worker's and the validator's main.py, the scheduler's and
servers', and the dmlc_tracker submission.

`state_server` is the (address, port) the workers of a mode reach the state server at, or None in the modes
without one.
"""
import os
import re
import shlex
import sys

from launcher.cluster import ROOT
from training import config, modes, runlog
from training.snapshots import evaluator_command
from training.transport import collectives
from training.checks import UsageError

MAIN_PY = os.path.join(ROOT, "main.py")
LAUNCH_PY = os.path.join(ROOT, "launch.py")

CPU_DEVICE = re.compile(r"^cpu([1-9]\d*)?$")
GPU_DEVICE = re.compile(r"^gpu(\d+)$")


def device_flags(device):
    """main.py flags of one --devices entry: cpu -> -c 1, cpu2 -> -c 2, gpu1 -> -g 1, gpu0+gpu1 -> -g 0,1."""
    cpu = CPU_DEVICE.match(device)
    if cpu:
        return ["-c", cpu.group(1) or "1"]
    gpus = [GPU_DEVICE.match(part) for part in device.split("+")]
    if all(gpus):
        return ["-g", ",".join(m.group(1) for m in gpus)]
    raise UsageError(f"--devices entry {device!r} is not cpu, cpuN, gpuK or gpuK+gpuL")


def shared_worker_args(experiment, mode, log_dir, state_server):
    """main.py arguments every worker of a mode gets; the device and the slowdown differ per worker."""
    e = experiment
    command = ["-m", mode, "-n", e.network, "--dataset", e.dataset, "-dd", e.data_dir, "-ld", log_dir,
               "--seed", str(e.seed), "--job-id", e.job_id(mode)]
    if e.node_name:
        command += ["--node-name", e.node_name]
    if e.non_iid:
        command += ["-s", "1"]
    if modes.MODES[mode].state_server and state_server:  # a virtual clock's is in its job's process
        address, port = state_server
        command += ["-ip", address, "-port", str(port)]
    if config.reads(mode, "esync_policy"):
        command += ["--esync-policy", e.esync_policy]
    if collectives.uses_mpi(e.cluster.collective) and modes.MODES[mode].cluster:
        command += ["--collective", e.cluster.collective]
    if e.byzantine:
        command += ["--byzantine", str(e.byzantine), "--attack", e.attack, "--attack-scale", str(e.attack_scale)]
    for flag, value in (("--max-time", e.max_time), ("--max-iters", e.max_iters),
                        ("--target-accuracy", e.target_accuracy)):
        if value is not None:
            command += [flag, str(value)]
    if e.cluster.device_share:
        command += ["--device-share", f"{e.cluster.device_share:g}"]
    if e.holdout:
        command += ["--holdout", str(e.holdout)]
    if e.checkpoint_every:
        command += checkpoint_args(experiment, mode)
    return (command + evaluation_args(experiment, mode) + list(e.tuned_flags.get(mode, ()))
            + config.flags_for_mode(e.worker_args, mode))


CHECKPOINT_EVERY = 50  # global iterations between a job's checkpoints, to restart from (--checkpoint-every)
KEPT_CHECKPOINTS = 2  # the newest kept: a restart needs one whole, and the newest may be cut by the failure


def checkpoint_folder(experiment, mode):
    """Where a mode's job saves the checkpoints it restarts from."""
    return os.path.join(experiment.mode_folder(mode), runlog.CHECKPOINTS_FOLDER, experiment.run_id)


def checkpoint_args(experiment, mode):
    """Checkpoints to restart from, and --resume from the newest when a restarted job has one."""
    from training.checkpoints import saved_steps

    folder = checkpoint_folder(experiment, mode)
    resume = ["--resume"] if experiment.resuming and saved_steps(folder) else []
    return ["--train-dir", folder, "--save-freq", str(experiment.checkpoint_every),
            "--keep-checkpoints", str(KEPT_CHECKPOINTS)] + resume


def evaluation_args(experiment, mode):
    """How rank 0 hands its model to be evaluated: snapshots for the evaluator process, which the launcher starts
    here, or rank 0 beside itself where the snapshots land on another host (a remote --tracker); at the end only with
    --snapshot-seconds 0."""
    period = experiment.snapshot_seconds
    if not period:
        return ["-e", "0"]
    if experiment.backend.evaluates_in_loop:
        return ["--eval-seconds", f"{period:g}"]
    snapshots = ["--snapshot-seconds", f"{period:g}", "--snapshot-dir", experiment.snapshot_folder(mode)]
    return snapshots if experiment.evaluator_runs else snapshots + ["--evaluator-beside"]


def evaluator_argv(experiment, mode):
    """The evaluator process of a mode: it tests the snapshots in the mode's folder and logs beside its nodes. It
    waits for snapshots as long as the mode may run."""
    e = experiment
    return evaluator_command(e.snapshot_folder(mode), e.mode_folder(mode), e.network, e.dataset, e.data_dir,
                             e.wall_limit, e.holdout)


def worker_argv(experiment, mode, index, log_dir, state_server=None):
    """Worker `index`'s main.py command line: its --devices entry, its slowdown and its position."""
    return ([MAIN_PY] + shared_worker_args(experiment, mode, log_dir, state_server)
            + device_flags(experiment.cluster.devices[index]) + ["--slowdown", experiment.cluster.slowdowns[index]]
            + ["--worker-index", str(index)])


def validator_argv(experiment, mode, index, log_dir, state_server=None):
    """Validator `index`'s: its position is after the training workers'."""
    return ([MAIN_PY] + shared_worker_args(experiment, mode, log_dir, state_server)
            + device_flags(experiment.validator_device)
            + ["--validator", "--worker-index", str(experiment.num_workers + index)])


def standalone_argv(experiment, mode, log_dir):
    """The main.py command line of a mode without a cluster: the fastest worker's device and slowdown; Hogwild!'s
    coordinator starts one process per --devices entry, each with its slowdown."""
    cluster = experiment.cluster
    fastest = cluster.fastest_worker
    if mode == modes.HOGWILD:
        per_worker = ["--hogwild-workers", str(cluster.num_workers), "--slowdown", ",".join(cluster.slowdowns)]
    else:
        per_worker = ["--slowdown", cluster.slowdowns[fastest]]
    return ([MAIN_PY] + shared_worker_args(experiment, mode, log_dir, None)
            + device_flags(cluster.devices[fastest]) + per_worker)


def workers_argv(experiment, mode, log_dir, state_server=None):
    """Every worker's command line, the validators' last in the modes that have them."""
    argvs = [worker_argv(experiment, mode, w, log_dir, state_server) for w in range(experiment.num_workers)]
    if modes.MODES[mode].validator:
        argvs += [validator_argv(experiment, mode, v, log_dir, state_server) for v in range(experiment.validators)]
    return argvs


def ps_argv(experiment, mode):
    """The scheduler's and the servers' command line."""
    return [MAIN_PY, "-m", mode] + sync_timeout_args(experiment.worker_args)


def sync_timeout_args(worker_args):
    """The workers' --sync-timeout, which the scheduler and servers use too (a dead peer, a job that never forms)."""
    for index, token in enumerate(worker_args):
        if token.startswith("--sync-timeout="):
            return [token]
        if token == "--sync-timeout" and index + 1 < len(worker_args):
            return list(worker_args[index:index + 2])
    return []


def tracker_argv(experiment, mode, log_dir, state_server=None):
    """`launch.py submit DMLC-OPTIONS -- COMMAND`, COMMAND being the `launch.py task` every task runs."""
    e = experiment
    dmlc_options = ["--cluster", e.tracker, "--num-workers", str(e.num_workers),
                    "--num-servers", str(e.cluster.num_servers), "--host-ip", e.host_ip]
    if e.hostfile:
        dmlc_options += ["--host-file", e.hostfile]
    task = [sys.executable, LAUNCH_PY, "task", "--devices", ",".join(e.cluster.devices),
            "--slowdown", ",".join(e.cluster.slowdowns), "--"] + shared_worker_args(e, mode, log_dir, state_server)
    # dmlc_tracker joins the command with spaces and hands it to a shell.
    return [LAUNCH_PY, "submit"] + dmlc_options + ["--"] + [shlex.quote(part) for part in task]
