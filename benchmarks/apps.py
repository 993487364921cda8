from django.apps import AppConfig


def import_limits():
    """The caps of every benchmark file read, from the settings at the time of the
    read (so a changed setting applies to the next import) and the id column."""
    from django.conf import settings

    from . import formats
    from .models import Document

    return formats.Limits(
        max_bytes=settings.IMPORT_MAX_BYTES,
        max_line_chars=settings.IMPORT_MAX_LINE_CHARS,
        max_id_chars=Document._meta.get_field("external_id").max_length,
    )


class BenchmarksConfig(AppConfig):
    name = "benchmarks"
    verbose_name = "Benchmarks"

    def ready(self) -> None:
        from . import formats

        # formats.py has no Django import: hand it the settings-driven caps.
        formats.limits_provider = import_limits
