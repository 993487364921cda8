"""Dataset imports and runs from the browser: the request stores the files and
queues a worker task (taking the upload id, safe to run twice); the upload page
shows progress, and a refused file's error with its numbered lines."""

from __future__ import annotations

import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from benchmarks import tasks
from benchmarks.models import Dataset, RankingEntry, System, Upload, UploadStatus
from benchmarks.services import upload_folder
from tests.conftest import DEMO_TINY

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _media(settings, tmp_path):
    settings.MEDIA_ROOT = str(tmp_path / "media")


def _file(name: str, content: bytes | None = None) -> SimpleUploadedFile:
    return SimpleUploadedFile(name, content or (DEMO_TINY / name).read_bytes())


@pytest.fixture
def queued(monkeypatch):
    ids: list[int] = []
    monkeypatch.setattr(tasks.upload_import_task, "delay", ids.append)
    return ids


def _import(client, django_capture_on_commit_callbacks, **files):
    data = {
        "name": "web",
        "protocol": "plain",
        "corpus": _file("corpus.jsonl"),
        "queries": _file("queries.jsonl"),
        "qrels": _file("qrels.tsv"),
        "pools": _file("pools.tsv"),
        **files,
    }
    with django_capture_on_commit_callbacks(execute=True):
        return client.post(reverse("benchmarks:dataset-import"), data)


def test_dataset_import_runs_on_the_worker_once(
    client, admin_user, queued, django_capture_on_commit_callbacks
):
    client.force_login(admin_user)
    response = _import(client, django_capture_on_commit_callbacks)
    upload = Upload.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/benchmarks/uploads/{upload.pk}/"
    assert queued == [upload.pk]  # the request only stored and queued
    assert not Dataset.objects.exists()
    assert upload.files["corpus"]["lines"] == 24
    pending = client.get(response["Location"]).content.decode()
    assert 'data-status="pending"' in pending and "queued" in pending
    assert tasks.upload_import_task(upload.pk) == UploadStatus.DONE
    assert tasks.upload_import_task(upload.pk) == "skipped"  # safe to run twice
    dataset = Dataset.objects.get(name="web")
    assert dataset.documents.count() == 24 and dataset.queries.count() == 3
    page = client.get(response["Location"]).content.decode()
    assert 'data-status="done"' in page and "(100%)" in page
    assert 'style="width: 100%"' in page
    stages = dict(
        re.findall(r"<tr><td>([\w ]+)</td><td class=\"num\">(\d+)</td>", page)
    )
    assert stages["documents"] == "24" and stages["queries"] == "3"
    assert f'href="/benchmarks/datasets/{dataset.pk}/"' in page
    assert not (upload_folder(upload) / "corpus.jsonl").exists()  # cleaned up
    listing = client.get(reverse("benchmarks:dataset-list")).content.decode()
    assert f'href="/benchmarks/uploads/{upload.pk}/"' in listing


def test_refused_file_shows_its_numbered_lines_and_writes_nothing(
    client, admin_user, queued, django_capture_on_commit_callbacks
):
    lines = (DEMO_TINY / "queries.jsonl").read_text().splitlines()
    lines[1] = '{"_id": "q2", "txt": "no text field"}'
    bad = ("\n".join(lines) + "\n").encode()
    client.force_login(admin_user)
    response = _import(
        client,
        django_capture_on_commit_callbacks,
        queries=_file("my-queries.jsonl", bad),
    )
    upload = Upload.objects.get()
    assert tasks.upload_import_task(upload.pk) == UploadStatus.FAILED
    upload.refresh_from_db()
    assert (upload.error_file, upload.error_line) == ("my-queries.jsonl", 2)
    assert str(upload_folder(upload)) not in upload.error  # the user's name, not ours
    assert not Dataset.objects.exists()
    page = client.get(response["Location"]).content.decode()
    assert "<code>my-queries.jsonl</code>, line 2:" in page
    numbered = re.findall(
        r'<span class="(bad-line)?"><span class="lineno">(\d+)</span>', page
    )
    assert numbered == [("", "1"), ("bad-line", "2"), ("", "3")]
    assert "no text field" in page


def test_run_upload_adds_a_system_on_the_worker(
    client, admin_user, queued, django_capture_on_commit_callbacks
):
    client.force_login(admin_user)
    _import(client, django_capture_on_commit_callbacks)
    tasks.upload_import_task(queued.pop())
    dataset = Dataset.objects.get(name="web")
    detail = client.get(reverse("benchmarks:dataset-detail", args=[dataset.pk]))
    assert (
        f'href="/benchmarks/datasets/{dataset.pk}/runs/new"' in detail.content.decode()
    )
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            reverse("benchmarks:run-upload", args=[dataset.pk]),
            {"system": "bm25", "run": _file("bm25.trec")},
        )
    upload = Upload.objects.get(kind="run")
    assert response["Location"] == f"/benchmarks/uploads/{upload.pk}/"
    assert queued == [upload.pk] and not System.objects.exists()
    assert tasks.upload_import_task(upload.pk) == UploadStatus.DONE
    system = System.objects.get(dataset=dataset, name="bm25")
    assert RankingEntry.objects.filter(system=system).count() == 24
    again = client.post(
        reverse("benchmarks:run-upload", args=[dataset.pk]),
        {"system": "bm25", "run": _file("bm25.trec")},
    )
    assert "already exists" in again.content.decode()  # refused before storing
    assert Upload.objects.filter(kind="run").count() == 1


def test_existing_dataset_is_refused_on_the_form(
    client, admin_user, queued, django_capture_on_commit_callbacks
):
    Dataset.objects.create(name="web")
    client.force_login(admin_user)
    page = _import(client, django_capture_on_commit_callbacks).content.decode()
    assert 'id="form-errors"' in page and "already exists" in page
    assert not Upload.objects.exists() and queued == []


def test_only_staff_upload(client, reviewer, admin_user, queued):
    upload = Upload.objects.create(kind="dataset", dataset_name="x")
    client.force_login(reviewer)
    for url in (
        reverse("benchmarks:dataset-import"),
        reverse("benchmarks:upload-detail", args=[upload.pk]),
        reverse("benchmarks:upload-progress", args=[upload.pk]),
    ):
        assert client.get(url).status_code == 403, url
    page = client.get(reverse("benchmarks:dataset-list")).content.decode()
    assert "Import a dataset" not in page
