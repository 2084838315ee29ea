"""The links of a job on a virtual clock: one model for the parameter server's sums, the asynchronous servers' pushes
and pulls, and MPI's collectives.

Every host (a worker, a parameter server) has one full-duplex link to a switch: each direction carries
`seconds_per_byte` a byte (0: free), and a transfer is charged its path's latency once (the larger of its two ends').
A transfer from host a to host b uses a's link outward and b's link inward.

- A synchronous sum over the parameter server (`sum_finishes`): each worker pushes, to each server, the parts of
  the model's keys that server holds (`shards`: ps-lite's placement), one key after another in the keys' order over
  its connection to that server, and pulls a key's sum back once every worker's push of that key is in and added:
  the kvstore's per-key pipeline, so an early key comes back while later ones still go up. Transfers that overlap in
  time share every link max-min fairly (`fair_ends`), as network simulators share a link among its flows: no
  transfer waits for another's turn, and no worker comes first by its rank.
- The asynchronous servers (training/transport/virtual_servers.py) answer pushes and pulls one at a time, when each
  is asked: each server's link serves one transfer at a time in each direction, first come first served
  (`Network.reserve`), since a transfer's end must be known when it starts.
- MPI's allreduce (`allreduce_seconds`): each exchange of MPICH's algorithm (traffic.py) on the two ranks' own links.
"""
import functools
import heapq
import math
import re
from collections import Counter
from dataclasses import dataclass

from training.transport import traffic
from training.transport.collectives import SPLIT_ABOVE

FREE = math.inf          # bytes a second of a link that charges nothing
HASH = 9973              # ps-lite: an array kept whole lives on server (key x 9973) mod servers
SUMS = "pipelined per key"  # how a sum over the servers is charged, recorded in every run (the README marks others)
PIPELINED_BYTES = 4 * SPLIT_ABOVE  # a key's part under this rides with the next on its server (pipelined_parts)
UP, DOWN = "out", "in"   # a link's two directions, as its host sees them
RATE = re.compile(r"^(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit)$")
RATE_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
TIMES = re.compile(r"^(\d+(?:\.\d+)?)x$")


def parse_rate(text):
    """Bits per second of a tc-style rate: 1gbit, 100mbit, 500kbit."""
    match = RATE.match(text.strip().lower())
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"rate {text!r} is not like 1gbit, 100mbit or 500kbit")
    return int(float(match.group(1)) * RATE_UNITS[match.group(2)])


def is_multiple(text):
    """Whether a servers' rate is given as a multiple of the workers' ("6x")."""
    return bool(TIMES.match(text.strip().lower()))


def parse_server_rate(text):
    """(factor, None) for a multiple of the workers' rate ("6x"), (None, bits a second) for a rate ("1gbit")."""
    match = TIMES.match(text.strip().lower())
    if match and float(match.group(1)) > 0:
        return float(match.group(1)), None
    try:
        return None, parse_rate(text)
    except ValueError:
        raise ValueError(f"rate {text!r} is not like 1gbit, 100mbit, 500kbit or 6x (the workers' rate x 6)") from None


def server_bits(text, worker_bits):
    """Bits a second of a server's link given as `text` (None: the workers'), beside workers' links of `worker_bits`
    (None: not known yet, and then neither is a multiple of it)."""
    if text is None:
        return worker_bits
    factor, bits = parse_server_rate(text)
    return bits if factor is None else None if worker_bits is None else int(factor * worker_bits)


def server_link(text, worker):
    """A server's Link given as `text` (None: the workers'), beside the workers' `worker` Link."""
    if text is None:
        return worker
    factor, bits = parse_server_rate(text)
    if factor is None:
        return Link(8.0 / bits, worker.latency)
    return Link(worker.seconds_per_byte / factor, worker.latency)


@dataclass(frozen=True)
class Link:
    """One host's full-duplex link: `seconds_per_byte` each way, `latency` a transfer."""
    seconds_per_byte: float = 0.0
    latency: float = 0.0

    @classmethod
    def from_ratio(cls, ratio, fast_step_seconds, model_bytes, latency=0.0):
        """A link on which one transfer of the model lasts `ratio` fast steps (the paper's R); free without one."""
        return cls(ratio * fast_step_seconds / model_bytes if ratio else 0.0, latency)

    @property
    def bytes_per_second(self):
        return 1.0 / self.seconds_per_byte if self.seconds_per_byte else FREE

    def seconds(self, nbytes):
        return nbytes * self.seconds_per_byte + self.latency


@dataclass(frozen=True)
class Network:
    """The links of a job: one per worker (by rank) and one per parameter server, and where ps-lite puts each key."""
    workers: tuple
    servers: tuple = (Link(),)
    split_above: int = SPLIT_ABOVE
    apply_seconds_per_byte: float = 0.0  # a server's own work on a pushed byte: adding it to the sum, its rule

    @classmethod
    def uniform(cls, num_workers, worker, num_servers=1, server=None, split_above=SPLIT_ABOVE, apply=0.0):
        """Every worker on `worker`'s link, each of `num_servers` servers on `server`'s (default: the workers'), each
        server adding a pushed byte in `apply` seconds."""
        return cls((worker,) * num_workers, (server or worker,) * num_servers, split_above, apply)

    @property
    def num_servers(self):
        return len(self.servers)

    def shards(self, keys, sizes):
        """[[bytes of each key server s holds, in the keys' order] for each server s] of float32 arrays of `sizes`
        elements under `keys`: an array below the bound whole on server (key x 9973) mod servers, a bigger one split
        evenly over all, as ps-lite places them."""
        held = [[] for _ in range(self.num_servers)]
        for key, size in zip(keys, sizes):
            if size < self.split_above:
                held[(key * HASH) % self.num_servers].append(4.0 * size)
            else:
                for server in range(self.num_servers):
                    held[server].append(4.0 * size / self.num_servers)
        return held

    def sum_finishes(self, arrivals, held):
        """{rank: when its sum is back} for a sum that every rank joined at arrivals[rank], `held[s]` the bytes of
        each key on server s (`shards`; a number: one key): each rank pushes a server its keys one after another,
        and pulls a key's sum once every rank's push of that key is in and added, every link shared fairly."""
        ranks = sorted(arrivals)
        flows, pulls = [], []
        for s, keys in enumerate(held):
            keys = pipelined_parts([keys] if isinstance(keys, (int, float)) else keys)
            pushes = {}
            for rank in ranks:
                up = (("worker", rank, UP), ("server", s, DOWN))
                for k, nbytes in enumerate(keys):
                    after = ((len(flows) - 1, 0.0),) if k else ()  # one connection: the previous key first
                    pushes[rank, k] = len(flows)
                    flows.append((arrivals[rank], nbytes, up, after))
            lag = self._latency_to(s)
            for rank in ranks:
                down = (("server", s, UP), ("worker", rank, DOWN))
                for k, nbytes in enumerate(keys):
                    added = lag(rank) + nbytes * self.apply_seconds_per_byte
                    after = tuple((pushes[other, k], added) for other in ranks)
                    after += ((len(flows) - 1, 0.0),) if k else ()
                    pulls.append((rank, len(flows), lag(rank)))
                    flows.append((0.0, nbytes, down, after))
        ends = fair_ends(flows, self._capacity())
        last = max(arrivals.values())
        finishes = {rank: last for rank in arrivals}
        for rank, flow, latency in pulls:
            finishes[rank] = max(finishes[rank], ends[flow] + latency)
        return finishes

    def reserve(self, free, rank, nbytes_by_server, start, direction):
        """When a push (direction DOWN at the servers) or a pull's answer (UP) of `nbytes_by_server` that worker
        `rank` asks for at `start` ends, each server's link serving one transfer at a time that way; `free` maps
        (server, direction) to when its link is free and is moved on."""
        worker = self.workers[rank]
        end = start + worker.seconds(sum(nbytes_by_server))
        for s, nbytes in enumerate(nbytes_by_server):
            if nbytes:
                begins = max(start, free.get((s, direction), 0.0))
                free[(s, direction)] = begins + nbytes * self.servers[s].seconds_per_byte
                applied = nbytes * self.apply_seconds_per_byte if direction == DOWN else 0.0  # the rule on a push
                end = max(end, free[(s, direction)] + self._latency(rank, s) + applied)
        return end

    def _latency(self, rank, server):
        return max(self.workers[rank].latency, self.servers[server].latency)

    def _latency_to(self, server):
        return lambda rank: self._latency(rank, server)

    def _capacity(self):
        capacity = {}
        for rank, link in enumerate(self.workers):
            capacity[("worker", rank, UP)] = capacity[("worker", rank, DOWN)] = link.bytes_per_second
        for s, link in enumerate(self.servers):
            capacity[("server", s, UP)] = capacity[("server", s, DOWN)] = link.bytes_per_second
        return capacity


def pipelined_parts(parts, least=PIPELINED_BYTES):
    """A server's parts of the keys in order, each part under `least` bytes joined to the next (the last to the one
    before): so few bytes go up in no time, and a part of its own would only add an event to every sum."""
    joined, carried = [], 0.0
    for nbytes in parts:
        carried += nbytes
        if carried >= least:
            joined.append(carried)
            carried = 0.0
    if carried:
        if joined:
            joined[-1] += carried
        else:
            joined.append(carried)
    return joined


def fair_ends(flows, capacity):
    """When each of `flows` [(start, bytes, path, after)] is through, where at every moment the flows under way share
    each resource of `capacity` {resource: bytes a second} max-min fairly (progressive filling). A flow starts at its
    start and, for each (flow j, lag) in `after`, no sooner than lag after j is through; a path of free resources only
    is through at its start."""
    remaining = [float(flow[1]) for flow in flows]
    ends = [None] * len(flows)
    ready = [flow[0] for flow in flows]
    blocking = [len(flow[3]) for flow in flows]
    unblocks = [[] for _ in flows]
    for i, (_, _, _, after) in enumerate(flows):
        for j, lag in after:
            unblocks[j].append((i, lag))
    waiting = [(ready[i], i) for i in range(len(flows)) if not blocking[i]]
    heapq.heapify(waiting)
    under_way, now = [], 0.0
    while waiting or under_way:
        if not under_way:
            now = max(now, waiting[0][0])
        while waiting and waiting[0][0] <= now:
            under_way.append(heapq.heappop(waiting)[1])
        rates = max_min_rates([flows[i][2] for i in under_way], capacity)
        until_next = min([remaining[i] / rate for i, rate in zip(under_way, rates)])
        step = min(until_next, waiting[0][0] - now if waiting else math.inf)
        now += step
        going = []
        for i, rate in zip(under_way, rates):
            remaining[i] = 0.0 if rate == math.inf else remaining[i] - rate * step
            if remaining[i] <= 1e-9 * flows[i][1]:
                ends[i] = now
                for dependent, lag in unblocks[i]:
                    ready[dependent] = max(ready[dependent], now + lag)
                    blocking[dependent] -= 1
                    if not blocking[dependent]:
                        heapq.heappush(waiting, (ready[dependent], dependent))
            else:
                going.append(i)
        under_way = going
    return ends


def max_min_rates(paths, capacity):
    """Each path's rate when flows along `paths` share the resources max-min fairly: the most loaded resource's
    share goes to its flows first, the rest share what is left."""
    rates = [None] * len(paths)
    left = {resource: capacity[resource] for path in paths for resource in path}
    open_flows = set(range(len(paths)))
    while open_flows:
        load = Counter(resource for i in open_flows for resource in paths[i])
        share = min(left[resource] / count for resource, count in load.items())
        if share == math.inf:
            for i in open_flows:
                rates[i] = math.inf
            break
        full = {resource for resource, count in load.items() if left[resource] / count <= share * (1 + 1e-12)}
        for i in [i for i in open_flows if full.intersection(paths[i])]:
            rates[i] = share
            open_flows.discard(i)
            for resource in paths[i]:
                left[resource] = max(0.0, left[resource] - share)
    return rates


@functools.lru_cache(maxsize=64)
def allreduce_seconds(collective, size, count, links):
    """The slowest rank's exchanges in one allreduce of `count` float32 elements over `size` ranks on `links` (one
    Link per rank): each as long as the larger of its two halves over the rank's link, plus its latency."""
    def seconds(rank, step):
        _, sent, _, received = step
        return max(sent, received) * 4 * links[rank].seconds_per_byte + links[rank].latency

    return max(sum(seconds(rank, step) for step in traffic.allreduce_steps(collective, rank, size, count))
               for rank in range(size))
