"""Shared fixtures: the fixed cast of users and API clients for each role."""

from __future__ import annotations

from pathlib import Path

import pytest
from rest_framework.test import APIClient

from tests import tiers
from tests.factories import UserFactory

REPO = Path(__file__).resolve().parents[1]
REFERENCE_DATA = (
    REPO / "tests" / "data" / "reference"
)  # copies of ../shared/reference/data
DEMO_TINY = REPO / "portal" / "demo_data" / "tiny"


def pytest_configure(config):
    for tier, what in tiers.TIERS.items():
        config.addinivalue_line("markers", f"{tier}: the test needs {what}")


def pytest_runtest_setup(item):
    """Skip a test whose service is missing (one line saying what to install), or
    fail it when RCP_REQUIRE_SERVICES is set (CI runs everything)."""
    for tier in tiers.TIERS:
        if item.get_closest_marker(tier) and not tiers.available(tier):
            message = f"{item.nodeid} {tiers.missing_message(tier)}"
            if tiers.required():
                pytest.fail(f"RCP_REQUIRE_SERVICES is set but {message}", pytrace=False)
            pytest.skip(message)


@pytest.fixture
def admin_user(db):
    return UserFactory(username="alice", is_staff=True, is_superuser=True)


@pytest.fixture
def reviewer(db):
    from django.contrib.auth.models import Permission

    user = UserFactory(username="rita")
    user.user_permissions.add(Permission.objects.get(codename="view_dataset"))
    return user


@pytest.fixture
def annotator(db):
    from annotation.services import annotator_group_ensure

    user = UserFactory(username="bob")
    user.groups.add(annotator_group_ensure())
    return user


@pytest.fixture
def outsider(db):
    return UserFactory(username="charlie")


@pytest.fixture
def api_client_for():
    def make(user):
        client = APIClient()
        if user is not None:
            client.force_authenticate(user=user)
        return client

    return make
