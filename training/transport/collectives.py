"""How the workers of a synchronous job combine their arrays: through the ps-lite servers, or among themselves with
MPI's allreduce (--collective).

A transport knows the worker's rank and the number of workers, and offers four operations on lists of MXNet
arrays, each entry one array or the list of its copies on the worker's devices (as the kvstore takes them):
  declare(keys, values)  keys the ps-lite servers must hold before anything is exchanged, with their first values
  broadcast(keys, outs)  rank 0's values (its declared ones) written into every worker's `outs`
  sum(keys, arrays)      each entry replaced, in place, by its sum over the workers (device copies summed first)
  start_sum(keys, arrays)  the same, returning at once: a PendingSum whose wait() returns once the sums are there
  barrier()              wait until every worker gets here
The schemes that aggregate synchronously call only these, so one scheme runs over either transport; the ps one
makes exactly the kvstore calls the schemes made before.

Every transport counts the payload bytes its worker sends and receives (`traffic`, which the training loop logs
each round): on the parameter server one array per key pushed, pulled or initialised, whatever the number of
servers; over MPI the bytes MPICH's algorithm moves for this rank (training/transport/traffic.py).

MPI waits without spinning. A rank blocked in an MPI call spins its core, stealing it from the workers that still
compute on machines where they share cores. So every operation first waits at a nonblocking barrier, polled with a
short and growing sleep (bounded by --sync-timeout), and only then makes the blocking call, which then finds every
rank ready and only moves the data. The nonblocking allreduce is no substitute: MPICH picks its algorithm from
another variable with other algorithms, and it progresses only while a rank polls it, which the sleeps would slow.
"""
import concurrent.futures
import os
import sys
import threading
import time

from training import mxnet_internals, runlog
from training.lazy import np
from training.transport import traffic

PS = "ps"
# --collective: MPICH's allreduce algorithm (MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM). MPICH falls back silently to
# another algorithm when one's precondition fails (reduce_scatter_allgather: at least as many elements as the
# largest power of two not above the number of ranks).
MPI_ALGORITHMS = traffic.COLLECTIVES
NAMES = (PS,) + tuple(MPI_ALGORITHMS)
ALGORITHM_VARIABLE = "MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM"

# MXNet keeps an array of up to this many elements whole, on one server picked by a hash of its key, and splits a
# bigger one evenly over all servers. At MXNet's default bound of 1e6 every lenet layer stays whole and 2 servers
# carried 1 % and 99 % of the bytes; at 1000 only biases and other small arrays stay whole.
SPLIT_VARIABLE = "MXNET_KVSTORE_BIGARRAY_BOUND"
SPLIT_ABOVE = 1000

FIRST_PAUSE = 0.0001   # seconds between the first polls of a wait (an aggregation that is almost ready)
LONGEST_PAUSE = 0.002  # the pause grows to this (a long wait for a slow worker costs next to no CPU)


def uses_mpi(collective):
    return collective != PS


def mpi_environment(collective):
    """The variables that make MPICH run `collective`'s allreduce algorithm."""
    return {
        ALGORITHM_VARIABLE: MPI_ALGORITHMS[collective],
        # Without this, a netmod's own collectives may take the call and ignore the algorithm.
        "MPIR_CVAR_DEVICE_COLLECTIVES": "none",
        **traffic.BCAST_ENVIRONMENT,  # one broadcast algorithm whatever the size, so its bytes are known
    }


def mpi_world(collective):
    """MPI's module and world communicator; the first call starts MPI with `collective`'s algorithm."""
    wanted = MPI_ALGORITHMS[collective]
    if "mpi4py.MPI" not in sys.modules:
        os.environ.update(mpi_environment(collective))
    elif os.environ.get(ALGORITHM_VARIABLE) != wanted:
        raise RuntimeError(f"MPI was started with {ALGORITHM_VARIABLE}={os.environ.get(ALGORITHM_VARIABLE)}, "
                           f"not {wanted}")
    from mpi4py import MPI  # starts MPI (MPI_Init_thread), which reads the variables above

    return MPI, MPI.COMM_WORLD


def connect(collective, kvstore_type, timeout, on_timeout):
    """The transport of a worker whose scheme trains over `kvstore_type` (None: no cluster, no transport).
    `on_timeout()` ends the process when an MPI wait outlasts `timeout` seconds."""
    if kvstore_type is None:
        return None
    if not uses_mpi(collective):
        import mxnet as mx

        os.environ.setdefault(SPLIT_VARIABLE, str(SPLIT_ABOVE))  # read when the kvstore is made
        return ParameterServer(mx.kv.create(kvstore_type))  # joins the ps-lite job
    return MpiAllreduce(collective, timeout, on_timeout)


class ByteCounter:
    """The payload bytes one worker sent and received since the last take()."""

    def __init__(self):
        self.sent = self.received = 0

    def add(self, sent, received):
        self.sent += sent
        self.received += received

    def take(self):
        """The counts as run-log fields; counting starts again from zero."""
        fields = {runlog.SENT_BYTES: self.sent, runlog.RECEIVED_BYTES: self.received}
        self.sent = self.received = 0
        return fields


class CountingKVStore:
    """A ps-lite kvstore that counts what its worker's push, pull, pushpull and init carry: one array per key (the
    kvstore sums a worker's device copies before it pushes and pulls one copy for all of them). Everything else
    is the kvstore's own."""

    def __init__(self, kv):
        self._kv = kv
        self.traffic = ByteCounter()
        self._key_bytes = {}

    def __getattr__(self, name):
        return getattr(self._kv, name)

    def init(self, keys, values):
        self._kv.init(keys, values)
        if self._kv.rank == 0:  # rank 0's values are the servers' first; the others only wait
            self.traffic.add(self._bytes(keys, values), 0)

    def push(self, keys, values, priority=0):
        self._kv.push(keys, values, priority=priority)
        self.traffic.add(self._bytes(keys, values), 0)

    def pull(self, keys, out=None, priority=0, ignore_sparse=True):
        self._kv.pull(keys, out=out, priority=priority, ignore_sparse=ignore_sparse)
        self.traffic.add(0, self._bytes(keys, out))

    def pushpull(self, keys, values, out=None, priority=0):
        self._kv.pushpull(keys, values, out=out, priority=priority)
        size = self._bytes(keys, values)
        self.traffic.add(size, size)

    def _bytes(self, keys, values):
        if not isinstance(keys, (list, tuple)):
            keys, values = [keys], [values]
        total = 0
        for key, value in zip(keys, values):
            size = self._key_bytes.get(key)
            if size is None:  # a key keeps its array's shape: measured once
                first = copies_of(value)[0]
                size = self._key_bytes[key] = first.size * np.dtype(first.dtype).itemsize
            total += size
        return total


class ParameterServer:
    """The ps-lite kvstore: the servers sum what the workers push."""
    sums_in_engine = True  # sum() returns at once, each key's transfer queued in MXNet's engine

    def __init__(self, kv):
        self.kv = CountingKVStore(kv)
        self.traffic = self.kv.traffic
        self.rank = kv.rank
        self.num_workers = kv.num_workers

    def during(self, phase):
        """How the watchdog names `phase` of this transport."""
        return phase

    def declare(self, keys, values):
        self.kv.init(keys, values)  # rank 0's values; ends with a barrier across workers

    def broadcast(self, keys, outs):
        self.kv.pull(keys, out=outs)

    def sum(self, keys, arrays):
        self.kv.pushpull(keys, arrays, out=arrays)

    def start_sum(self, keys, arrays):
        """The kvstore's pushpull already runs in MXNet's engine threads: only its arrival is watched for."""
        started = time.perf_counter()
        self.kv.pushpull(keys, arrays, out=arrays)
        return PendingSum(started, _arrival_of(arrays))

    def barrier(self):
        mxnet_internals.barrier(self.kv)


class PendingSum:
    """A sum in flight. wait() returns once it is in its arrays; then `seconds` is how long it travelled (from
    `started`, a perf_counter() reading, to its arrival, however late wait() was called). `arrival` is a future of
    the perf_counter() reading at the arrival; `finish`, run by wait() on the caller's thread, writes the result
    where it belongs."""

    def __init__(self, started, arrival, finish=None):
        self.started = started
        self.arrival = arrival
        self.finish = finish
        self.seconds = None

    def wait(self):
        arrived = self.arrival.result()
        if self.finish is not None:
            self.finish()
        self.seconds = arrived - self.started

    def abandon(self):
        """Training ended with the sum in flight: nobody will wait for it (its daemon thread ends with the process)."""
        self.arrival = None


def _arrival_of(arrays):
    """A future of the moment every array of `arrays` is written, watched by a thread that waits on them (an
    engine wait releases the interpreter while it blocks)."""
    def watch():
        for entry in arrays:
            for copy in copies_of(entry):
                copy.wait_to_read()
        return time.perf_counter()

    return in_thread(watch, "sum-arrival")


def in_thread(function, name):
    """A future of function()'s result, run on a daemon thread of its own: one that never ends (a sum whose other
    workers are gone) does not keep the process from exiting."""
    future = concurrent.futures.Future()

    def run():
        try:
            future.set_result(function())
        except BaseException as error:  # handed to whoever waits for the future
            future.set_exception(error)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future


class CollectiveFailed(RuntimeError):
    """An MPI operation of the job failed: a rank has ended, or the link to it broke."""


class MpiAllreduce:
    """MPI among the workers, no servers: one packed float32 buffer per operation."""
    kv = None
    sums_in_engine = False  # sum() returns once the allreduce is done

    def __init__(self, collective, timeout, on_timeout):
        self.collective = collective
        self.MPI, self.comm = mpi_world(collective)
        self.rank = self.comm.Get_rank()
        self.num_workers = self.comm.Get_size()
        self.timeout = timeout
        self.on_timeout = on_timeout
        self.traffic = ByteCounter()
        self._bytes = {}  # (operation, elements) -> (sent, received)

    def during(self, phase):
        return f"{phase} over MPI ({self.collective} allreduce)"

    def declare(self, keys, values):
        """Nothing to declare: MPI has no keys."""

    def broadcast(self, keys, outs):
        if self.rank == 0:
            flat = pack([copies_of(entry)[0].asnumpy() for entry in outs])
        else:
            flat = np.empty(sum(copies_of(entry)[0].size for entry in outs), dtype=np.float32)
        self.barrier()
        self.reported(lambda: self.comm.Bcast(flat, root=0), "broadcast")
        self.count("bcast", flat.size)
        unpack(flat, outs)

    def sum(self, keys, arrays):
        flat = pack([local_sum(entry) for entry in arrays])
        self.barrier()
        self.allreduce(flat)
        self.count("allreduce", flat.size)
        unpack(flat, arrays)

    def allreduce(self, flat):
        self.reported(lambda: self.comm.Allreduce(self.MPI.IN_PLACE, flat, op=self.MPI.SUM),
                      f"{self.collective} allreduce")

    def reported(self, operation, name):
        """Run an MPI operation; MPI's error (whose own text is "See the MPI_ERROR field in MPI_Status for the error
        code") becomes one that says what failed."""
        try:
            operation()
        except self.MPI.Exception as err:
            raise CollectiveFailed(f"the {name} over MPI failed: a rank has ended or its link broke "
                                   f"(MPI error class {err.Get_error_class()})") from err

    def start_sum(self, keys, arrays):
        """The arrays are packed now; the barrier and the allreduce run on a thread of their own (the caller makes
        no other MPI call until it has waited), and wait() unpacks the sum."""
        started = time.perf_counter()
        flat = pack([local_sum(entry) for entry in arrays])

        def reduce():
            self.barrier()
            self.allreduce(flat)
            return time.perf_counter()

        def finish():
            self.count("allreduce", flat.size)
            unpack(flat, arrays)

        return PendingSum(started, in_thread(reduce, "mpi-sum"), finish)

    def count(self, operation, elements):
        """Add what this rank moved in one float32 operation to its traffic."""
        moved = self._bytes.get((operation, elements))
        if moved is None:
            if operation == "bcast":
                moved = traffic.bcast_bytes(self.rank, self.num_workers, elements)
            else:
                moved = traffic.allreduce_bytes(self.collective, self.rank, self.num_workers, elements)
            self._bytes[(operation, elements)] = moved
        self.traffic.add(*moved)

    def barrier(self):
        self.reported(lambda: wait_sleeping(self.comm.Ibarrier(), self.timeout, self.on_timeout), "barrier")


def wait_sleeping(request, timeout, on_timeout):
    """Poll a nonblocking MPI request until it completes, sleeping between polls; call `on_timeout()` (which
    ends the process) once `timeout` seconds have passed."""
    deadline = time.monotonic() + timeout
    pause = FIRST_PAUSE
    while not request.Test():
        if time.monotonic() > deadline:
            on_timeout()
            raise TimeoutError(f"no answer from the other MPI ranks for {timeout:g} s")
        time.sleep(pause)
        pause = min(2 * pause, LONGEST_PAUSE)


# The first of the keys positions_claimed() uses: far above any scheme's, and small enough that MXNet's choice of a
# small array's server (key x 9973 mod the servers, in a C int) does not overflow.
POSITIONS_KEY = 100_000


def positions_claimed(transport, given):
    """Each rank's position as its worker gave it (--worker-index; None where it gave none), gathered from every
    worker before the job's keys hold anything: a sum of one slot a rank, or on dist_async servers one key a rank
    pushed, kept as it came (KeepPushed), and then read by everyone. Its bytes are not a round's traffic."""
    from mxnet import nd

    n, rank = transport.num_workers, transport.rank
    mine = 0.0 if given is None else given + 1.0
    if transport.kv is not None and transport.kv.type == "dist_async":
        from training.schemes.servers.server_optimizer import KeepPushed

        keys = [POSITIONS_KEY + r for r in range(n)]
        if rank == 0:  # these servers refuse a push without a rule; the scheme's replaces this one
            transport.kv.set_optimizer(KeepPushed())
        transport.kv.init(keys, [nd.zeros((1,)) for _ in keys])
        transport.kv.push(keys[rank], nd.array([mine]))
        nd.waitall()  # a push is an engine operation: the barrier alone does not wait for it
        transport.barrier()
        values = [nd.zeros((1,)) for _ in keys]
        transport.kv.pull(keys, out=values)
        slots = [value.asscalar() for value in values]
    else:
        vector = nd.zeros((n,))
        vector[rank] = mine
        transport.declare([POSITIONS_KEY], [nd.zeros((n,))])
        transport.sum([POSITIONS_KEY], [vector])
        slots = vector.asnumpy().tolist()
    transport.traffic.take()
    return [None if slot < 0.5 else int(round(slot)) - 1 for slot in slots]


def check_one_worker_a_position(claimed):
    """JobSetupError-worthy text where two workers claim one position, else None."""
    holders = {}
    for rank, position in enumerate(claimed):
        if position is not None:
            holders.setdefault(position, []).append(rank)
    shared = {position: ranks for position, ranks in holders.items() if len(ranks) > 1}
    if not shared:
        return None
    position, ranks = min(shared.items())
    return (f"position {position} (--worker-index) is claimed by the workers of ranks "
            f"{', '.join(map(str, ranks))}: one worker a position, each with its own share of the data and log folder")


def copies_of(entry):
    """An entry's device copies: the list itself, or the one array."""
    return list(entry) if isinstance(entry, (list, tuple)) else [entry]


def local_sum(entry):
    """The sum of an entry's device copies, as numpy (what the kvstore pushes for a list of copies)."""
    copies = copies_of(entry)
    total = copies[0].asnumpy()
    for copy in copies[1:]:
        total += copy.asnumpy()
    return total


def pack(values):
    """Numpy arrays, flattened one after another into one float32 buffer."""
    return np.concatenate([np.asarray(value, dtype=np.float32).ravel() for value in values])


def unpack(flat, entries):
    """Write consecutive pieces of `flat` into the entries, every device copy of each."""
    from mxnet import nd

    total = sum(copies_of(entry)[0].size for entry in entries)
    if total != flat.size:
        raise ValueError(f"{flat.size} packed values for entries of {total}")
    values = nd.array(flat, dtype=flat.dtype)
    offset = 0
    for entry in entries:
        copies = copies_of(entry)
        size = copies[0].size
        piece = values[offset:offset + size].reshape(copies[0].shape)
        for copy in copies:
            piece.copyto(copy)  # an engine copy: it also fills weights kept in MKLDNN's layout
        offset += size
