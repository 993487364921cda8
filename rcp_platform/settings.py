"""The one settings module. Every value comes from the environment (django-environ).

Defaults need no server: SQLite under ``var/``, a Celery broker that needs no server
(kombu's filesystem transport under ``var/celery``). DEBUG is off unless the
environment or ``.env`` turns it on (``make run`` does, for the development server);
with DEBUG off every security setting takes its production value and placeholder
secrets are refused. Production differs only in environment values (``.env.example``).
"""

from __future__ import annotations

import os
from pathlib import Path

import environ
from csp.constants import NONCE, NONE, SELF, UNSAFE_INLINE
from django.core.exceptions import ImproperlyConfigured

from rcp_platform.keys import weak_key_reason

BASE_DIR = Path(__file__).resolve().parent.parent
env = environ.Env()
# RCP_ENV_FILE: another file than .env (tests of `make run` use a temporary one).
env_file = Path(os.environ.get("RCP_ENV_FILE") or BASE_DIR / ".env")
if env_file.exists():
    environ.Env.read_env(env_file)
# Runtime files (SQLite database, embedded broker folders, lock files, media).
VAR_DIR = Path(env.str("RCP_VAR_DIR", default=str(BASE_DIR / "var")))

# ---------------------------------------------------------------------------- CORE
DEBUG = env.bool("DEBUG", default=False)
_DEV_SECRET_KEY = "dev-insecure-secret-key-only-for-DEBUG"
SECRET_KEY = env.str("SECRET_KEY", default="")
if not DEBUG:
    # A guessable key in production would let anyone forge sessions and tokens.
    # Django's own deploy check wants 50 characters.
    _problem = weak_key_reason(SECRET_KEY, min_chars=50)
    if _problem:
        raise ImproperlyConfigured(
            f"SECRET_KEY {_problem}. Set SECRET_KEY to a long random string (required "
            'when DEBUG is off), e.g. python -c "import secrets; '
            'print(secrets.token_urlsafe(50))"'
        )
elif not SECRET_KEY:
    SECRET_KEY = _DEV_SECRET_KEY
ALLOWED_HOSTS = env.list(
    "ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"] if DEBUG else []
)
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

# Keyed one-way hashing of annotator identities in releases. Kept outside the
# database, no default even with DEBUG: export refuses a missing, short or
# placeholder key (annotation/services/reports.py::release_key); `make run`
# writes a fresh one into .env on first start.
RELEASE_HASH_KEY = env.str("RELEASE_HASH_KEY", default="")

# ---------------------------------------------------------------------------- SECURITY
# Production values unless DEBUG; each can be overridden from the environment
# (e.g. SECURE_SSL_REDIRECT=false when a proxy in front already redirects).
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=not DEBUG)
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=not DEBUG)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=not DEBUG)
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=0 if DEBUG else 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool(
    "SECURE_HSTS_INCLUDE_SUBDOMAINS", default=not DEBUG
)
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=not DEBUG)
# Behind a TLS-terminating proxy: SECURE_PROXY_SSL_HEADER=HTTP_X_FORWARDED_PROTO,https
# (only if the proxy always sets or strips that header).
_proxy_ssl = env.list("SECURE_PROXY_SSL_HEADER", default=[])
SECURE_PROXY_SSL_HEADER = tuple(_proxy_ssl) if len(_proxy_ssl) == 2 else None
SECURE_CONTENT_TYPE_NOSNIFF = True
# DEBUG's technical 500 page (tracebacks with local variables) for staff only.
DEFAULT_EXCEPTION_REPORTER = "rcp_platform.errors.StaffOnlyExceptionReporter"
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True
# The grading page reads the CSRF cookie from JavaScript, so it stays readable.
CSRF_COOKIE_HTTPONLY = False
# Content Security Policy (django-csp): scripts only from this site or inline with
# the per-request nonce; inline style attributes (progress bars, SVG plots) allowed.
CONTENT_SECURITY_POLICY_REPORT_ONLY = None
_csp = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF, NONCE],
        "style-src": [SELF, UNSAFE_INLINE],
        "img-src": [SELF, "data:"],
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }
}
if env.str("CSP_REPORT_URI", default=""):
    _csp["DIRECTIVES"]["report-uri"] = [env.str("CSP_REPORT_URI")]
CONTENT_SECURITY_POLICY = _csp
if env.bool("CSP_REPORT_ONLY", default=False):
    CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY_REPORT_ONLY = None, _csp

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "csp",
    "benchmarks",
    "judging",
    "calibration",
    "annotation",
    "panels",
    "portal",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
]

ROOT_URLCONF = "rcp_platform.urls"
WSGI_APPLICATION = "rcp_platform.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# ---------------------------------------------------------------------------- DATABASE
DATABASES = {
    "default": env.db("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'rcp.sqlite3'}"),
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    if DATABASES["default"]["NAME"] not in ("", ":memory:"):
        Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    # Web server and worker share the file: wait for locks instead of failing,
    # and take the write lock at BEGIN so concurrent writers queue cleanly.
    # Tests use a file too: jobs run threads, and SQLite's shared in-memory database
    # locks whole tables across connections instead of waiting.
    # One file per test process, so concurrent runs never share (or delete) it.
    DATABASES["default"].setdefault("TEST", {}).setdefault(
        "NAME", str(VAR_DIR / f"test-{os.getpid()}.sqlite3")
    )
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "timeout": 30,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL;",
        }
    )
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # Persistent connections: opening one per request (the default) cost PostgreSQL
    # a backend process per API call and capped the annotation API's throughput.
    # DB_CONN_MAX_AGE=0 restores one per request. Health checks cost a round trip
    # per request; without them a connection broken by a database restart fails
    # one request per process, then is replaced.
    DATABASES["default"]["CONN_MAX_AGE"] = env.int("DB_CONN_MAX_AGE", default=60)
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = env.bool(
        "DB_CONN_HEALTH_CHECKS", default=False
    )
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# ---------------------------------------------------------------------------- CACHE
# Login throttling counters live here: with several web processes (gunicorn
# workers, several machines) set CACHE_URL=redis://host:6379/1 so they share them;
# the local-memory default counts per process (a deploy check warns about it).
CACHES = {"default": env.cache("CACHE_URL", default="locmemcache://")}

# ---------------------------------------------------------------------------- AUTH
# Run wherever a password is chosen: annotator creation and the one-time
# set-password page (annotation.views.SetPasswordView).
AUTH_PASSWORD_VALIDATORS = [
    {
        "NAME": "django.contrib.auth.password_validation."
        "UserAttributeSimilarityValidator"
    },
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"
# API tokens (POST /api/v1/auth/token) expire this many seconds after they were
# issued, and every token of an account is deleted when its password changes.
API_TOKEN_LIFETIME_S = env.int("API_TOKEN_LIFETIME_S", default=7 * 24 * 3600)

# ---------------------------------------------------------------------------- LOGIN THROTTLING
# Every password login (login page, admin, API token) goes through this backend; see
# portal/auth.py. Failures are counted in the cache per (client address, username)
# and per username; a correct password of another username is never blocked.
AUTHENTICATION_BACKENDS = ["portal.auth.ThrottledModelBackend"]
LOGIN_THROTTLE_ATTEMPTS = env.int("LOGIN_THROTTLE_ATTEMPTS", default=5)
LOGIN_THROTTLE_USER_ATTEMPTS = env.int(
    "LOGIN_THROTTLE_USER_ATTEMPTS", default=4 * LOGIN_THROTTLE_ATTEMPTS
)
LOGIN_THROTTLE_WINDOW = env.int("LOGIN_THROTTLE_WINDOW", default=300)
# The client address behind a reverse proxy: the header the proxy sets (e.g.
# X-Forwarded-For) and how many trusted proxies append to it. Off by default:
# without a proxy that overwrites it, the header is whatever the client sent.
TRUSTED_PROXY_HEADER = env.str("TRUSTED_PROXY_HEADER", default="")
TRUSTED_PROXY_COUNT = env.int("TRUSTED_PROXY_COUNT", default=1)

# ---------------------------------------------------------------------------- I18N
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# ---------------------------------------------------------------------------- STATIC
STATIC_URL = "static/"
STATIC_ROOT = env.path("STATIC_ROOT", default=str(BASE_DIR / "staticfiles"))
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"
        if not DEBUG
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}
MEDIA_ROOT = env.path("MEDIA_ROOT", default=str(VAR_DIR / "media"))
FILE_UPLOAD_MAX_MEMORY_SIZE = 5 * 1024 * 1024
DATA_UPLOAD_MAX_MEMORY_SIZE = 50 * 1024 * 1024

# ---------------------------------------------------------------------------- IMPORTS
# Caps of every benchmark file read (benchmarks/formats.py), after gunzip: a small
# .gz can hold gigabytes. Raise them for very large corpora imported from the shell.
IMPORT_MAX_BYTES = env.int("IMPORT_MAX_BYTES", default=16 * 1024**3)
IMPORT_MAX_LINE_CHARS = env.int("IMPORT_MAX_LINE_CHARS", default=8 * 1024**2)

# ---------------------------------------------------------------------------- RELEASES
# A release still `running` this many seconds after a worker claimed it was lost
# with its worker (the build task's hard time limit is below it): it is marked failed
# and can be retried.
RELEASE_BUILD_LEASE_S = env.int("RELEASE_BUILD_LEASE_S", default=2000)

# ---------------------------------------------------------------------------- DRF
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "portal.tokens.ExpiringTokenAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["benchmarks.access.IsStaffOrReviewerReadOnly"],
    # JSON nested too deep, NUL characters and lone surrogates are a 400, not a 500
    "DEFAULT_PARSER_CLASSES": [
        "rcp_platform.parsers.StrictJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "rcp_platform.api.exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "RCP Platform API",
    "DESCRIPTION": "Calibrated relevance evaluation of search rerankers.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["benchmarks.access.IsStaffOrReviewerReadOnly"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# ---------------------------------------------------------------------------- CELERY
# Embedded default: kombu's filesystem transport needs no server, so `make run`
# starts a real background worker on a bare machine.
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default="filesystem://")
_BROKER_DIR = VAR_DIR / "celery" / "broker"
CELERY_BROKER_TRANSPORT_OPTIONS = (
    {
        "data_folder_in": str(_BROKER_DIR),
        "data_folder_out": str(_BROKER_DIR),
        "processed_folder": str(VAR_DIR / "celery" / "processed"),
        # Broadcasts (celery control, pidbox) default to ./control in the CWD.
        "control_folder": str(VAR_DIR / "celery" / "control"),
        "store_processed": False,
    }
    if CELERY_BROKER_URL.startswith("filesystem")
    else {}
)
for _folder in set(CELERY_BROKER_TRANSPORT_OPTIONS.values()) - {False}:
    # The transport polls these folders from the first moment; they must exist.
    Path(_folder).mkdir(parents=True, exist_ok=True)
CELERY_RESULT_BACKEND = env.str("CELERY_RESULT_BACKEND", default=None)
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_SOFT_TIME_LIMIT = env.int("CELERY_TASK_SOFT_TIME_LIMIT", default=3600)
CELERY_TASK_TIME_LIMIT = env.int("CELERY_TASK_TIME_LIMIT", default=3900)
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ALWAYS_EAGER = env.bool("CELERY_TASK_ALWAYS_EAGER", default=False)

# ---------------------------------------------------------------------------- CALIBRATION
# A running fit stamps a heartbeat every 5 s; one silent for this long belonged to a
# dead worker and is marked failed (it can be run again).
CALIBRATION_FIT_LEASE = env.int("CALIBRATION_FIT_LEASE", default=300)

# ---------------------------------------------------------------------------- LLM PROVIDERS
# Judges name the environment variable that holds their API key (never the key itself).
JUDGE_DEFAULT_TIMEOUT = env.float("JUDGE_DEFAULT_TIMEOUT", default=120.0)
# Variables that may hold a judge's key: names starting RCP_JUDGE_KEY_, plus these
# (comma-separated). The platform's own settings are refused whatever this says
# (judging/keyenv.py): the worker sends the value to the judge's URL.
JUDGE_KEY_ENV_ALLOW = env.list("JUDGE_KEY_ENV_ALLOW", default=[])
# Cap on requests in flight per judge across all workers (judging/LIMITS.md):
# redis://… for many machines; default: a redis broker if set, else lock files in var/.
JUDGE_LIMITER_URL = env.str("JUDGE_LIMITER_URL", default="")
# A running job whose heartbeat is older than this is considered dead (resumable).
JUDGING_HEARTBEAT_STALE_S = env.int("JUDGING_HEARTBEAT_STALE_S", default=60)
# Runners beat every JUDGING_HEARTBEAT_S and renew the leases of the windows whose
# calls are in progress to JUDGING_LEASE_S: a window is re-claimed by another runner
# only after its holder missed several beats (died or froze), never for a slow call.
JUDGING_HEARTBEAT_S = env.float("JUDGING_HEARTBEAT_S", default=2.0)
JUDGING_LEASE_S = env.float("JUDGING_LEASE_S", default=30.0)
# Lane tasks one judging job fans out to (judging/tasks.py): each runs in one worker
# process and all share the job's (query, stage) units. Request handling is CPU-bound
# in Python, so set it to the worker processes you want on one job (e.g. one per core
# across all machines); extra lanes find nothing to do and exit.
JUDGING_LANES = env.int("JUDGING_LANES", default=2)
# (query, stage) units one lane works on at once; each holds a database connection
# (PostgreSQL's max_connections must cover lanes x this + web + other workers).
JUDGING_UNIT_THREADS = env.int("JUDGING_UNIT_THREADS", default=16)
# A running LLM panel run whose heartbeat is older than this is taken over on resume.
PANELS_HEARTBEAT_STALE_S = env.int("PANELS_HEARTBEAT_STALE_S", default=60)

# ---------------------------------------------------------------------------- LOGGING
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # The level on the handler too: records of loggers with a level of their own
    # (Django's "django" logger is INFO) propagate past the root's level.
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "level": env.str("LOG_LEVEL", default="INFO"),
        }
    },
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    # One line per judge request would drown everything else (and cost CPU).
    "loggers": {
        name: {"level": "WARNING"} for name in ("httpx", "httpx2", "httpcore", "openai")
    },
}
