"""Django's runserver with Nagle's algorithm off on every connection, and a warning where anyone on the network
could steer the job.

The development server writes the status line, the headers and the body of an answer
as separate small packets; with Nagle on, each later packet waits for the client's
delayed ACK (about 40 ms on Linux), which would cost workers that much per minibatch.
"""

import ipaddress
import socket

from django.conf import settings
from django.core.management.commands.runserver import Command as DjangoRunserverCommand
from django.core.servers.basehttp import WSGIServer


class NoDelayWSGIServer(WSGIServer):
    def get_request(self):
        connection, address = super().get_request()
        if connection.family in (socket.AF_INET, socket.AF_INET6):
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return connection, address


def is_loopback(address):
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


class Command(DjangoRunserverCommand):
    server_cls = NoDelayWSGIServer

    def inner_run(self, *args, **options):
        if not settings.ESYNC_STATE_TOKEN and not is_loopback(self.addr):
            self.stderr.write(f"warning: no ESYNC_STATE_TOKEN: anyone who reaches {self.addr}:{self.port} can steer "
                              "the job; set ESYNC_STATE_TOKEN to the same secret for this server and every worker")
        super().inner_run(*args, **options)
