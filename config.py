"""The command line of a training job is built in training/config.py from the job's flags and each scheme's
declared options (training/options.py). This script shows what a command line resolves to, as a worker would run it:

    python config.py -m esync -n lenet --dataset mnist-5k -b 32
"""
import json
import sys

from training.config import parse_args

if __name__ == "__main__":
    print(json.dumps(vars(parse_args(sys.argv[1:])), indent=1, sort_keys=True))
