"""What a scheme's name in a map says: its mode of the catalog, or esync-<variant> (training/esync_variants.py), or
fast-only (SSGD on the fastest devices alone), or local (one fast device); whether it trains on the fastest devices
alone (fast:diloco); and where its sums go: over the one parameter server, over as many as workers (@sharded), or over
an MPI collective (@ring, @butterfly, @binary-blocks).
"""
from analysis import paper
from training import esync_variants, modes

FAST_ONLY = paper.FAST_ONLY  # SSGD on the profile's fastest devices alone: the stragglers dropped
STANDALONE = modes.STANDALONE  # one fast device, no cluster
FAST = "fast:"  # fast:diloco@ring: the scheme on the profile's fastest devices alone (fast-only is fast:sync)


OVER = "@"  # esync-apply@ring: a synchronous scheme summing over an MPI collective, not the parameter server
SHARDED = "sharded"  # sync@sharded: over as many parameter servers as workers, the keys split over them (ps-lite)


def collective_of(scheme):
    """'esync-apply@ring' -> ('esync-apply', 'ring'); 'sync@sharded' -> ('sync', 'sharded'); a scheme over the one
    parameter server -> (scheme, None)."""
    base, _, collective = scheme.partition(OVER)
    return base, collective or None


def mode_of(scheme):
    """(mode, ESync variant or None) of a scheme: a mode of the catalog, esync-<variant>
    (training/esync_variants.py), or fast-only (sync on the fastest devices); either may end in @<collective>."""
    scheme = collective_of(scheme)[0]
    if scheme == FAST_ONLY:
        return "sync", None
    scheme = scheme.removeprefix(FAST)
    if scheme.startswith(esync_variants.PREFIX) and scheme not in modes.MODES:
        return "esync", scheme[len(esync_variants.PREFIX):]
    return scheme, None


def takes_local_steps(scheme):
    """Whether the scheme's workers take a fixed number of local steps between aggregations (--sync-interval)."""
    from training import config

    mode = mode_of(scheme)[0]
    return mode in modes.MODES and "sync_interval" in config.search_space(mode)


def synchronous(scheme):
    """Whether the scheme's workers aggregate together, so that its sums may go over an MPI collective."""
    mode = mode_of(scheme)[0]
    return mode in modes.MODES and modes.MODES[mode].synchronous


def on_fast_devices(scheme):
    """Whether the scheme trains on the profile's fastest devices alone (fast-only, fast:<scheme>)."""
    return scheme == FAST_ONLY or scheme.startswith(FAST)


def fastest_positions(profile):
    """'1,20,1' -> [0, 2]: the positions of the profile's fastest devices."""
    factors = [float(f) for f in profile.split(",")]
    return [i for i, factor in enumerate(factors) if factor == min(factors)]


def fastest_profile(profile):
    """'1,1,20' -> '1,1': the profile's fastest devices alone."""
    factors = [float(f) for f in profile.split(",")]
    return ",".join(f"{factors[i]:g}" for i in fastest_positions(profile))


def display(scheme):
    if scheme == FAST_ONLY:
        return "SSGD on the fast devices alone"
    if scheme.startswith(FAST):
        return display(scheme.removeprefix(FAST)) + " on the fast devices alone"
    mode, variant = mode_of(scheme)
    collective = collective_of(scheme)[1]
    name = modes.MODES[mode].display
    over = (" over a parameter server per worker" if collective == SHARDED else f" over {collective} allreduce"
            if collective else "")
    return (f"{name} ({esync_variants.describe(variant)})" if variant else name) + over
