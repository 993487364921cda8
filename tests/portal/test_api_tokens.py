"""API tokens (portal/tokens.py): a lifetime, and rotation on password change."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.cache import cache
from django.core.management import call_command
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.factories import UserFactory


@pytest.fixture(autouse=True)
def _fast(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    cache.clear()


def _obtain(username: str, password: str) -> dict:
    response = APIClient().post(
        "/api/v1/auth/token", {"username": username, "password": password}
    )
    assert response.status_code == 200, response.content
    return response.json()


def _get(token: str):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client.get("/api/v1/datasets")


def test_tokens_rotate_when_the_password_changes(db):
    """Any password change (a save, the annotator re-password service, the
    changepassword command path) deletes the account's token; the new password
    gets a new one. Other saves (last_login) keep it."""
    from annotation.services import annotator_create

    staff = UserFactory(username="ops", password="old-password-1", is_staff=True)
    token = _obtain("ops", "old-password-1")["token"]
    assert _get(token).status_code == 200
    staff.last_login = timezone.now()
    staff.save(update_fields=["last_login"])
    assert _get(token).status_code == 200
    staff.set_password("new-password-2")
    staff.save()
    refused = _get(token)
    assert refused.status_code in (401, 403)
    assert "Invalid token" in refused.json()["message"]
    fresh = _obtain("ops", "new-password-2")["token"]
    assert fresh != token and _get(fresh).status_code == 200

    annotator, _pw = annotator_create(username="ann", password="ann-password-1")
    old = Token.objects.create(user=annotator)
    annotator_create(
        username="ann", password="ann-password-2", update=True, reset_password=True
    )
    assert not Token.objects.filter(key=old.key).exists()


def test_expired_tokens_are_refused_with_a_clear_message(db, settings):
    """A token older than API_TOKEN_LIFETIME_S is refused saying it expired and how
    to get another; asking again issues a new one."""
    settings.API_TOKEN_LIFETIME_S = 3600
    UserFactory(username="ops", password="pw-test-123", is_staff=True)
    issued = _obtain("ops", "pw-test-123")
    expires = timezone.datetime.fromisoformat(issued["expires"])
    assert timedelta(seconds=3590) < expires - timezone.now() <= timedelta(seconds=3600)
    assert _obtain("ops", "pw-test-123")["token"] == issued["token"]  # still valid
    Token.objects.filter(key=issued["token"]).update(
        created=timezone.now() - timedelta(seconds=3601)
    )
    refused = _get(issued["token"])
    assert refused.status_code in (401, 403)
    message = refused.json()["message"]
    assert message.startswith("API token expired at ")
    assert "POST /api/v1/auth/token" in message
    renewed = _obtain("ops", "pw-test-123")["token"]
    assert renewed != issued["token"] and _get(renewed).status_code == 200


def test_changepassword_command_rotates_tokens(db, monkeypatch):
    staff = UserFactory(username="cli", password="pw-test-123", is_staff=True)
    token = Token.objects.create(user=staff)
    monkeypatch.setattr("getpass.getpass", lambda prompt="": "brand-new-password-3")
    call_command("changepassword", "cli")
    assert not Token.objects.filter(key=token.key).exists()
