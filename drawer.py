"""Draw the comparison figures of every algorithm run on one network, and print the table behind them
(analysis/figures.py).

    python drawer.py -b logs -n lenet
    python drawer.py -b logs -n resnet18-v1 --pdf --smooth 5 --every 2 --standalone-accuracy 0.93
"""
import sys

from analysis.figures import main

if __name__ == "__main__":
    sys.exit(main())
