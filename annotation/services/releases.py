"""Releases: numbered, immutable, anonymised exports of a study (issue 6).

``release_request`` numbers a release and queues ``release_build_task`` on commit;
``release_build`` writes the files into a fresh folder under
``MEDIA_ROOT/releases/study-<id>/release-<n>/`` plus a zip beside it. A folder that
exists already is never written to, so an earlier release never changes.

A worker's claim carries a lease (``RELEASE_BUILD_LEASE_S``, longer than the build
task's hard time limit): a release still ``running`` after it lost its worker
(killed, machine gone). ``releases_reap_stale`` marks such releases failed with a
message (the study page and every new request call it) and ``release_retry`` queues
a failed release again under the same number.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Max, Q
from django.utils import timezone

from rcp_platform.exceptions import ApplicationError, ConflictError

from .. import release_format
from ..analysis.picks import TIE_MARGIN
from ..models import Release, ReleaseStatus, Rubric, Study
from .reports import (
    release_key,
    study_pseudonyms,
    study_tables,
    study_verdict_rule,
    tables_complete,
)

RELEASES_DIR = "releases"


def release_folder(*, release: Release) -> Path:
    """Absolute folder of a release (its zip is ``<folder>.zip``)."""
    return (
        Path(settings.MEDIA_ROOT)
        / RELEASES_DIR
        / f"study-{release.study_id}"
        / f"release-{release.number}"
    )


@transaction.atomic
def release_request(
    *,
    study: Study,
    include_text: bool = False,
    created_by: Any = None,
    queue: bool = True,
) -> Release:
    """Create release n+1 of a study (pending) and, with ``queue``, build it on a
    worker after commit. Locks the study row so two requests get distinct numbers.
    Refused without a strong RELEASE_HASH_KEY. Reaps the study's lost builds first."""
    release_key()
    releases_reap_stale(study=study)
    Study.objects.select_for_update().filter(pk=study.pk).first()
    last = Release.objects.filter(study=study).aggregate(n=Max("number"))["n"] or 0
    release = Release(
        study=study,
        number=last + 1,
        include_text=include_text,
        created_by=created_by,
    )
    release.full_clean()
    release.save()
    if queue:
        from ..tasks import release_build_task

        transaction.on_commit(lambda: release_build_task.delay(release.pk))
    return release


def _write(release: Release, folder: Path, key: str) -> str:
    study = release.study
    pseudonyms = study_pseudonyms(study=study, key=key)
    tables = study_tables(
        study=study, pseudonyms=pseudonyms, include_text=release.include_text
    )
    tables = tables_complete(
        tables, k=study.depth, verdict_rule=study_verdict_rule(study)
    )
    release_format.write_tables(folder, tables)
    header = {
        "title": f"Study {study.pk} ({study.name})",
        "study": study.pk,
        "release": release.number,
        "created": timezone.now().date().isoformat(),
        "include_text": release.include_text,
        "analysis": {"k": study.depth, "tie_margin": TIE_MARGIN},
        "design": {
            "depth": study.depth,
            "per_contest": study.per_contest,
            "collect_order": study.collect_order,
            **study.design,
        },
    }
    rubrics = list(
        Rubric.objects.filter(study=study)
        .order_by("version")
        .values("version", "questions")
    )
    counts = {
        "contests": len(tables["contests"]),
        "documents": len(tables["documents"]),
        "grades": len(tables["grades"]),
        "reviews": len(tables["reviews"]),
        "annotators": len({r["annotator"] for r in tables["reviews"]}),
    }
    text = release_format.datasheet(header=header, rubrics=rubrics, counts=counts)
    (folder / release_format.DATASHEET).write_text(text, encoding="utf-8")
    manifest_header = {k: v for k, v in header.items() if k != "title"}
    return release_format.write_manifest(folder, manifest_header | {"counts": counts})


def release_build(*, release_id: int) -> Release | None:
    """Build a pending release; safe to run twice.

    Claims the row by compare-and-set (pending -> running) and returns None when
    someone else has it or it is finished. Files go to a temporary folder first and
    are moved into place only if the release folder does not exist yet; a failure
    marks the release failed with the message.
    """
    now = timezone.now()
    claimed = Release.objects.filter(
        pk=release_id, status=ReleaseStatus.PENDING
    ).update(status=ReleaseStatus.RUNNING, lease_expires_at=now + _lease())
    if not claimed:
        return None
    release = Release.objects.select_related("study").get(pk=release_id)
    target = release_folder(release=release)
    try:
        key = release_key()
        if target.exists():
            raise ApplicationError(f"{target} exists already: releases are immutable")
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            staging = Path(tmp) / f"release-{release.number}-{uuid.uuid4().hex}"
            staging.mkdir()
            checksum = _write(release, staging, key)
            archive = shutil.make_archive(
                str(Path(tmp) / "archive"), "zip", root_dir=staging
            )
            staging.rename(target)  # atomic on one filesystem
            Path(archive).rename(target.with_suffix(".zip"))
    except ApplicationError as exc:
        _finish(release, ReleaseStatus.FAILED, error=exc.message)
        raise
    except Exception as exc:
        _finish(release, ReleaseStatus.FAILED, error=f"{type(exc).__name__}: {exc}")
        raise
    _finish(
        release,
        ReleaseStatus.DONE,
        checksum=checksum,
        path=str(target.relative_to(Path(settings.MEDIA_ROOT))),
    )
    return release


def _finish(release: Release, status: str, **fields: str) -> None:
    """Record the outcome. A failure is written only while the release is still
    ``running`` (not after a reaper or another worker moved it on); a finished
    build is always recorded, its files being in place."""
    release.status = status
    release.finished_at = timezone.now()
    for name, value in fields.items():
        setattr(release, name, value)
    release.full_clean()
    rows = Release.objects.filter(pk=release.pk)
    if status == ReleaseStatus.FAILED:
        rows = rows.filter(status=ReleaseStatus.RUNNING)
    rows.update(status=status, finished_at=release.finished_at, **fields)


def _lease() -> timedelta:
    return timedelta(seconds=settings.RELEASE_BUILD_LEASE_S)


LOST_MESSAGE = (
    "the build lost its worker (still running when its lease of {lease} s ran out); "
    "retry it"
)


def releases_reap_stale(*, study: Study | None = None) -> int:
    """Mark failed, with a message, every running release (of ``study``, or all)
    whose lease has run out; returns how many. Idempotent and safe to run
    concurrently (a compare-and-set update)."""
    now = timezone.now()
    stale = Release.objects.filter(status=ReleaseStatus.RUNNING).filter(
        Q(lease_expires_at__lt=now)
        # Claimed before leases existed: the claim time is unknown, creation is close.
        | Q(lease_expires_at__isnull=True, created_at__lt=now - _lease())
    )
    if study is not None:
        stale = stale.filter(study=study)
    message = LOST_MESSAGE.format(lease=settings.RELEASE_BUILD_LEASE_S)
    return stale.update(status=ReleaseStatus.FAILED, finished_at=now, error=message)


@transaction.atomic
def release_retry(*, release: Release, queue: bool = True) -> Release:
    """Put a failed release back to pending (same number) and, with ``queue``, build
    it on a worker after commit. ConflictError unless it is failed. A folder left
    in place by the lost build still refuses the build (releases are immutable):
    the error names it."""
    release_key()
    retried = Release.objects.filter(pk=release.pk, status=ReleaseStatus.FAILED).update(
        status=ReleaseStatus.PENDING, error="", finished_at=None, lease_expires_at=None
    )
    release.refresh_from_db()
    if not retried:
        raise ConflictError(
            f"release {release.number} is {release.status}: only a failed release "
            "can be retried"
        )
    if queue:
        from ..tasks import release_build_task

        transaction.on_commit(lambda: release_build_task.delay(release.pk))
    return release


def release_export(
    *, study: Study, out: Path, include_text: bool = False, created_by: Any = None
) -> Release:
    """Number and build a release now (no worker), then copy its files into ``out``
    (which must not exist or be empty). Used by ``export_release``."""
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise ApplicationError(f"{out} is not empty")
    release = release_request(
        study=study, include_text=include_text, created_by=created_by, queue=False
    )
    built = release_build(release_id=release.pk)
    assert built is not None  # just created: nobody else can hold the claim
    shutil.copytree(release_folder(release=built), out, dirs_exist_ok=True)
    return built
