"""Judges from the web (issue 12, item 3): add and edit need the model permissions, the
key variable is checked, and "Test connection" calls the endpoint's /models and one
tiny completion through the official client, showing the answer or the error."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission

from judging import services
from judging.models import Judge
from judging.simulated import start_simulated_judge
from tests.factories import UserFactory


@pytest.fixture
def sim():
    server, _thread, url = start_simulated_judge(seed=1, model="sim-1")
    yield server, url
    server.stop()


@pytest.fixture(autouse=True)
def _limiter(settings, tmp_path):
    settings.JUDGE_LIMITER_URL = f"file://{tmp_path / 'slots'}"


def _staff(*codenames: str):
    user = UserFactory(
        username=f"staff-{'-'.join(codenames) or 'plain'}", is_staff=True
    )
    for codename in codenames:
        user.user_permissions.add(Permission.objects.get(codename=codename))
    return user


def _form(url: str, **over) -> dict:
    return {
        "name": "sim",
        "base_urls": url,
        "model": "sim-1",
        "api_key_env": "",
        "concurrency": 3,
        "timeout_s": 10,
        "decoding": "json_schema",
        "max_output_tokens": 512,
        "temperature": "",
        "context_tokens": "",
        "extra_body": "{}",
        **over,
    }


@pytest.mark.django_db
def test_pages_need_the_model_permissions(client, reviewer):
    judge = services.judge_create(
        name="j", base_urls=["http://127.0.0.1:9/v1"], model="m"
    )
    for user, new, edit in [
        (reviewer, 403, 403),
        (_staff(), 403, 403),
        (_staff("add_judge"), 200, 403),
        (_staff("change_judge"), 403, 200),
    ]:
        client.force_login(user)
        assert client.get("/judging/judges/new").status_code == new, user
        assert client.get(f"/judging/judges/{judge.pk}/edit").status_code == edit, user
        assert client.post("/judging/judges/new", _form("http://x/v1")).status_code in (
            new if new == 403 else 302,
        )
    client.logout()
    assert client.get("/judging/judges/new").status_code == 302  # to the login page


@pytest.mark.django_db
def test_add_then_edit_a_judge(client):
    client.force_login(_staff("add_judge", "change_judge", "view_dataset"))
    refused = client.post(
        "/judging/judges/new", _form("http://127.0.0.1:9/v1", api_key_env="SECRET_KEY")
    )
    assert refused.status_code == 200 and not Judge.objects.exists()
    assert "platform&#x27;s own settings" in refused.content.decode()

    created = client.post(
        "/judging/judges/new",
        _form(
            "http://a:8000/v1/\nhttp://b:8000/v1",
            api_key_env="RCP_JUDGE_KEY_SIM",
            extra_body='{"top_k": 5}',
        ),
    )
    assert created.status_code == 302
    judge = Judge.objects.get(name="sim")
    assert judge.base_urls == ["http://a:8000/v1", "http://b:8000/v1"]
    assert (judge.api_key_env, judge.concurrency, judge.timeout_s) == (
        "RCP_JUDGE_KEY_SIM",
        3,
        10.0,
    )
    assert judge.extra_body == {"top_k": 5} and judge.temperature is None

    page = client.get("/judging/")
    assert f"/judging/judges/{judge.pk}/edit" in page.content.decode()
    edit = client.get(f"/judging/judges/{judge.pk}/edit").content.decode()
    assert "RCP_JUDGE_KEY_SIM" in edit and "http://b:8000/v1" in edit

    saved = client.post(
        f"/judging/judges/{judge.pk}/edit",
        _form("http://a:8000/v1", name="renamed", concurrency=7, temperature="0.2"),
    )
    assert saved.status_code == 302
    judge.refresh_from_db()
    assert judge.name == "sim"  # the name is the windows' family: not editable
    assert (judge.concurrency, judge.temperature, judge.base_urls) == (
        7,
        0.2,
        ["http://a:8000/v1"],
    )


@pytest.mark.django_db
def test_test_connection_shows_models_and_answer_or_the_error(client, sim):
    server, url = sim
    client.force_login(_staff("add_judge", "view_dataset"))
    ok = client.post("/judging/judges/new", _form(url, test="1"))
    html = ok.content.decode()
    assert ok.status_code == 200 and not Judge.objects.exists()  # tested, not saved
    assert 'data-ok="true"' in html and "sim-1" in html
    # The simulated judge's own words for a prompt that is not a judging window.
    assert "I can only judge documents given in &lt;doc&gt; elements." in html
    stats = server.stats()
    assert stats["chat_requests"] == 1 and stats["requests"] == 2  # /models + 1 chat

    wrong_model = client.post(
        "/judging/judges/new", _form(url, model="other", test="1")
    )
    html = wrong_model.content.decode()
    assert 'data-ok="false"' in html and "HTTP 404" in html
    assert "model other not listed" in html

    dead = client.post(
        "/judging/judges/new", _form("http://127.0.0.1:9/v1", test="1")
    ).content.decode()
    assert 'data-ok="false"' in dead and "cannot connect" in dead


@pytest.mark.django_db
def test_test_connection_sends_the_declared_key(client, monkeypatch):
    server, _thread, url = start_simulated_judge(seed=1, api_key="sk-sim")
    try:
        client.force_login(_staff("add_judge", "view_dataset"))
        no_key = client.post("/judging/judges/new", _form(url, model="m", test="1"))
        assert "HTTP 401" in no_key.content.decode()
        monkeypatch.setenv("RCP_JUDGE_KEY_SIM", "sk-sim")
        with_key = client.post(
            "/judging/judges/new",
            _form(url, model="m", api_key_env="RCP_JUDGE_KEY_SIM", test="1"),
        )
        assert 'data-ok="true"' in with_key.content.decode()
    finally:
        server.stop()
