"""A run's charges from a calibration file (`launch.py calibrate`, launcher/calibrate.py): a run given the file
(`--clock virtual --step-seconds FILE`) is charged every field of it; a flag given beside it (`--step-overhead`,
`--step-jitter`, `--round-trip`, `--server-apply`) overrides its field: declared numbers over measured ones. In real
time (`--hosts netns --comm-ratio R --step-seconds FILE`, or `launch.py regimes --links R --step-seconds FILE`) the
file's step sizes the shaped links instead of a run before the first: both clocks then run on the same links.
"""
from launcher import backends, comm_ratio
from training import config
from training.checks import UsageError
from training.files import read_json

CHARGES = (("step_overhead", "overhead_seconds", 0.0), ("step_jitter", "jitter", 0.0),
           ("round_trip", "round_trip_seconds", 0.0), ("server_apply", "server_apply_seconds_per_mb", 0.0))


def resolve_charges(ns, worker_args):
    """Set `ns.step_seconds` from --step-seconds (a number, or a file of launch.py calibrate for this run) and each
    charge of CHARGES left unset (None) from that file, else its default; in real time only `ns.link_probe` from it
    (link_probe). UsageError (one line) for a file that is not one, or was measured for another network, data set or
    batch size."""
    given, record = ns.step_seconds, {}
    if not backends.of(ns).charges_time:
        ns.link_probe, given = link_probe(given, ns, worker_args), None  # the file's charges are the clock's
    ns.link_probe = getattr(ns, "link_probe", None)
    if given is not None and not isinstance(given, float):
        try:
            ns.step_seconds = float(given)
        except ValueError:
            try:
                record = calibrated_record(given, ns.network, ns.dataset, worker_args)
            except ValueError as error:
                raise UsageError(f"--step-seconds {error}") from None
            ns.step_seconds = float(record["step_seconds"])
    for attribute, field, default in CHARGES:
        if getattr(ns, attribute, None) is None:
            setattr(ns, attribute, float(record.get(field) or default))


def link_probe(given, ns, worker_args):
    """In real time, the Probe --comm-ratio sizes the links by, from a calibration file (--step-seconds FILE) rather
    than a run before the first (the same links as a virtual run given the file); None without one."""
    if given is None:
        return None
    try:
        float(given)
    except ValueError:
        pass
    else:
        raise UsageError(f"--step-seconds {given}: a number of seconds is charged on --clock virtual; in real time "
                         "give a file of launch.py calibrate, whose step sizes --comm-ratio's links")
    try:
        record = calibrated_record(given, ns.network, ns.dataset, worker_args)
    except ValueError as error:
        raise UsageError(f"--step-seconds {error}") from None
    return comm_ratio.Probe(float(record["step_seconds"]), float(record["compute_seconds"]),
                            int(record["model_bytes"]), float(record["period_seconds"]), float(record["jitter"]))


def calibrated_record(path, network, dataset, worker_args):
    """The record of a calibration file for a run of `network` on `dataset` at its batch size; ValueError (one
    line) where the file is not one, or was measured for another network, data set or batch size."""
    try:
        record = read_json(path)
        step = float(record["step_seconds"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{path} is neither a number of seconds nor a file of launch.py calibrate ({error})") from None
    wanted = {"network": network, "dataset": dataset, "batch_size": batch_size_of(worker_args)}
    differing = {key: record.get(key) for key, value in wanted.items() if record.get(key) != value}
    if differing:
        said = ", ".join(f"{key} {value}" for key, value in differing.items())
        raise ValueError(f"{path} was calibrated for {said}, not for this run's "
                         + ", ".join(f"{key} {wanted[key]}" for key in differing))
    if not step > 0:
        raise ValueError(f"{path}: a step of {step} s")
    return record


def batch_size_of(worker_args):
    """The batch size the workers' arguments give (main.py's default without -b)."""
    import argparse

    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("-b", "--batch-size", type=int, default=config.default("batch_size"))
    return p.parse_known_args(list(worker_args))[0].batch_size
