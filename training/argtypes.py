"""The argparse types of the command line: each checks one value and says in one line what it expected."""
import argparse
import math
from dataclasses import dataclass

BOOL_WORDS = {"true": 1, "false": 0}  # the original scripts wrote -c True, -s False


@dataclass(frozen=True)
class Number:
    """A finite number of `kind` above 0 (or at least 0, where `zero_allowed`). A class, not a closure: the flags'
    declarations are pickled (training/mode_table.py)."""
    kind: type
    zero_allowed: bool

    def __call__(self, text):
        try:
            value = self.kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}")
        if not math.isfinite(value) or value < 0 or (value == 0 and not self.zero_allowed):
            raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}" if self.zero_allowed
                                             else f"expected a positive number, got {text!r}")
        return value


def positive(kind):
    return Number(kind, zero_allowed=False)


def non_negative(kind):
    return Number(kind, zero_allowed=True)


POSITIVE_INT = positive(int)
POSITIVE_FLOAT = positive(float)
NON_NEGATIVE_INT = non_negative(int)
NON_NEGATIVE_FLOAT = non_negative(float)


@dataclass(frozen=True)
class Fraction:
    """A number in (0, 1], or in (0, 1) when not `upper_included`."""
    upper_included: bool

    def __call__(self, text):
        try:
            value = float(text)
        except ValueError:
            value = None
        if value is None or not (0 < value < 1 or (self.upper_included and value == 1)):
            interval = "(0, 1]" if self.upper_included else "(0, 1)"
            raise argparse.ArgumentTypeError(f"expected a number in {interval}, got {text!r}")
        return value


SHARE = Fraction(upper_included=True)
OPEN_FRACTION = Fraction(upper_included=False)


def momentum(text):
    value = NON_NEGATIVE_FLOAT(text)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"expected a momentum in [0, 1), got {text!r}")
    return value


def mixing_weight(text):
    value = POSITIVE_FLOAT(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"--alpha is a weight in (0, 1], got {text!r}")
    return value


def accuracy(text):
    value = POSITIVE_FLOAT(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"--target-accuracy is a fraction in (0, 1], got {text!r}")
    return value


def gpu_ids(text):
    try:
        ids = [int(part) for part in text.split(",") if part.strip() != ""]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a GPU id or a comma list of ids, got {text!r}")
    if not ids or any(i < 0 for i in ids):
        raise argparse.ArgumentTypeError(f"expected non-negative GPU ids, got {text!r}")
    return ids


def cpu_count(text):
    """-c: a number of CPU contexts, or True (1) / False (0)."""
    word = text.strip().lower()
    if word in BOOL_WORDS:
        return BOOL_WORDS[word]
    try:
        return NON_NEGATIVE_INT(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected True, False or a number of CPU contexts, got {text!r}")


def switch(text):
    """A 0/1 flag: 1 or True, 0 or False."""
    word = text.strip().lower()
    value = BOOL_WORDS.get(word, {"1": 1, "0": 0}.get(word))
    if value is None:
        raise argparse.ArgumentTypeError(f"expected True, False, 1 or 0, got {text!r}")
    return value


def slowdowns(text):
    """One factor, or (-m hogwild) one per worker process."""
    factors = tuple(POSITIVE_FLOAT(part) for part in text.split(","))
    if any(value < 1 for value in factors):
        raise argparse.ArgumentTypeError(f"--slowdown must be >= 1 (a device F times slower), got {text!r}")
    return factors


def epochs_list(text):
    try:
        epochs = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a comma list of epochs, got {text!r}")
    if not epochs or any(not e > 0 for e in epochs) or list(epochs) != sorted(set(epochs)):
        raise argparse.ArgumentTypeError(f"expected increasing positive epochs, got {text!r}")
    return epochs
