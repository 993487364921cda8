"""Settings, the production compose file, migrations and the Celery app."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from django.conf import settings
from django.core.management import call_command

from tests.conftest import REPO


def _production_env(env: dict[str, str], tmp_env_file: Path | None = None) -> dict:
    """The pytest environment minus everything the test profile sets: the platform's
    own settings module, no .env (a missing file), plus ``env``."""
    # Only what a process needs to run: nothing the test session set (DEBUG,
    # DJANGO_ALLOW_ASYNC_UNSAFE from the browser tests, ...) leaks in.
    clean = {
        k: v
        for k, v in os.environ.items()
        if k in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "VIRTUAL_ENV")
    }
    clean["DJANGO_SETTINGS_MODULE"] = "rcp_platform.settings"
    clean["RCP_ENV_FILE"] = str(tmp_env_file or REPO / "var" / "no-such.env")
    clean.update(env)
    return clean


def _django_setup(
    env: dict[str, str], expr: str = "settings.DEBUG"
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.conf import settings; "
            f"print({expr})",
        ],
        cwd=REPO,
        env=_production_env(env),
        capture_output=True,
        text=True,
        timeout=60,
    )


STRONG = "Zq3v9Xw2Lr8Tn5Kp1Hs7Jd4Fb6Gc0Ym-Ue_Ai2Oo9Ww3Ee8Rr5Tt1Yy7Uu4Ii6Pp0"


def test_settings_refuse_to_start_without_secret_key_when_not_debug():
    result = _django_setup({"DEBUG": "false", "ALLOWED_HOSTS": "x"})
    assert result.returncode != 0
    assert "SECRET_KEY is not set" in result.stderr


def test_settings_start_with_secret_key_when_not_debug_and_with_dev_default_in_debug():
    assert (
        _django_setup({"DEBUG": "false", "SECRET_KEY": STRONG}).stdout.strip()
        == "False"
    )
    assert _django_setup({"DEBUG": "true"}).stdout.strip() == "True"


def test_debug_defaults_to_off():
    """Without DEBUG in the environment or .env the settings are production ones."""
    result = _django_setup(
        {"SECRET_KEY": STRONG},
        "settings.DEBUG, settings.SECURE_SSL_REDIRECT, settings.SESSION_COOKIE_SECURE",
    )
    assert result.stdout.split() == ["False", "True", "True"], result.stderr


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("change-me", "placeholder"),
        ("django-insecure-" + STRONG, "placeholder"),
        ("dev-insecure-secret-key-only-for-DEBUG", "placeholder"),
        ("s" * 60, "does not look random"),
        (STRONG[:30], "too short"),
    ],
)
def test_production_settings_refuse_placeholder_secret_keys(key, reason):
    """DEBUG=false with the .env.example value, Django's insecure prefix, the dev
    key, a repeated character or a short key does not start, and says why."""
    result = _django_setup({"DEBUG": "false", "SECRET_KEY": key})
    assert result.returncode != 0
    assert f"SECRET_KEY {'is a ' if reason == 'placeholder' else ''}" in result.stderr
    assert reason in result.stderr


def test_security_settings_come_from_the_environment():
    """Production values by default with DEBUG off; each overridable from the
    environment (a deployment behind a proxy that redirects itself, say)."""
    expr = (
        "settings.SECURE_SSL_REDIRECT, settings.SECURE_HSTS_SECONDS, "
        "settings.CSRF_COOKIE_SECURE, settings.SECURE_PROXY_SSL_HEADER, "
        "settings.CONTENT_SECURITY_POLICY is None, "
        "bool(settings.CONTENT_SECURITY_POLICY_REPORT_ONLY)"
    )
    default = _django_setup({"DEBUG": "false", "SECRET_KEY": STRONG}, expr)
    assert default.stdout.strip() == "True 31536000 True None False False"
    custom = _django_setup(
        {
            "DEBUG": "false",
            "SECRET_KEY": STRONG,
            "SECURE_SSL_REDIRECT": "false",
            "SECURE_HSTS_SECONDS": "60",
            "CSRF_COOKIE_SECURE": "false",
            "SECURE_PROXY_SSL_HEADER": "HTTP_X_FORWARDED_PROTO,https",
            "CSP_REPORT_ONLY": "true",
        },
        expr,
    )
    assert custom.stdout.strip() == (
        "False 60 False ('HTTP_X_FORWARDED_PROTO', 'https') True True"
    ), custom.stderr


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


_COMPOSE_VAR = re.compile(r"\$\{(\w+)(?::([-?])([^}]*))?\}")


def _interpolate(value: str, variables: dict[str, str]) -> str:
    """docker compose's ${VAR}, ${VAR:-default} and ${VAR:?error} (from .env)."""

    def one(m: re.Match) -> str:
        name, kind, arg = m.group(1), m.group(2), m.group(3)
        found = variables.get(name, "")
        if kind == "?" and not found:
            raise ValueError(f"{name}: {arg}")
        return found or (arg if kind == "-" else "")

    return _COMPOSE_VAR.sub(one, str(value))


def _compose_web_environment(tmp_path: Path, fill: bool = True) -> tuple[dict, Path]:
    """The web container's environment as the README sets the stack up: .env copied
    from .env.example with SECRET_KEY, RELEASE_HASH_KEY and POSTGRES_PASSWORD
    filled in, then compose's ``environment:`` interpolated from it."""
    from rcp_platform.keys import new_key

    secrets_ = ("SECRET_KEY", "RELEASE_HASH_KEY", "POSTGRES_PASSWORD")
    dotenv: dict[str, str] = {}
    lines = []
    for line in (REPO / ".env.example").read_text().splitlines():
        if line.startswith("#") or "=" not in line:
            lines.append(line)
            continue
        key, value = line.split("=", 1)
        if fill and key in secrets_:
            value = new_key()
        dotenv[key] = value
        lines.append(f"{key}={value}")
    env_file = tmp_path / ".env"
    env_file.write_text("\n".join(lines) + "\n")
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    web = compose["services"]["web"]
    env = dict(dotenv)
    for key, value in web["environment"].items():
        env[key] = _interpolate(value, dotenv)
    return env, env_file


def test_compose_takes_database_credentials_from_env_file(tmp_path):
    """No fixed database password: the stack refuses to start without one in .env,
    and the web container's DATABASE_URL carries the one from .env."""
    compose_text = (REPO / "docker-compose.yml").read_text()
    assert "rcp:rcp@" not in compose_text
    postgres = yaml.safe_load(compose_text)["services"]["postgres"]["environment"]
    assert "${POSTGRES_PASSWORD:?" in postgres["POSTGRES_PASSWORD"]
    with pytest.raises(ValueError, match="POSTGRES_PASSWORD"):
        _compose_web_environment(tmp_path, fill=False)
    env, env_file = _compose_web_environment(tmp_path)
    password = re.search(r"^POSTGRES_PASSWORD=(.+)$", env_file.read_text(), re.M)[1]
    assert env["DATABASE_URL"] == f"postgres://rcp:{password}@postgres:5432/rcp"
    assert env["CACHE_URL"].startswith("redis://")  # throttling shared by workers


def test_check_deploy_is_clean_for_the_compose_stack(tmp_path):
    """`manage.py check --deploy` reports nothing for the compose stack's settings
    (production security settings, strong keys, a shared cache)."""
    env, env_file = _compose_web_environment(tmp_path)
    env["RCP_VAR_DIR"] = str(tmp_path / "var")
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=REPO,
        env=_production_env(env, env_file),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr + result.stdout
    assert "System check identified no issues (0 silenced)." in result.stdout


def _run_prepare(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`make run` up to the servers (scripts/run.py --prepare-only) on a fresh SQLite
    database, with its own .env."""
    full = _production_env(
        {
            "RCP_VAR_DIR": str(tmp_path / "var"),
            "STATIC_ROOT": str(tmp_path / "static"),
            **env,
        },
        tmp_path / ".env",
    )
    full.pop("RELEASE_HASH_KEY", None)
    return subprocess.run(
        [sys.executable, "scripts/run.py", "--prepare-only"],
        cwd=REPO,
        env=full,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_make_run_generates_a_release_key_and_with_debug_off_no_demo_accounts(
    tmp_path,
):
    """First `make run`: a strong RELEASE_HASH_KEY is written into .env (in place of
    the empty line copied from .env.example) and announced; kept on the next run.
    With DEBUG=false no demo account (public password) is created."""
    import sqlite3

    from rcp_platform.keys import weak_key_reason

    (tmp_path / ".env").write_text(
        f"DEBUG=false\nSECRET_KEY={STRONG}\nRELEASE_HASH_KEY=\nALLOWED_HOSTS=x\n"
    )
    first = _run_prepare(tmp_path, {})
    assert first.returncode == 0, first.stderr
    assert "Generated a new RELEASE_HASH_KEY into" in first.stdout
    assert "no demo data and no demo accounts" in first.stdout
    keys = re.findall(r"^RELEASE_HASH_KEY=(.*)$", (tmp_path / ".env").read_text(), re.M)
    assert len(keys) == 1 and weak_key_reason(keys[0]) is None
    with sqlite3.connect(tmp_path / "var" / "rcp.sqlite3") as db:
        users = db.execute("SELECT username FROM auth_user").fetchall()
    assert users == []
    second = _run_prepare(tmp_path, {})
    assert second.returncode == 0, second.stderr
    assert "Generated" not in second.stdout
    assert (
        re.findall(r"^RELEASE_HASH_KEY=(.*)$", (tmp_path / ".env").read_text(), re.M)
        == keys
    )


@pytest.mark.django_db
def test_pages_carry_a_content_security_policy_with_script_nonces(admin_user):
    """Every page sends a CSP without inline scripts except those carrying the
    request's nonce; the study page's own script carries it."""
    from django.test import Client

    client = Client()
    login = client.get("/login/")
    policy = login.headers["Content-Security-Policy"]
    assert "default-src 'self'" in policy and "object-src 'none'" in policy
    assert "frame-ancestors 'none'" in policy
    assert "'unsafe-inline'" not in policy.split("script-src")[1].split(";")[0]
    client.force_login(admin_user)
    page = client.get("/judging/")
    assert page.status_code == 200
    docs = client.get("/api/docs/")
    nonce = re.search(r"'nonce-([^']+)'", docs.headers["Content-Security-Policy"])
    body = docs.content.decode()
    assert "<script>" not in body  # the split view loads its script from a URL
    assert nonce is None or f'nonce="{nonce[1]}"' in body
