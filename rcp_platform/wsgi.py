"""WSGI entry point (gunicorn rcp_platform.wsgi:application)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rcp_platform.settings")
application = get_wsgi_application()
