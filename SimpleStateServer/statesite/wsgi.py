import os
import sys

from django.core.wsgi import get_wsgi_application

# The wire protocol (coordination/protocol.py) lives at the repository's root.
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "statesite.settings")

application = get_wsgi_application()
