"""The scheduler's and the servers' side of ps-lite, run by main.py rather than inside `import mxnet`.

With DMLC_ROLE=server or scheduler, MXNet runs the role while it is being imported, with a controller called back
through ctypes, which prints and then swallows any exception: a server that cannot unpickle the workers' optimizer,
or whose update raises, would go on summing with no rule or skip the update. Here mxnet is imported with DMLC_ROLE
hidden (as a worker imports it; ps-lite reads the role only when the kvstore is created), and the node then runs
with a controller and an update rule that end the process with one line when they raise.
"""
import logging
import os
import pickle

from training import failures, fault_injection

log = logging.getLogger("ps-node")


def import_mxnet_without_running_the_role():
    role = os.environ.pop("DMLC_ROLE")
    try:
        import mxnet
    finally:
        os.environ["DMLC_ROLE"] = role
    return mxnet


def run(role, traceback_folder=None):
    """Join the job as its scheduler or one of its servers and serve until every worker has left."""
    mx = import_mxnet_without_running_the_role()
    kv = mx.kv.create("dist")
    handle_commands = _guarded(_controller(kv, role, traceback_folder), role, traceback_folder)

    class Server(mx.kvstore.KVStoreServer):
        def _controller(self):  # the callback KVStoreServer.run hands to ps-lite
            return handle_commands

    Server(kv).run()


def _controller(kv, role, traceback_folder):
    def handle(command, body, _):
        if command != 0:
            log.warning("unknown server command %d ignored", command)
            return
        optimizer = pickle.loads(body)  # the update rule a worker sent with kv.set_optimizer
        update = optimizer.update_multi_precision
        optimizer.update_multi_precision = _guarded(_injectable(update, role), role, traceback_folder)
        kv.set_optimizer(optimizer)
    return handle


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
