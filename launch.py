"""Run one experiment: the same job under several synchronization modes, one after another, then summarize and
draw the comparison.

    python launch.py --modes esync,sync,async -n lenet --dataset mnist-5k --slowdown 1,1,4 --max-time 60
    python launch.py --modes esync,sync --devices gpu0,gpu1,gpu0+gpu1 -n resnet18-v1 --max-iters 2000 -- -b 32
    python launch.py --tracker ssh -H hosts --host-ip 10.0.0.1 --modes sync --devices gpu0,gpu0 --max-time 600
    python launch.py clean-netns [PREFIX]    # network namespaces a killed `--hosts netns` run left behind
    python launch.py paper [--repeats R]     # the ESync paper's experiment: Table 1, Figures 3-5 (launcher/studies/paper.py)
    python launch.py sweep --rho 0.2,0.6,1 --modes zeno ...   # one run per value, final accuracy against it
    python launch.py regimes [--repeats R]   # every scheme over links x heterogeneity x data split: who wins where
    python launch.py tune --trials 8         # each scheme's values searched in one cell (launcher/studies/tune.py)
    python launch.py study [NAME]            # the declared studies, or one run as declared (launcher/studies/registry.py)
    python launch.py docs [--check]          # the docs' result tables again from the committed results
    python launch.py calibrate -n lenet --slowdown 1,4 --out devices.json   # the fast step, for --clock virtual
    python launch.py noise-scale -n lenet --devices 4    # the gradient noise scale: the most SSGD on n devices buys
    python launch.py rate-sweep -n lenet --devices 1,4   # steps to a target against the rate, per device count

Without --tracker every process runs on this machine on 127.0.0.1: the state server (esync and nbsync only), the
ps-lite scheduler, -s servers and one worker per --devices entry. Per mode, the iteration logs go to
<log-dir>/<network>/<mode>[-niid]/<node>/<device>-worker<I>/, and each process's output to <name>.log in the
processes/ folder beside them, with their PIDs in processes/pids.json.

With --tracker, MXNet's own dmlc_tracker starts the scheduler, servers and workers (see --help). The launcher
itself lives in launcher/.
"""
import importlib
import logging
import os
import sys

from launcher import checks, runner
from launcher.experiment import parse
from training.checks import UsageError
from training.faults.failures import EXIT_INTERRUPTED, EXIT_USAGE

# Each imported when called: SciPy's statistics alone (the docs' tables) cost half a second of every command's start.
SUBPROGRAMS = {"submit": "launcher.dmlc:submit", "task": "launcher.dmlc:run_task",
               "clean-netns": "launcher.netns:clean_command", "paper": "launcher.studies.paper:run",
               "sweep": "launcher.studies.sweep:run", "regimes": "launcher.studies.regime_map:run",
               "tune": "launcher.studies.tune:run", "docs": "analysis.doc_tables:run",
               "calibrate": "launcher.calibrate:calibrate", "study": "launcher.studies.registry:run",
               "noise-scale": "launcher.studies.noise_scale:run", "rate-sweep": "launcher.studies.rate_sweep:run"}


def subprogram(name):
    module, function = SUBPROGRAMS[name].split(":")
    return getattr(importlib.import_module(module), function)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in SUBPROGRAMS:
        return subprogram(argv[0])(argv[1:])
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s",
                        datefmt="%H:%M:%S")
    try:
        experiment = parse(argv)
        checks.check_machine(experiment)
    except UsageError as error:
        print(f"launch.py: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    return runner.run(experiment)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # the reader of the output left (`launch.py study | head`): nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the flush at exit would fail again
        sys.exit(1)
