#!/usr/bin/env python
"""ESync state server.

    python SimpleStateServer/manage.py runserver 0.0.0.0:10010
"""
import os
import sys

# The wire protocol (coordination/protocol.py) lives at the repository's root, beside the workers' code that speaks it.
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "statesite.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
