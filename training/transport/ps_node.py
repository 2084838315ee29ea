"""The scheduler's and the servers' side of ps-lite, run by main.py rather than inside `import mxnet`.

With DMLC_ROLE=server or scheduler, MXNet runs the role while it is being imported, with a controller called back
through ctypes, which prints and then swallows any exception: a server that cannot unpickle the workers' optimizer,
or whose update raises, would go on summing with no rule or skip the update. Here the node runs with a controller
and an update rule that end the process with one line when they raise.

The node talks to MXNet's C library directly (create the kvstore, run its server loop): a scheduler, and a server
of a job whose workers send no update rule (the synchronous schemes: the servers only sum), never need MXNet's
Python package, whose import costs about a second of CPU per process. A server imports it when the first rule
arrives (dist_async), with DMLC_ROLE hidden, as a worker imports it: ps-lite reads the role only when a kvstore
is created.
"""
import logging
import os
import pickle

from training import mxnet_internals
from training.faults import failures, fault_injection

log = logging.getLogger("ps-node")


def import_mxnet_without_running_the_role():
    role = os.environ.pop("DMLC_ROLE")
    try:
        import mxnet  # loads it, also when the scheme modules registered it lazily (training/lazy.py)
    finally:
        os.environ["DMLC_ROLE"] = role
    return mxnet


def run(role, traceback_folder=None):
    """Join the job as its scheduler or one of its servers and serve until every worker has left."""
    kvstores = []  # the Python kvstore that holds the update rule, once one arrived
    mxnet_internals.serve_kvstore(mxnet_internals.library(),
                                  _guarded(_controller(kvstores, role, traceback_folder), role, traceback_folder))
    for kv in kvstores:
        mxnet_internals.leave_to_the_process_end(kv)


def _controller(kvstores, role, traceback_folder):
    def handle_command(command, body, handle):
        if command != mxnet_internals.SET_OPTIMIZER:
            log.warning("unknown server command %d ignored", command)
            return
        mx = import_mxnet_without_running_the_role()
        optimizer = pickle.loads(body)  # the update rule a worker sent with kv.set_optimizer
        update = optimizer.update_multi_precision
        optimizer.update_multi_precision = _guarded(_injectable(update, role), role, traceback_folder)
        kv = mxnet_internals.kvstore_of(mx, handle)
        kv.set_optimizer(optimizer)
        kvstores.append(kv)
    return handle_command


def _injectable(update, role):
    def update_with_fault_point(*args):
        fault_injection.point(role, "training")
        return update(*args)
    return update_with_fault_point if fault_injection.planned() else update


def _guarded(function, role, traceback_folder):
    """`function` as ps-lite calls it back, but an exception ends the process with one line instead of
    vanishing inside ctypes."""
    def call(*args):
        try:
            return function(*args)
        except BaseException as err:
            failures.report(err, role, traceback_folder)
            failures.end_now(failures.EXIT_FAILURE)
    return call
