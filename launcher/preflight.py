"""The checks of an Experiment against this machine, before any process starts: network namespaces can be made
(--hosts netns), and every worker passes main.py's own checks of its command line, devices and data."""
import os

from training import config
from launcher import commands, netns
from training import checks
from training.checks import UsageError

PLACEHOLDER_STATE_SERVER = ("127.0.0.1", 1)  # the command line needs one; the checks never call it


def check_machine(experiment):
    """UsageError (one line) unless the experiment can start here."""
    if experiment.hosts == "netns":
        try:
            netns.check_available(experiment.netns_prefix)
        except netns.NetnsUnavailable as error:
            raise UsageError(str(error))
    check_workers_can_start(experiment)  # last: it creates the first mode's log folder


def check_workers_can_start(experiment):
    """main.py's checks of every worker's command line, and on this machine of its devices, data and log folder."""
    first_mode = experiment.modes[0]
    for index in range(experiment.num_workers):
        argv = commands.worker_argv(experiment, first_mode, index, os.devnull, PLACEHOLDER_STATE_SERVER)
        config.build_parser().parse_args(argv[1:])
    if experiment.tracker not in (None, "local"):
        return  # the devices and the data are on the other hosts
    os.environ.pop("DMLC_ROLE", None)  # importing mxnet under DMLC_ROLE=server would run a server here
    checked = set()
    for index, device in enumerate(experiment.devices):
        if device in checked:
            continue
        # As a sync worker (no state server to reach), in the first mode's real log folder: main.py checks that
        # it can be created and written.
        argv = commands.worker_argv(experiment, "sync", index, experiment.mode_folder(first_mode))
        args = config.parse_args(argv[1:])
        args.snapshot_dir = args.snapshot_seconds = None  # the launcher empties a mode's snapshots when it starts
        checks.check_worker(args, experiment.num_workers)
        checked.add(device)
