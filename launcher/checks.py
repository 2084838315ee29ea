"""What the launcher checks before anything starts, each a one-line UsageError: its command line beyond each flag's
type (combinations that cannot run), and an Experiment against this machine (check_machine: network namespaces can
be made with --hosts netns, and every worker passes main.py's own checks of its command line, devices and data)."""
import os

from launcher import backends
from launcher.dmlc import TRACKERS_WITH_TASK_INDEX
from training import config, modes
from training.checks import UsageError
from training.transport import collectives

IN_LOOP_EVALUATION_FLAGS = ("-e", "--eval-duration", "--eval-freq", "--eval-seconds")
RESERVED_WORKER_FLAGS = {  # set by the launcher itself; given after `--` they would silently break the run
    "-m", "--mode", "-dcasgd", "--use-dcasgd", "--zeno-flavour", "-ld", "--log-dir", "--node-name", "-c", "--cpu",
    "-g", "--gpu", "--slowdown", "-ip", "--state-server-ip", "-port", "--state-server-port", "-s", "--split-by-class",
    "-n", "--network", "--dataset", "-dd", "--data-dir", "--seed", "--max-time", "--max-iters", "--target-accuracy",
    "--esync-policy", "--byzantine", "--attack", "--attack-scale", "--validator", "--collective",
    "--snapshot-seconds", "--snapshot-dir", "--device-share",
}


def check_limits(ns, num_workers):
    if ns.max_time is None and ns.max_iters is None:
        raise UsageError("give --max-time or --max-iters (a target accuracy alone may never be reached)")
    if ns.num_servers < 1:
        raise UsageError(f"-s {ns.num_servers}: at least one server is needed")
    if ns.progress_every <= 0 or (ns.wall_limit is not None and ns.wall_limit <= 0):
        raise UsageError("--progress-every and --wall-limit must be positive")
    if ns.max_restarts < 0 or ns.checkpoint_every < 0:
        raise UsageError("--max-restarts and --checkpoint-every must be 0 or more")
    if not 0 <= ns.byzantine < num_workers:
        raise UsageError(f"--byzantine {ns.byzantine}: must leave at least one of the {num_workers} "
                         "workers honest")


def check_tracker(ns, devices, slowdowns):
    if ns.tracker is None:
        if ns.hostfile or ns.host_ip:
            raise UsageError("-H/--hostfile and --host-ip only apply with --tracker")
        return
    if ns.tracker == "sge":
        raise UsageError("--tracker sge: the sge launcher shipped with mxnet 1.9.1 cannot start a ps-lite job "
                         "(it reads options its opts.py does not define, logdir and vcores, and never sets DMLC_ROLE)")
    if ns.tracker != "local" and not ns.host_ip:
        raise UsageError(f"--tracker {ns.tracker} needs --host-ip: this machine's address as the hosts reach it")
    if ns.tracker == "ssh" and not ns.hostfile:
        raise UsageError("--tracker ssh needs -H/--hostfile")
    if ns.tracker not in TRACKERS_WITH_TASK_INDEX and (len(set(devices)) > 1 or len(set(slowdowns)) > 1):
        raise UsageError(f"--tracker {ns.tracker} starts identical workers: give the same device to each "
                         "(e.g. --devices gpu0,gpu0) and one --slowdown")
    if ns.hosts == "netns":
        raise UsageError("--hosts netns starts the processes itself: leave out --tracker")


def check_modes_read(ns, chosen, defaults):
    """A launcher option set away from its default that no chosen mode reads would be ignored: refused. `defaults`:
    the launcher's options as parsed from no arguments."""
    readers = (("esync_policy", "--esync-policy", lambda mode: config.reads(mode, "esync_policy")),
               ("validators", "--validators", lambda mode: modes.MODES[mode].validator),
               ("validator_device", "--validator-device", lambda mode: modes.MODES[mode].validator))
    for name, flag, reads in readers:
        if getattr(ns, name) != getattr(defaults, name) and not any(reads(mode) for mode in chosen):
            takers = ", ".join(mode for mode in modes.MODES if reads(mode))
            raise UsageError(f"{flag} {getattr(ns, name)}: no mode of --modes {','.join(chosen)} reads it "
                             f"(-m {takers} read it)")
    for name, flag in (("attack", "--attack"), ("attack_scale", "--attack-scale")):
        if getattr(ns, name) != getattr(defaults, name) and not ns.byzantine:
            raise UsageError(f"{flag} {getattr(ns, name)} is what the Byzantine workers do: give --byzantine K too")


def check_validators(tracker, chosen):
    validated = [mode for mode in chosen if modes.MODES[mode].validator]
    if tracker and validated:
        raise UsageError(f"--modes {validated[0]} needs its validator process, which --tracker does not start: "
                         f"run {validated[0]} without --tracker, or start its processes by hand (README)")


def check_standalone(ns, chosen):
    alone = [mode for mode in chosen if not modes.MODES[mode].cluster]
    if alone and ns.tracker:
        raise UsageError(f"--modes {alone[0]} trains one process on this machine, which --tracker does not start: "
                         "leave out --tracker or that mode")
    if alone and ns.byzantine:
        raise UsageError(f"--modes {alone[0]} has no other worker to attack: leave out --byzantine or that mode")
    aggregation = [text for text, given in ((f"--collective {ns.collective}", collectives.uses_mpi(ns.collective)),
                                            (f"-s {ns.num_servers}", ns.num_servers != 1)) if given]
    if aggregation and len(alone) == len(chosen):
        raise UsageError(f"{aggregation[0]}: --modes {','.join(chosen)} trains alone, with nothing to aggregate; it "
                         "sets how a cluster mode aggregates")


def check_collective(ns, chosen):
    if not collectives.uses_mpi(ns.collective):
        return
    unable = [mode for mode in chosen if modes.MODES[mode].cluster and not modes.MODES[mode].synchronous]
    if unable:
        raise UsageError(f"--collective {ns.collective} sums the updates of a synchronous mode; --modes {unable[0]} "
                         f"has no such aggregation (synchronous: {', '.join(modes.synchronous_names())})")
    if ns.tracker:
        raise UsageError(f"--collective {ns.collective} starts the workers under mpiexec: leave out --tracker")
    if ns.num_servers != 1:
        raise UsageError(f"-s {ns.num_servers}: --collective {ns.collective} has no servers")


def check_worker_args(worker_args):
    for token in worker_args:
        flag = token.split("=", 1)[0]
        if flag in IN_LOOP_EVALUATION_FLAGS:
            raise UsageError(f"{token} after --: the launcher's workers never evaluate in their loop; the evaluator "
                             "process tests rank 0's snapshots every --snapshot-seconds (a launcher option)")
        if flag in RESERVED_WORKER_FLAGS:
            raise UsageError(f"{token} after -- is set by the launcher; use the launcher's own option")


def check_worker_flags_read(worker_args, chosen):
    """A scheme's flag after -- that no mode of the command reads: each run hands a mode only the flags it reads
    (config.flags_for_mode), so it would be dropped from every run."""
    unread = config.unread_flag(worker_args, chosen)
    if unread:
        token, flag = unread
        raise UsageError(f"{token} after --: no mode of the command ({', '.join(chosen)}) reads it "
                         f"(-m {', '.join(flag.readers)} read it)")


def check_snapshot_seconds(seconds):
    if not 0 <= seconds < float("inf"):
        raise UsageError(f"--snapshot-seconds {seconds:g}: give a period in seconds, or 0 for no evaluation")


def check_comm_ratio(ns):
    if ns.comm_ratio is None:
        return
    if not 0 < ns.comm_ratio < float("inf"):
        raise UsageError(f"--comm-ratio {ns.comm_ratio:g}: give a positive ratio (transfer time / fast step time)")
    if not backends.of(ns).link_rates_apply:
        raise UsageError("--comm-ratio sets the rate of shaped links: give --hosts netns too (loopback has no rate "
                         "to set), or --clock virtual")
    if ns.bandwidth is not None:
        raise UsageError("--comm-ratio sets the workers' links' rate: leave out --bandwidth")


def check_clock(ns, chosen, worker_args=()):
    """A job on a virtual clock: a step time, and nothing it does not model (one line each)."""
    from training.clocks import job

    backend = backends.of(ns)
    backend.check(ns)
    if not backend.charges_time:
        return
    for mode in chosen:
        why = job.refusal(mode, ns) or job.refusal(mode, worker_options(mode, worker_args))
        if why:
            raise UsageError(f"--clock virtual: {why}")



def worker_options(mode, worker_args):
    """A worker's options of `mode` with the arguments after --; None where they do not parse (the workers' own
    check says why)."""
    import contextlib
    import io

    from training import config

    try:
        with contextlib.redirect_stderr(io.StringIO()):
            return config.parse_args(["-m", mode, *worker_args])
    except (SystemExit, ValueError):
        return None


# ----------------------------------------------------------------------------------------------
# An Experiment against this machine

PLACEHOLDER_STATE_SERVER = ("127.0.0.1", 1)  # the command line needs one; the checks never call it


def check_machine(experiment):
    """UsageError (one line) unless the experiment can start here."""
    from launcher import netns

    if experiment.cluster.hosts == "netns":
        try:
            netns.check_available(experiment.cluster.netns_prefix)
        except netns.NetnsUnavailable as error:
            raise UsageError(str(error))
    check_workers_can_start(experiment)  # last: it creates the first mode's log folder


def check_workers_can_start(experiment):
    """main.py's checks of every worker's command line, and on this machine of its devices, data and log folder."""
    from launcher import commands
    from training import checks as worker_checks, config

    first_mode = experiment.modes[0]
    for index in range(experiment.num_workers):
        argv = commands.worker_argv(experiment, first_mode, index, os.devnull, PLACEHOLDER_STATE_SERVER)
        config.build_parser().parse_args(argv[1:])
    if experiment.tracker not in (None, "local"):
        return  # the devices and the data are on the other hosts
    os.environ.pop("DMLC_ROLE", None)  # importing mxnet under DMLC_ROLE=server would run a server here
    checked = set()
    for index, device in enumerate(experiment.cluster.devices):
        if device in checked:
            continue
        # As a sync worker (no state server to reach), in the first mode's real log folder: main.py checks that
        # it can be created and written.
        argv = commands.worker_argv(experiment, "sync", index, experiment.mode_folder(first_mode))
        args = config.parse_args(argv[1:])
        args.snapshot_dir = args.snapshot_seconds = None  # the launcher empties a mode's snapshots when it starts
        worker_checks.check_worker(args, experiment.num_workers)
        checked.add(device)
