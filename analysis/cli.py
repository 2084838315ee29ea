"""What the command lines of summary.py and drawer.py share: the logs of one network to start from, a positive
count, and the way a tool's work ends on bad input."""
import argparse
import logging
import sys

from training.checks import OneLineErrorParser
from training.faults.failures import EXIT_USAGE


def positive_int(text):
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def logs_parser(description):
    """A command line that starts from the logs of one network: <base>/<network>/."""
    parser = OneLineErrorParser(description=description)
    parser.add_argument("-b", "--base-dir", default="logs", help="root of the logs (default: logs)")
    parser.add_argument("-n", "--network", required=True, help="network folder, e.g. lenet or resnet18-v1")
    return parser


def run_command(prog, verbose, command, usage_error):
    """Run a command-line tool's work: `usage_error` (bad input) ends it with one line and exit 2, a file that
    cannot be read or written with one line and exit 1."""
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return command()
    except (usage_error, OSError) as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return EXIT_USAGE if isinstance(error, usage_error) else 1
