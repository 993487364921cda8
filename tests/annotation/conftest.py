"""Fixtures of the annotation tests: a seeded world, an open study, annotators."""

from __future__ import annotations

import pytest
from django.core.cache import cache

from annotation.services import study_create, study_member_add
from tests.annotation.factories import build_world
from tests.factories import AnnotatorFactory


@pytest.fixture(autouse=True)
def _fast_password_hasher(settings):
    """Test-only: PBKDF2 costs ~0.5 s per hash here, for users and logins alike."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _fresh_login_throttle():
    """Failed-login counters live in the cache; no test inherits another's."""
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def world(db):
    return build_world(n_queries=8, pool=12, n_systems=3, seed=3)


@pytest.fixture
def make_study(world, admin_user):
    def make(**kwargs):
        options = {
            "name": "Study A",
            "datasets": [world.dataset],
            "systems": world.systems,
            "n_contests": 6,
            "seed": 11,
            "open_now": True,
            "created_by": admin_user,
        }
        options.update(kwargs)
        return study_create(**options)

    return make


@pytest.fixture
def study(make_study):
    return make_study()


@pytest.fixture
def members(study, annotator):
    """The fixed annotator ``bob`` plus three more, all invited to ``study``."""
    users = [annotator, *AnnotatorFactory.create_batch(3)]
    for user in users:
        study_member_add(study=study, annotator=user)
    return users
