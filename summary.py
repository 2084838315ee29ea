"""Summarize the per-device iteration logs of one training run into a single JSON file (analysis/summary.py).

    python summary.py -b logs -n lenet -m esync
    python summary.py -b logs -n lenet --all --target 0.9
    python summary.py -b logs -n resnet18-v1 -m sync --num-params 11689512   # original logs, no meta.json
"""
import sys

from analysis.summary import main

if __name__ == "__main__":
    sys.exit(main())
