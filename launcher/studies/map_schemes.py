"""A scheme of `launch.py regimes`, as the launcher runs it: its name checked (analysis/scheme_names.py says what
it means), its mode, the launcher's options and the workers' flags it adds, and the devices it trains on in a cell.
`launch.py tune` searches a scheme through the same parts.
"""
from analysis import scheme_names, tuned
from launcher import workers
from training import esync_variants, modes
from training.checks import UsageError
from training.schemes import esync
from training.transport import collectives


def check(scheme):
    """UsageError (one line) unless the map can run `scheme`."""
    mode, _ = scheme_names.mode_of(scheme)
    if scheme == scheme_names.STANDALONE:
        return
    if mode not in modes.MODES or not modes.MODES[mode].cluster:
        raise UsageError(f"--schemes {scheme}: not a cluster mode (known: {', '.join(modes.cluster_names())}), "
                         f"{scheme_names.STANDALONE}, {scheme_names.FAST_ONLY} "
                         f"or esync-<policy>[-overlap][-drift] ({', '.join(esync.POLICIES)}), "
                         f"each synchronous one optionally @<collective>, any @sharded, any on the fast devices "
                         f"alone as {scheme_names.FAST}<scheme>")
    check_collective(scheme, mode)
    parts(scheme)


def check_collective(scheme, mode):
    base, collective = scheme_names.collective_of(scheme)
    if collective == scheme_names.SHARDED:
        return  # every cluster mode of the map aggregates over the parameter server by default
    if collective is not None and collective not in collectives.MPI_ALGORITHMS:
        raise UsageError(f"--schemes {scheme}: no collective {collective!r} (give one of "
                         f"{', '.join(collectives.MPI_ALGORITHMS)}, or {scheme_names.SHARDED}: a parameter server "
                         "per worker)")
    if collective and not modes.MODES[mode].synchronous:
        raise UsageError(f"--schemes {scheme}: only a synchronous mode sums over a collective "
                         f"({', '.join(modes.synchronous_names())}, ESync's variants)")


def parts(scheme):
    """(mode, the launcher's options, the workers' flags) of one of the map's schemes."""
    mode, variant = scheme_names.mode_of(scheme)
    collective = scheme_names.collective_of(scheme)[1]
    over = {"collective": collective} if collective and collective != scheme_names.SHARDED else {}
    if not variant:
        return mode, over, []
    try:
        configuration = esync_variants.composition(variant)
    except ValueError as error:
        raise UsageError(f"--schemes {scheme}: {error}") from None
    return mode, {**configuration.launcher_options(), **over}, configuration.worker_flags()


def in_cell(scheme, tuned_file, cell, profile, link_slowdown=None):
    """(mode, the launcher's options, the workers' flags, the devices it trains on) of `scheme` in the cell of
    `profile` (tuned.json's key `cell`): fast-only on the profile's fastest devices and their links at the values
    tuned for it in this cell (so is fast:<scheme>); @sharded with a parameter server per device."""
    mode, own_options, own_flags = parts(scheme)
    devices = profile
    if scheme_names.on_fast_devices(scheme):  # its own cell is the fast devices': tuned in this one
        devices = scheme_names.fastest_profile(profile)
        own_options = {**own_options, "tuned": None}
        if link_slowdown:
            factors = workers.parse_slowdowns(link_slowdown, len(profile.split(",")), "--link-slowdown")
            own_options["link_slowdown"] = ",".join(factors[i] for i in scheme_names.fastest_positions(profile))
        own_flags = own_flags + list(tuned.scheme_flags(tuned_file, cell, scheme) if tuned_file else ())
    if scheme_names.collective_of(scheme)[1] == scheme_names.SHARDED:
        own_options = {**own_options, "num_servers": len(devices.split(","))}
    return mode, own_options, own_flags, devices
