import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
application = get_wsgi_application()

# Everything loaded so far lives as long as the process: out of the collector's walks
# (console.memory). Under gunicorn this runs in each worker (or once in the master, before
# the fork, when it preloads the app).
from console.memory import freeze_loaded  # noqa: E402 (after Django is set up)

freeze_loaded()
