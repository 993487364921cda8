from django.apps import AppConfig


class PortalConfig(AppConfig):
    """Site-wide pieces above the domain apps: the home page that sends each role to
    its start page, the demo, login throttling, API tokens, deploy checks. Domain
    apps never import it."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "portal"

    def ready(self) -> None:
        from . import checks, tokens  # noqa: F401 - registers checks and receivers
