"""Fixtures of the panel tests: a seeded study, simulated judges over real HTTP."""

from __future__ import annotations

import os

import pytest

from annotation.services import study_create
from judging.services import judge_create
from judging.simulated import start_simulated_judge
from panels.services import panel_create
from tests.annotation.factories import build_truth_world

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.fixture(autouse=True)
def _limiter(settings, tmp_path):
    settings.JUDGE_LIMITER_URL = f"file://{tmp_path / 'slots'}"


@pytest.fixture
def truth_world(db):
    return build_truth_world(n_queries=6, pool=10, n_systems=3, seed=4)


@pytest.fixture
def study(truth_world, admin_user):
    w = truth_world.world
    return study_create(
        name="Panel study",
        datasets=[w.dataset],
        systems=w.systems,
        n_contests=8,
        seed=5,
        open_now=True,
        created_by=admin_user,
    )


@pytest.fixture
def servers():
    """Three simulated judges (different seeds); stopped after the test."""
    started = []

    def start(n: int = 3, **options):
        for i in range(n):
            server, _thread, url = start_simulated_judge(seed=100 + i, **options)
            started.append((server, url))
        return started[-n:]

    yield start
    for server, _url in started:
        server.stop()


@pytest.fixture
def make_panel():
    def make(servers, name: str = "trio", concurrency: int = 2):
        judges = [
            judge_create(
                name=f"{name}-judge-{i}",
                base_urls=[url],
                model="sim",
                concurrency=concurrency,
                timeout_s=10.0,
            )
            for i, (_server, url) in enumerate(servers)
        ]
        return panel_create(name=name, judges=judges)

    return make
