"""Project package: settings, URLs, the Celery app, WSGI/ASGI and the API error shape."""

from .celery import app as celery_app

__all__ = ["celery_app"]
