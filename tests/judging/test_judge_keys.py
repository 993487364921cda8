"""A judge's key variable: only variables declared for judges, never the platform's own
secrets, checked when a judge is written and again in the worker right before a call
(issue 10, item 1). The listening endpoint below is what an attacker would run: it
records every Authorization header it receives."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.contrib.auth.models import Permission
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command

from benchmarks.services import dataset_import
from judging import services
from judging.clients import FatalJudgeError, JudgeEndpoint
from judging.keyenv import api_key_env_refusal
from judging.models import JobStatus, Judge, JudgingJob
from judging.runner import job_run
from rcp_platform.exceptions import ApplicationError
from tests.conftest import DEMO_TINY
from tests.factories import UserFactory

SECRET = "release-hash-key-that-must-never-leave-this-machine-0123456789"


@pytest.fixture
def listener():
    """An HTTP endpoint that records each request's path and Authorization header."""
    seen: list[tuple[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _record(self):
            seen.append((self.path, self.headers.get("Authorization", "")))
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            self.send_response(500)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST = _record

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", seen
    server.shutdown()
    server.server_close()


@pytest.fixture
def tiny(db):
    return dataset_import(
        name="tiny",
        corpus=DEMO_TINY / "corpus.jsonl",
        queries=DEMO_TINY / "queries.jsonl",
        pools=DEMO_TINY / "pools.tsv",
    )


@pytest.mark.parametrize(
    "name", ["RELEASE_HASH_KEY", "SECRET_KEY", "DATABASE_URL", "CELERY_BROKER_URL"]
)
def test_worker_never_sends_a_platform_secret(
    name, tiny, listener, monkeypatch, settings
):
    """A judge row naming a platform secret (written before the rule, or behind the
    services) makes the job fail with the reason; the endpoint receives nothing."""
    url, seen = listener
    monkeypatch.setenv(name, SECRET)
    # The worker must refuse even if an operator put the name on the allow-list.
    settings.JUDGE_KEY_ENV_ALLOW = [name]
    judge = Judge.objects.create(
        name="evil", base_urls=[url], model="m", api_key_env=name, concurrency=2
    )
    job = services.job_create(
        dataset=tiny, judge=judge, query_ids=["q1"], stages="tournament", queue=False
    )
    assert job_run(job_id=job.pk) == JobStatus.FAILED
    job = JudgingJob.objects.get(pk=job.pk)
    assert name in job.error and "refusing to send its key" in job.error
    assert seen == []  # not one request, so certainly not the secret
    assert job.windows.filter(status="done").count() == 0


def test_endpoint_refuses_to_read_a_platform_secret(monkeypatch):
    monkeypatch.setenv("SECRET_KEY", SECRET)
    endpoint = JudgeEndpoint(
        name="evil",
        base_urls=("http://127.0.0.1:9/v1",),
        model="m",
        api_key_env="SECRET_KEY",
    )
    with pytest.raises(FatalJudgeError, match="platform's own settings"):
        endpoint.api_key  # noqa: B018 - the property is what is tested


def test_declared_key_is_sent(tiny, listener, monkeypatch):
    """The rule does not break real keys: an RCP_JUDGE_KEY_ variable is sent."""
    url, seen = listener
    monkeypatch.setenv("RCP_JUDGE_KEY_SIM", "sk-judge")
    judge = services.judge_create(
        name="ok",
        base_urls=[url],
        model="m",
        api_key_env="RCP_JUDGE_KEY_SIM",
        concurrency=1,
        timeout_s=2,
    )
    endpoint = JudgeEndpoint.from_judge(judge)
    assert endpoint.api_key == "sk-judge"


@pytest.mark.parametrize(
    ("name", "allow", "ok"),
    [
        ("", [], True),
        ("RCP_JUDGE_KEY_OPENAI", [], True),
        ("RCP_JUDGE_KEY_", [], False),
        ("OPENAI_API_KEY", [], False),
        ("OPENAI_API_KEY", ["OPENAI_API_KEY"], True),
        ("SECRET_KEY", ["SECRET_KEY"], False),
        ("RELEASE_HASH_KEY", [], False),
        ("DATABASE_URL", ["DATABASE_URL"], False),
        ("JUDGE_LIMITER_URL", [], False),
        ("EMAIL_HOST_PASSWORD", [], False),
        ("lower_case", [], False),
        ("RCP_JUDGE_KEY_X; rm -rf", [], False),
    ],
)
def test_key_variable_rule(name, allow, ok, settings):
    settings.JUDGE_KEY_ENV_ALLOW = allow
    assert (api_key_env_refusal(name) is None) is ok


def test_services_model_and_command_refuse(db):
    with pytest.raises(ApplicationError, match="platform's own settings"):
        services.judge_create(
            name="j", base_urls=["http://x/v1"], model="m", api_key_env="SECRET_KEY"
        )
    judge = services.judge_create(
        name="j", base_urls=["http://x/v1"], model="m", api_key_env="RCP_JUDGE_KEY_J"
    )
    with pytest.raises(ApplicationError, match="RELEASE_HASH_KEY"):
        services.judge_update(judge=judge, api_key_env="RELEASE_HASH_KEY")
    assert Judge.objects.get(pk=judge.pk).api_key_env == "RCP_JUDGE_KEY_J"
    judge.api_key_env = "DATABASE_URL"
    with pytest.raises(ValidationError) as caught:  # the admin's ModelForm path
        judge.full_clean()
    assert "api_key_env" in caught.value.message_dict
    with pytest.raises(CommandError, match="platform's own settings"):
        call_command(
            "add_judge",
            "--name",
            "k",
            "--base-url",
            "http://x/v1",
            "--model",
            "m",
            "--api-key-env",
            "SECRET_KEY",
        )
    assert not Judge.objects.filter(name="k").exists()


def test_api_needs_the_model_permission_and_a_declared_variable(db, api_client_for):
    staff = UserFactory(username="sam", is_staff=True)
    body = {
        "name": "j",
        "base_urls": ["http://127.0.0.1:9/v1"],
        "model": "m",
        "api_key_env": "RCP_JUDGE_KEY_J",
    }
    client = api_client_for(staff)
    assert client.get("/api/v1/judges").status_code == 200
    assert client.post("/api/v1/judges", body, format="json").status_code == 403
    staff.user_permissions.add(Permission.objects.get(codename="add_judge"))
    staff = type(staff).objects.get(pk=staff.pk)  # drop the permission cache
    client = api_client_for(staff)
    refused = client.post(
        "/api/v1/judges", body | {"api_key_env": "SECRET_KEY"}, format="json"
    )
    assert refused.status_code == 400
    assert "api_key_env" in refused.json()["extra"]["fields"]
    created = client.post("/api/v1/judges", body, format="json")
    assert created.status_code == 201, created.json()
    assert Judge.objects.get(name="j").api_key_env == "RCP_JUDGE_KEY_J"
