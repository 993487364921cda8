"""The browser tour: a new admin walks the whole loop on the demo in a real
Chromium, with a real Celery worker, and nothing but the browser.

import a dataset and two runs -> judge it (simulated judge) -> calibrate ->
leaderboard -> create and open a study -> three annotators grade -> report ->
release download. Every page visited is saved as a screenshot under the test's
``tmp_path/screens``; any console error, page error or HTTP status >= 400 fails
the tour.

Outside the browser, only what a deployment provides: the demo accounts
(``demo``), an LLM endpoint (the simulated judge, added on the judge page with a
connection test) and the worker process. Annotators are invited on the
Annotators page.
"""

from __future__ import annotations

import io
import os
import re
import time
import zipfile
from pathlib import Path

import pytest
from django.core.management import call_command

from judging.simulated import start_simulated_judge
from portal.demo_accounts import ADMIN, ANNOTATORS
from tests.annotation.conftest import TEST_RELEASE_KEY
from tests.annotation.test_browser import _complete_contest, _next_state
from tests.browser import chromium
from tests.conftest import DEMO_TINY
from tests.judging.test_jobs_browser import worker  # noqa: F401 - fixture

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

SLOW = 120_000  # ms: generous for a loaded machine; the states are polled, not timed


class Tour:
    """Pages with listeners for console errors, page errors and HTTP failures, and
    numbered full-page screenshots."""

    def __init__(self, browser, folder: Path) -> None:
        self.browser = browser
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self.problems: list[str] = []
        self.shots: list[str] = []

    def page(self):
        page = self.browser.new_context(
            viewport={"width": 1280, "height": 900}, accept_downloads=True
        ).new_page()
        page.on(
            "console",
            lambda m: m.type == "error" and self.problems.append(f"console: {m.text}"),
        )
        page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        page.on(
            "response",
            lambda r: (
                r.status >= 400
                and self.problems.append(f"HTTP {r.status} {r.request.method} {r.url}")
            ),
        )
        page.on("dialog", lambda d: d.accept())
        return page

    def shot(self, page, name: str) -> None:
        path = self.folder / f"{len(self.shots) + 1:02d}-{name}.png"
        page.screenshot(path=str(path), full_page=True)
        self.shots.append(path.name)
        assert not self.problems, self.problems


def _login(page, base: str, username: str, password: str) -> None:
    page.goto(f"{base}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_load_state()


@pytest.fixture
def tour_env(tmp_path, settings, monkeypatch):
    """Web (live server) and worker share the media folder and the release key."""
    media = tmp_path / "media"
    settings.MEDIA_ROOT = str(media)
    settings.RELEASE_HASH_KEY = TEST_RELEASE_KEY
    monkeypatch.setenv("MEDIA_ROOT", str(media))
    monkeypatch.setenv("RELEASE_HASH_KEY", TEST_RELEASE_KEY)


@pytest.fixture
def tour_worker(tour_env, worker):  # noqa: F811 - the imported fixture
    return worker


@pytest.mark.chromium
@pytest.mark.django_db(transaction=True)
def test_a_new_admin_walks_the_whole_loop_in_the_browser(
    live_server, tour_worker, tmp_path
):
    started = time.monotonic()
    call_command("demo", verbosity=0)
    server, _thread, judge_url = start_simulated_judge(seed=3, latency_ms=50)
    base = live_server.url
    try:
        with chromium() as browser:
            tour = Tour(browser, tmp_path / "screens")
            admin = tour.page()
            _login(admin, base, *ADMIN)
            tour.shot(admin, "home")

            # 1. Import a dataset and its two runs.
            admin.click("nav >> text=Datasets")
            tour.shot(admin, "datasets")
            admin.click("#import-dataset")
            admin.fill("#id_name", "tour")
            for role, name in (
                ("corpus", "corpus.jsonl"),
                ("queries", "queries.jsonl"),
                ("qrels", "qrels.tsv"),
                ("pools", "pools.tsv"),
            ):
                admin.set_input_files(f"#id_{role}", str(DEMO_TINY / name))
            tour.shot(admin, "import-form")
            admin.click("#upload-submit")
            admin.wait_for_selector("#upload-status[data-status=done]", timeout=SLOW)
            assert "(100%)" in admin.inner_text("#upload-status")
            tour.shot(admin, "import-done")
            admin.click("#upload-dataset-link")
            for system in ("bm25", "reranker"):
                admin.click("#add-run")
                admin.fill("#id_system", system)
                admin.set_input_files("#id_run", str(DEMO_TINY / f"{system}.trec"))
                if system == "bm25":
                    tour.shot(admin, "run-form")
                admin.click("#upload-submit")
                admin.wait_for_selector(
                    "#upload-status[data-status=done]", timeout=SLOW
                )
                tour.shot(admin, f"run-{system}-done")
                admin.click("#upload-dataset-link")
            assert admin.locator("#systems tbody tr").count() == 2
            tour.shot(admin, "dataset")

            # 2. Add the (simulated) LLM judge on its page, test the connection, then
            # judge the dataset with it.
            admin.click("nav >> text=Judging")
            admin.click("#add-judge")
            admin.fill("#id_name", "sim")
            admin.fill("#id_base_urls", judge_url)
            admin.fill("#id_model", "sim-1")
            admin.fill("#id_concurrency", "4")
            admin.click("#test-connection")
            admin.wait_for_selector("#connection")
            assert admin.get_attribute("#connection tbody tr", "data-ok") == "true"
            tour.shot(admin, "judge-form")
            admin.click("#save-judge")
            admin.wait_for_selector("#judges")
            admin.select_option("#id_dataset", label="tour")
            admin.select_option("#id_judge", label="sim")
            admin.click("button[name=estimate]")
            admin.wait_for_selector("#estimate")
            tour.shot(admin, "judging-estimate")
            admin.click("button[name=launch]")
            admin.wait_for_selector("#progress")
            admin.wait_for_selector("#progress[data-status=done]", timeout=SLOW)
            assert admin.query_selector("#cancel") is None  # controls followed
            tour.shot(admin, "judging-done")

            # 3. Calibrate.
            admin.click("nav >> text=Calibration")
            admin.select_option("#calibrate select[name=dataset]", "tour")
            tour.shot(admin, "calibration")
            admin.click("#calibrate button[type=submit]")
            admin.wait_for_selector("#converged", timeout=SLOW)  # page refreshes
            assert admin.locator("figure.figure svg").count() == 4
            tour.shot(admin, "fit")

            # 4. Leaderboard.
            admin.click("text=Leaderboard tour")
            admin.wait_for_selector("#leaderboard")
            names = admin.locator("#figure-ci-rcp-ndcg svg text").all_text_contents()
            assert {"bm25", "reranker"} <= set(names)
            tour.shot(admin, "leaderboard")

            # 5. Create and open a study.
            admin.click("nav >> text=Studies")
            admin.fill("#id_name", "Tour study")
            admin.check("#study-form input[name=datasets] >> nth=-1")
            admin.locator("#study-form label", has_text="tour: bm25").click()
            admin.locator("#study-form label", has_text="tour: reranker").click()
            admin.fill("#id_contests", "2")
            admin.click("#preview-button")
            admin.wait_for_selector("#preview")
            tour.shot(admin, "study-preview")
            admin.click("#create-button")
            admin.wait_for_selector("#study-status")
            study_id = int(re.search(r"/studies/(\d+)/", admin.url).group(1))
            # The three annotators are invited on the Annotators page.
            admin.click("nav >> text=Annotators")
            for name, _ in ANNOTATORS:
                admin.select_option("#id_invite-annotator", label=name)
                admin.select_option("#id_invite-study", value=str(study_id))
                admin.click("#invite-button")
                admin.locator(
                    "ul.messages li", has_text=f"'{name}' invited to study {study_id}"
                ).wait_for()
            tour.shot(admin, "annotators")
            admin.goto(f"{base}/annotation/studies/{study_id}/")
            admin.click("#open")
            admin.wait_for_selector("#study-status.open")
            tour.shot(admin, "study-open")

            # 6. Three annotators grade every contest.
            for name, password in ANNOTATORS:
                page = tour.page()
                _login(page, base, name, password)
                if name == ANNOTATORS[0][0]:
                    tour.shot(page, "annotator-home")
                page.goto(f"{base}/annotation/studies/{study_id}/grading")
                first = True
                while _next_state(page) == "contest":
                    if first and name == ANNOTATORS[0][0]:
                        tour.shot(page, "grading")
                    first = False
                    _complete_contest(page)
                if name == ANNOTATORS[0][0]:
                    tour.shot(page, "grading-done")
                page.context.close()

            # 7. Report.
            admin.goto(f"{base}/annotation/studies/{study_id}/")
            admin.click("#report-link")
            admin.wait_for_selector("#figure-margin svg")
            # Every annotator gave every document the same grade: all ties, said so.
            assert "No graded contests yet." not in admin.inner_text("main")
            assert "every graded contest is a tie" in admin.inner_text("#figure-margin")
            tour.shot(admin, "report")

            # 8. Release, downloaded.
            admin.click("nav >> text=Studies")
            admin.goto(f"{base}/annotation/studies/{study_id}/")
            admin.click("#export-release")
            # The page refreshes itself while the worker builds the release.
            admin.wait_for_selector(
                "#releases .status.done, #releases .status.failed", timeout=SLOW
            )
            assert admin.locator("#releases .status.done").count() == 1, (
                admin.inner_text("#releases")
            )
            tour.shot(admin, "release-done")
            with admin.expect_download() as download:
                admin.click("text=Download zip")
            archive = zipfile.ZipFile(
                io.BytesIO(Path(download.value.path()).read_bytes())
            )
            assert {"manifest.json", "grades.jsonl"} <= set(archive.namelist())
            admin.click("nav >> text=Releases")
            assert "Tour study" in admin.inner_text("#all-releases")
            tour.shot(admin, "releases")
            assert not tour.problems, tour.problems
    finally:
        server.stop()
    print(f"tour: {time.monotonic() - started:.0f} s, screenshots:", *tour.shots)
    assert len(tour.shots) >= 20
    assert all((tmp_path / "screens" / s).stat().st_size > 10_000 for s in tour.shots)
