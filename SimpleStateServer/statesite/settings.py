"""Settings of the ESync state server, read from the environment.

ESYNC_STATE_SECRET_KEY     Django secret key; default a fresh random key per start, which is
                           fine because nothing here signs or stores anything with it.
ESYNC_STATE_DEBUG          1/true/yes/on to enable DEBUG (default off).
ESYNC_STATE_ALLOWED_HOSTS  comma-separated host names; default "*", because workers reach
                           the server by its cluster IP. Access control is ESYNC_STATE_TOKEN.
ESYNC_STATE_TOKEN          when set, every request must carry it in the X-ESync-Token header.
ESYNC_STATE_LOG_LEVEL      level of the coordinator's own log lines (default INFO).

Its log lines carry the machine's local time, as the workers' do: TIME_ZONE is the machine's zone (TZ, else the zone
/etc/localtime names), not Django's default (America/Chicago), which Django would make the zone of the whole process.
"""

import os
import secrets
import zoneinfo

ZONEINFO = "/usr/share/zoneinfo"


def _machine_time_zone():
    """The name of the zone the machine's local time is in: TZ's (an empty TZ is UTC), else the zone file
    /etc/localtime links to. None when it has no name the C library and Django both read (a POSIX rule such as
    TZ=XYZ-3, a copied /etc/localtime): Django then leaves the process's zone as it is."""
    tz = os.environ.get("TZ")
    if tz is None:
        linked = os.path.realpath("/etc/localtime")
        name = os.path.relpath(linked, ZONEINFO) if linked.startswith(ZONEINFO + os.sep) else ""
    else:
        name = tz[1:] if tz.startswith(":") else tz or "UTC"
    try:
        zoneinfo.ZoneInfo(name)
    except (ValueError, OSError, zoneinfo.ZoneInfoNotFoundError):
        return None
    return name if os.path.isfile(os.path.join(ZONEINFO, name)) else None


def _env_flag(name):
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def _env_list(name, default):
    items = [item.strip() for item in os.environ.get(name, "").split(",") if item.strip()]
    return items or default


SECRET_KEY = os.environ.get("ESYNC_STATE_SECRET_KEY") or secrets.token_urlsafe(50)
DEBUG = _env_flag("ESYNC_STATE_DEBUG")
ALLOWED_HOSTS = _env_list("ESYNC_STATE_ALLOWED_HOSTS", ["*"])
ESYNC_STATE_TOKEN = os.environ.get("ESYNC_STATE_TOKEN") or None

INSTALLED_APPS = ["coordinator.apps.CoordinatorConfig"]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "coordinator.middleware.AccessMiddleware",
    "coordinator.middleware.SafetyNetMiddleware",
]
ROOT_URLCONF = "statesite.urls"
WSGI_APPLICATION = "statesite.wsgi.application"
DATABASES = {}
TEMPLATES = []
USE_I18N = False
# Datetimes stay aware (UTC inside); the server neither stores nor shows any, and its log lines take the process's
# local time, which TIME_ZONE sets.
USE_TZ = True
TIME_ZONE = _machine_time_zone()
# Requests carry a handful of numbers.
DATA_UPLOAD_MAX_MEMORY_SIZE = 64 * 1024
DATA_UPLOAD_MAX_NUMBER_FIELDS = 100

SILENCED_SYSTEM_CHECKS = [
    # Plain HTTP inside a training cluster: no TLS, hence no HSTS and no HTTPS redirect.
    "security.W004",
    "security.W008",
    # No cookies, sessions or browser forms: CSRF protection has nothing to protect.
    # Requests are authorised by the X-ESync-Token header, which a cross-site page
    # cannot set without a CORS preflight this server never grants.
    "security.W003",
]

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "coordinator": {
            "handlers": ["console"],
            "level": os.environ.get("ESYNC_STATE_LOG_LEVEL", "INFO").upper(),
            "propagate": False,
        },
        # Django would log every request (and every 4xx) once more; workers call /apply/
        # after every minibatch and the coordinator already logs each error itself.
        "django.server": {"handlers": ["console"], "level": "ERROR", "propagate": False},
        "django.request": {"handlers": ["console"], "level": "ERROR", "propagate": False},
    },
}
