"""Settings, the production compose file, migrations and the Celery app."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from django.conf import settings
from django.core.management import call_command

from tests.conftest import REPO


def _django_setup(env: dict[str, str]) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "DEBUG")}
    clean.update(env)
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.conf import settings; print(settings.DEBUG)",
        ],
        cwd=REPO,
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_settings_refuse_to_start_without_secret_key_when_not_debug():
    result = _django_setup({"DEBUG": "false", "ALLOWED_HOSTS": "x"})
    assert result.returncode != 0
    assert "SECRET_KEY is not set" in result.stderr


def test_settings_start_with_secret_key_when_not_debug_and_with_dev_default_in_debug():
    assert (
        _django_setup({"DEBUG": "false", "SECRET_KEY": "s" * 50}).stdout.strip()
        == "False"
    )
    assert _django_setup({"DEBUG": "true"}).stdout.strip() == "True"


def test_embedded_defaults_need_no_server():
    """Without DATABASE_URL / CELERY_BROKER_URL the platform uses SQLite and the filesystem broker."""
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.DATABASES['default']['ENGINE'], s.CELERY_BROKER_URL)"
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "CELERY_BROKER_URL")
    }
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stdout.split() == ["django.db.backends.sqlite3", "filesystem://"]


def _command_target(command: list[str]) -> tuple[str, str | None]:
    """The Python module (and attribute) a service command runs."""
    if command[0] == "gunicorn":
        module, _, attr = command[1].partition(":")
        return module, attr or "application"
    if command[0] == "celery":
        return command[command.index("-A") + 1], "celery_app"
    if command[:2] == ["python", "manage.py"]:
        return "manage", None
    raise AssertionError(f"unknown command {command}")


def test_compose_services_point_at_modules_that_exist():
    """Docker cannot run here, so check what each container would run."""
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"postgres", "redis", "web", "worker"} <= set(services)
    assert (
        REPO / services["web"].get("build", compose["x-app"]["build"]) / "Dockerfile"
    ).exists()
    checked = 0
    for name, service in services.items():
        if "command" not in service:
            assert "image" in service, f"{name} has neither command nor image"
            continue
        module, attr = _command_target(service["command"])
        if module == "manage":
            assert (REPO / "manage.py").exists()
            assert service["command"][2] == "migrate"
        else:
            mod = importlib.import_module(module)
            assert attr is None or hasattr(mod, attr), f"{name}: {module} has no {attr}"
        checked += 1
    assert checked == 3
    assert services["web"]["environment"]["DATABASE_URL"].startswith("postgres://")
    assert services["worker"]["environment"]["CELERY_BROKER_URL"].startswith("redis://")
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "requirements.lock" in dockerfile and "collectstatic" in dockerfile


def test_env_example_names_every_setting_read_from_env():
    text = (REPO / ".env.example").read_text()
    for key in (
        "SECRET_KEY",
        "DEBUG",
        "ALLOWED_HOSTS",
        "DATABASE_URL",
        "CELERY_BROKER_URL",
        "RELEASE_HASH_KEY",
    ):
        assert f"{key}=" in text


@pytest.mark.django_db
def test_no_missing_migrations():
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)


def test_celery_app_uses_django_settings_and_discovers_tasks():
    from rcp_platform import celery_app

    assert celery_app.conf.broker_url == settings.CELERY_BROKER_URL
    assert celery_app.conf.task_serializer == "json"
    assert celery_app.conf.task_soft_time_limit == settings.CELERY_TASK_SOFT_TIME_LIMIT
    assert Path(settings.VAR_DIR).is_absolute()
