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


SECRET_COMMENT = "zebra-quartz-7731 my private note"
# A key of the strength export demands (48 random bytes, URL-safe base64).
TEST_RELEASE_KEY = "pX2c9Qm4Vt7Lk1Zr8Wn3Hy6Bs0Jd5Fg-Ua_Ke2Ox9Ti4Rc7Mv1Nb8Yq3Sw6El0Gh5I"


@pytest.fixture
def release_settings(settings, tmp_path):
    """Releases go to a temporary MEDIA_ROOT, hashed with a test key."""
    settings.MEDIA_ROOT = str(tmp_path / "media")
    settings.RELEASE_HASH_KEY = TEST_RELEASE_KEY
    return settings


@pytest.fixture
def simulated_study(db, admin_user, release_settings):
    """A study graded to the end through the real services: annotators grade from a
    hidden truth with noise, gains track the truth, qrels are sparse and noisy. One
    annotator types ``SECRET_COMMENT`` on every document."""
    from annotation.services import study_close, study_create, study_member_add
    from tests.annotation.factories import build_truth_world, simulate_grading

    tw = build_truth_world(seed=4)
    study = study_create(
        name="Simulated",
        datasets=[tw.world.dataset],
        systems=tw.world.systems,
        n_contests=30,
        seed=2,
        open_now=True,
        created_by=admin_user,
    )
    users = AnnotatorFactory.create_batch(5)
    for user in users:
        study_member_add(study=study, annotator=user)
    simulate_grading(
        study=study,
        annotators=users[:1],
        truth=tw.truth,
        seed=1,
        comment=SECRET_COMMENT,
    )
    simulate_grading(study=study, annotators=users[1:], truth=tw.truth, seed=2)
    study_close(study=study)
    study.refresh_from_db()
    return study, users
