"""A cluster declared in a file (`launch.py --cluster FILE`, TOML or JSON): its devices, its links, its parameter
servers and its state server, in one place, run in real time or on the virtual clock. The launcher's flags stay its
shorthand: each field is one flag (FIELDS), and a flag given beside the file that sets the same thing is refused.

    [devices]
    slowdown = "4x1,2x117"     # or a list [1, 1, 1, 1, 117, 117]; one worker each
    count = 6                  # optional: checked against slowdown
    step_seconds = 0.03        # --clock virtual: a step of one batch at slowdown 1, or a calibration file
    jitter = 0.0               # --clock virtual: the log-normal spread of each step's charge
    overhead = 0.0             # --clock virtual: seconds each step besides

    [links]                    # each worker's link
    comm_ratio = 12            # one transfer of the model lasts 12 fast steps; or bandwidth = "100mbit"
    latency = 0.0              # --clock virtual: seconds a transfer
    slowdown = "4x1,2x4"       # optional: each worker's link this many times slower, like devices.slowdown

    [servers]                  # ps-lite's parameter servers
    count = 6
    bandwidth = "6x"           # each server's link: a rate, or a multiple of the workers'
    apply = 0.001              # --clock virtual: seconds a server adds a pushed megabyte

    [state_server]
    round_trip = 0.002         # --clock virtual: seconds a request to the state server

Every problem is one line naming the field: an unknown section or key, a negative number, a count that disagrees
with the slowdowns, a rate that is not one.
"""
import json
import os
import tomllib

from launcher import backends, workers
from training.checks import UsageError
from training.clocks import network

# (section, key): (the launcher's attribute, the flag, its kind)
FIELDS = {
    ("devices", "slowdown"): ("slowdown", "--slowdown", "slowdowns"),
    ("devices", "step_seconds"): ("step_seconds", "--step-seconds", "seconds or file"),
    ("devices", "jitter"): ("step_jitter", "--step-jitter", "non-negative"),
    ("devices", "overhead"): ("step_overhead", "--step-overhead", "non-negative"),
    ("links", "comm_ratio"): ("comm_ratio", "--comm-ratio", "positive"),
    ("links", "bandwidth"): ("bandwidth", "--bandwidth", "rate"),
    ("links", "latency"): ("latency", "--latency", "non-negative"),
    ("links", "slowdown"): ("link_slowdown", "--link-slowdown", "slowdowns"),
    ("servers", "count"): ("num_servers", "-s", "count"),
    ("servers", "bandwidth"): ("ps_bandwidth", "--ps-bandwidth", "server rate"),
    ("servers", "apply"): ("server_apply", "--server-apply", "non-negative"),
    ("state_server", "round_trip"): ("round_trip", "--round-trip", "non-negative"),
}
CHECKED_ONLY = {("devices", "count")}  # read to check the file against itself
SECTIONS = sorted({section for section, _ in (*FIELDS, *CHECKED_ONLY)})
# What a real run measures rather than charges.
CHARGED_ONLY = backends.Charges.names()


def read(path):
    """({launcher attribute: value}, devices.count or None) of the cluster file at `path`; UsageError (one line,
    naming the field)."""
    name = os.path.basename(path)
    values, count = {}, None
    for section, table in load(path, name).items():
        if section not in SECTIONS:
            raise UsageError(f"{name}: [{section}]: unknown section (known: {', '.join(SECTIONS)})")
        if not isinstance(table, dict):
            raise UsageError(f"{name}: {section}: give a table of fields, not {table!r}")
        for key, value in table.items():
            field = f"{section}.{key}"
            if (section, key) in CHECKED_ONLY:
                count = whole(name, field, value, least=1)
            elif (section, key) in FIELDS:
                attribute, _, kind = FIELDS[section, key]
                values[attribute] = checked(name, field, kind, value, path)
            else:
                known = sorted(k for s, k in (*FIELDS, *CHECKED_ONLY) if s == section)
                raise UsageError(f"{name}: {field}: unknown field (known in [{section}]: {', '.join(known)})")
    if "comm_ratio" in values and "bandwidth" in values:
        raise UsageError(f"{name}: links.comm_ratio and links.bandwidth both set the workers' links: give one")
    return values, count


def load(path, name):
    try:
        with open(path, "rb") as f:
            if path.endswith(".json"):
                document = json.load(f)
            else:
                document = tomllib.load(f)
    except OSError as error:
        raise UsageError(f"--cluster {path}: {error.strerror or error}") from None
    except (ValueError, tomllib.TOMLDecodeError) as error:
        kind = "JSON" if path.endswith(".json") else "TOML"
        raise UsageError(f"{name}: not {kind}: {error}") from None
    if not isinstance(document, dict):
        raise UsageError(f"{name}: give sections of fields ([devices], [links], ...)")
    return document


def checked(name, field, kind, value, path):
    """The value as the launcher's option takes it; UsageError naming `field` unless it is of `kind`."""
    if kind == "slowdowns":
        text = ",".join(str(v) for v in value) if isinstance(value, list) else str(value)
        workers.parse_factors(text, f"{name}: {field}")
        return text
    if kind == "count":
        return whole(name, field, value, least=1)
    if kind in ("rate", "server rate"):
        try:
            (network.parse_rate if kind == "rate" else network.parse_server_rate)(str(value))
        except ValueError as error:
            raise UsageError(f"{name}: {field}: {error}") from None
        return str(value)
    if kind == "seconds or file" and isinstance(value, str):
        return os.path.join(os.path.dirname(os.path.abspath(path)), value)  # relative to the file
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not abs(value) < float("inf"):
        raise UsageError(f"{name}: {field} {value!r}: give a number")
    positive = kind != "non-negative"
    if not (value > 0 if positive else value >= 0):
        raise UsageError(f"{name}: {field} {value}: give a number {'above 0' if positive else 'of 0 or more'}")
    return str(value) if kind == "seconds or file" else float(value)


def whole(name, field, value, least):
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise UsageError(f"{name}: {field} {value!r}: give a whole number of {least} or more")
    return value


def apply(ns, defaults):
    """Set `ns`'s options from its --cluster file; UsageError where the command line also sets one of them (an
    option that differs from its default in `defaults`). On the real clock the file's charges are left out, with
    a line saying so: a real run measures its devices' steps, the links' latency and the state server's round trip."""
    path = ns.cluster
    name = os.path.basename(path)
    declared, count = read(path)
    for attribute, value in declared.items():
        given = getattr(ns, attribute)
        if given != getattr(defaults, attribute):
            flag = next(flag for a, flag, _ in FIELDS.values() if a == attribute)
            raise UsageError(f"{flag} {given}: {name} declares it too: give it in one place")
        setattr(ns, attribute, value)
    if count is not None:
        check_count(ns, name, count)
    measured = [attribute for attribute in CHARGED_ONLY if attribute in declared]
    if measured and not backends.of(ns).charges_time:
        for attribute in measured:
            setattr(ns, attribute, getattr(defaults, attribute))
        fields = ", ".join(f"{s}.{k}" for (s, k), (a, _, _) in FIELDS.items() if a in measured)
        print(f"{name}: {fields} charged on the virtual clock only; this real run measures them", flush=True)


def check_count(ns, name, count):
    """devices.count against the workers the slowdowns or --devices list; a single slowdown is every device's."""
    listed = len(workers.parse_factors(ns.slowdown)) if ns.slowdown else None
    devices = len(ns.devices.split(",")) if ns.devices else None
    if devices is None and listed in (None, 1):
        ns.slowdown = f"{count}x{ns.slowdown or 1}"
    elif (devices or listed) != count:
        source = "--devices" if devices else "the slowdowns"
        raise UsageError(f"{name}: devices.count {count} but {source} list {devices or listed} devices")
