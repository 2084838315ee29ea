"""Django's runserver with Nagle's algorithm off on every connection.

The development server writes the status line, the headers and the body of an answer
as separate small packets; with Nagle on, each later packet waits for the client's
delayed ACK (about 40 ms on Linux), which would cost workers that much per minibatch.
"""

import socket

from django.core.management.commands.runserver import Command as DjangoRunserverCommand
from django.core.servers.basehttp import WSGIServer


class NoDelayWSGIServer(WSGIServer):
    def get_request(self):
        connection, address = super().get_request()
        if connection.family in (socket.AF_INET, socket.AF_INET6):
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return connection, address


class Command(DjangoRunserverCommand):
    server_cls = NoDelayWSGIServer
