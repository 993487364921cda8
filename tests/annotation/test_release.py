"""Releases: export -> verify -> report round trip, no personal data, stable
hashes, immutability, tamper detection, refusal without RELEASE_HASH_KEY."""

from __future__ import annotations

import csv
import hashlib
import hmac
import importlib
import json
import re
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from annotation import release_format
from annotation.models import AnnotatorRandomId, Release, ReleaseStatus
from annotation.services import (
    annotator_hash,
    release_build,
    release_folder,
    release_request,
    study_report_build,
)
from tests.annotation.conftest import SECRET_COMMENT, TEST_RELEASE_KEY

pytestmark = pytest.mark.django_db


def _export(study, out: Path, *extra: str) -> Path:
    call_command("export_release", "--study", str(study.pk), "--out", str(out), *extra)
    return out


def _json(capsys, *args: str) -> dict:
    capsys.readouterr()
    call_command(*args)
    return json.loads(capsys.readouterr().out)


def _digests(folder: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.iterdir())
    }


def test_release_round_trip_gives_identical_report(simulated_study, tmp_path, capsys):
    """export_release -> verify_release -> study_report --release equals the report
    computed from the database, number for number (also for a subset)."""
    study, _users = simulated_study
    out = _export(study, tmp_path / "r1")
    assert {p.name for p in out.iterdir()} == {
        *release_format.DATA_FILES,
        "README.md",
        "manifest.json",
    }
    call_command("verify_release", str(out))
    assert "OK: study" in capsys.readouterr().out
    from_db = _json(capsys, "study_report", "--study", str(study.pk), "--json")
    from_release = _json(capsys, "study_report", "--release", str(out), "--json")
    # The database report adds the live study's plan and looks (issue 14).
    assert from_db.pop("plan")["registered"] is not None
    assert from_db.pop("sequential")["status"] == "closed"
    assert from_release == from_db
    assert from_db["main"]["rate"] > from_db["main"]["chance"]
    assert from_db["main"]["ci"][0] > from_db["main"]["chance"]
    system = study.systems.order_by("name").first().name
    sub_db = _json(
        capsys, "study_report", "--study", str(study.pk), "--json",
        "--exclude-system", system,
    )  # fmt: skip
    sub_rel = _json(
        capsys, "study_report", "--release", str(out), "--json",
        "--exclude-system", system,
    )  # fmt: skip
    sub_db.pop("plan"), sub_db.pop("sequential")
    assert sub_db == sub_rel
    assert sub_db["contests"] < from_db["contests"]
    assert sub_db["subset"] == {"exclude_systems": [system]}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["release"] == 1 and manifest["counts"]["contests"] == 30
    assert re.fullmatch(r"\d{4}-\d\d-\d\d", manifest["created"])
    readme = (out / "README.md").read_text()
    assert "Does it directly answer the query?" in readme  # rubric question texts
    assert "| `annotator` |" in readme  # field descriptions
    assert "## Annotator anonymity and threat model" in readme
    assert "Not protected against the platform's operators" in readme


def test_release_holds_no_personal_data(simulated_study, tmp_path):
    """No username, e-mail, name, comment text or time of day in any released file,
    even with texts included; annotators appear only as 16-hex HMAC hashes."""
    study, users = simulated_study
    out = _export(study, tmp_path / "r", "--include-text")
    blob = "\n".join(p.read_text(encoding="utf-8") for p in sorted(out.iterdir()))
    assert "Text of note" in blob  # --include-text did include document texts
    for user in users:
        assert user.username not in blob
        if user.email:
            assert user.email not in blob
    assert "alice" not in blob  # the admin who created the study
    assert SECRET_COMMENT not in blob and "zebra-quartz" not in blob
    assert not re.search(r"@\w+\.\w+", blob)
    assert not re.search(r"\d\d:\d\d:\d\d", blob)  # no time of day anywhere
    assert not re.search(r"\b127\.0\.0\.1\b|\b\d{1,3}(\.\d{1,3}){3}\b", blob)
    hashes = {r["annotator"] for r in release_format.read(out)[1]["grades"]}
    assert len(hashes) == len(users)
    assert all(re.fullmatch(r"[0-9a-f]{16}", h) for h in hashes)
    expected = {
        annotator_hash(
            study_id=study.pk,
            random_id=AnnotatorRandomId.objects.get(user=u).value,
            key=TEST_RELEASE_KEY,
        )
        for u in users
    }
    assert hashes == expected
    header = next(csv.reader((out / "grades.csv").open()))
    assert "comment" not in header and "username" not in header


def test_hashes_stable_across_releases_and_differ_across_studies(
    simulated_study, make_study, tmp_path
):
    study, users = simulated_study
    first = release_format.read(_export(study, tmp_path / "a"))[1]
    second = release_format.read(_export(study, tmp_path / "b"))[1]
    assert [r["annotator"] for r in first["grades"]] == [
        r["annotator"] for r in second["grades"]
    ]
    other = make_study(name="Other study")
    random_id = AnnotatorRandomId.objects.get(user=users[0]).value
    assert annotator_hash(
        study_id=study.pk, random_id=random_id, key=TEST_RELEASE_KEY
    ) != annotator_hash(study_id=other.pk, random_id=random_id, key=TEST_RELEASE_KEY)


def test_releases_are_numbered_and_immutable(simulated_study):
    """Release 2 is a new folder; release 1's files are byte for byte unchanged, and
    a release folder that exists is never written over."""
    study, _users = simulated_study
    one = release_build(release_id=release_request(study=study, queue=False).pk)
    before = _digests(release_folder(release=one))
    two = release_build(release_id=release_request(study=study, queue=False).pk)
    assert (one.number, two.number) == (1, 2)
    assert one.status == two.status == ReleaseStatus.DONE
    assert release_folder(release=one) != release_folder(release=two)
    assert _digests(release_folder(release=one)) == before
    assert release_folder(release=two).with_suffix(".zip").is_file()
    manifest_one = release_folder(release=one) / "manifest.json"
    assert hashlib.sha256(manifest_one.read_bytes()).hexdigest() == one.checksum
    # running the build again does nothing (compare-and-set claim)
    assert release_build(release_id=one.pk) is None
    assert _digests(release_folder(release=one)) == before
    # a stale folder in the way fails the new release instead of overwriting it
    three = release_request(study=study, queue=False)
    release_folder(release=three).mkdir(parents=True)
    with pytest.raises(Exception, match="immutable"):
        release_build(release_id=three.pk)
    three.refresh_from_db()
    assert three.status == ReleaseStatus.FAILED and "immutable" in three.error


def test_verify_release_catches_tampering(simulated_study, tmp_path, capsys):
    study, _users = simulated_study
    out = _export(study, tmp_path / "r")
    grades = out / "grades.jsonl"
    lines = grades.read_text().splitlines()
    row = json.loads(lines[2])
    row["grade"] = "5"
    lines[2] = json.dumps(row)
    grades.write_text("\n".join(lines) + "\n")
    with pytest.raises(CommandError, match="problem"):
        call_command("verify_release", str(out))
    err = capsys.readouterr().err
    assert "grades.jsonl: SHA-256 differs" in err
    assert "grades.jsonl line 3: field 'grade' expected int, got str" in err
    with pytest.raises(CommandError, match="invalid release"):
        call_command("study_report", "--release", str(out), "--json")
    (out / "extra.txt").write_text("x")
    (out / "reviews.csv").unlink()
    _m, _t, errors = release_format.verify(out)
    assert "extra.txt: not listed in the manifest" in errors
    assert "reviews.csv: missing" in errors


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("", "is not set"),
        ("change-me-too", "is a placeholder"),  # the old .env.example value
        ("dev-release-hash-key", "is a placeholder"),  # the old DEBUG fallback
        ("k", "is too short"),
        ("x7" * 40, "does not look random"),
        (TEST_RELEASE_KEY[:40], "is too short"),
    ],
)
def test_export_refused_without_a_strong_hash_key(
    simulated_study, settings, tmp_path, key, reason
):
    """Export needs >= 32 random bytes that are not a placeholder, DEBUG or not;
    nothing is numbered or written when it is refused."""
    study, _users = simulated_study
    settings.DEBUG = True
    settings.RELEASE_HASH_KEY = key
    with pytest.raises(CommandError, match=f"RELEASE_HASH_KEY {reason}"):
        _export(study, tmp_path / "r")
    assert not Release.objects.exists()
    assert not (tmp_path / "r").exists()


def test_release_hashes_cannot_be_reversed_by_trying_user_ids(
    simulated_study, tmp_path
):
    """Even with the key, hashing "study:user id" for every plausible id finds no
    released hash: the hashed value is the annotator's random id."""
    study, users = simulated_study
    hashes = {
        r["annotator"]
        for r in release_format.read(_export(study, tmp_path / "r"))[1]["grades"]
    }
    top = max(u.pk for u in users) + 1000
    tried = {
        hmac.new(
            TEST_RELEASE_KEY.encode(), f"{study.pk}:{i}".encode(), hashlib.sha256
        ).hexdigest()[:16]
        for i in range(top)
    }
    assert len(hashes) == len(users)
    assert not hashes & tried
    values = [AnnotatorRandomId.objects.get(user=u).value for u in users]
    assert all(re.fullmatch(r"[0-9a-f]{64}", v) for v in values)
    assert len(set(values)) == len(users)


def test_random_id_stored_when_an_annotator_is_created_or_invited(study, db):
    """annotator_create stores a random id at once; inviting an account made another
    way (the demo's) stores one too; neither call replaces an existing one."""
    from django.contrib.auth import get_user_model

    from annotation.services import (
        annotator_create,
        annotator_group_ensure,
        study_member_add,
    )

    created, _password = annotator_create(username="new-annotator")
    first = AnnotatorRandomId.objects.get(user=created).value
    study_member_add(study=study, annotator=created)
    assert AnnotatorRandomId.objects.get(user=created).value == first
    plain = get_user_model().objects.create_user(username="plain", password="x" * 12)
    plain.groups.add(annotator_group_ensure())
    assert not AnnotatorRandomId.objects.filter(user=plain).exists()
    study_member_add(study=study, annotator=plain)
    assert AnnotatorRandomId.objects.get(user=plain).value != first


def test_migration_backfills_random_ids_of_existing_annotators(simulated_study):
    """Accounts from before random ids (group members, members, graders) get one
    each from the data migration; staff outside them get none."""
    from django.apps import apps

    study, users = simulated_study
    AnnotatorRandomId.objects.all().delete()
    migration = importlib.import_module(
        "annotation.migrations.0003_annotator_random_ids"
    )
    migration.backfill_random_ids(apps, None)
    assert set(AnnotatorRandomId.objects.values_list("user_id", flat=True)) == {
        u.pk for u in users
    }
    migration.backfill_random_ids(apps, None)  # idempotent
    assert AnnotatorRandomId.objects.count() == len(users)


def test_db_report_flags_keyed_by_hash_not_username(simulated_study):
    """The report names annotators by hash; only the staff map resolves usernames."""
    study, users = simulated_study
    report, names = study_report_build(study=study)
    assert set(report["annotator_flags"]) == set(names)
    assert sorted(names.values()) == sorted(u.username for u in users)
    assert not any(u.username in json.dumps(report) for u in users)


def test_verify_release_digest_catches_files_and_manifest_changed_together(
    simulated_study, tmp_path, capsys
):
    """Rewriting a file and its manifest entry passes the manifest check, but not
    the digest printed at export: --digest catches it and names the manifest."""
    study, _users = simulated_study
    capsys.readouterr()
    out = _export(study, tmp_path / "r")
    digest = re.search(r"manifest SHA-256 ([0-9a-f]{64})", capsys.readouterr().out)[1]
    release = Release.objects.get(study=study, number=1)
    assert digest == release.checksum
    call_command("verify_release", str(out), "--digest", digest)
    assert "is the published digest" in capsys.readouterr().out

    # A consistent forgery: one grade changed in both tables, manifest rewritten.
    manifest, tables = release_format.read(out)
    tables["grades"][0]["grade"] = 0 if tables["grades"][0]["grade"] else 1
    release_format.write_tables(out, tables)
    header = {
        k: v for k, v in manifest.items() if k not in ("format", "version", "files")
    }
    release_format.write_manifest(out, header)
    _m, _t, errors = release_format.verify(out)
    assert errors == []  # the manifest alone cannot tell
    with pytest.raises(CommandError, match="1 problem"):
        call_command("verify_release", str(out), "--digest", digest)
    err = capsys.readouterr().err
    assert f"is not the published digest {digest}" in err
    assert err.startswith("manifest.json: SHA-256 ")


def test_release_lost_by_its_worker_is_failed_and_can_be_retried(
    simulated_study,
    admin_user,
    settings,
    monkeypatch,
    django_capture_on_commit_callbacks,
):
    """A release a worker claimed and never finished (killed) shows as failed with a
    message once its lease runs out; retrying builds it under the same number."""
    from django.test import Client
    from django.utils import timezone

    from annotation import tasks

    study, _users = simulated_study
    settings.RELEASE_BUILD_LEASE_S = 60
    release = release_request(study=study, queue=False)
    # What a SIGKILLed worker leaves behind: claimed (running), lease still live...
    Release.objects.filter(pk=release.pk).update(
        status=ReleaseStatus.RUNNING,
        lease_expires_at=timezone.now() + timezone.timedelta(seconds=30),
    )
    client = Client()
    client.force_login(admin_user)
    page = client.get(f"/annotation/studies/{study.pk}/").content.decode()
    assert 'http-equiv="refresh"' in page  # still building while the lease runs
    # ...and then the lease runs out.
    Release.objects.filter(pk=release.pk).update(
        lease_expires_at=timezone.now() - timezone.timedelta(seconds=1)
    )
    page = client.get(f"/annotation/studies/{study.pk}/").content.decode()
    release.refresh_from_db()
    assert release.status == ReleaseStatus.FAILED
    assert "lost its worker" in release.error and "retry it" in release.error
    assert "lost its worker" in page and "Retry</button>" in page
    assert 'http-equiv="refresh"' not in page

    queued = []
    monkeypatch.setattr(tasks.release_build_task, "delay", queued.append)
    with django_capture_on_commit_callbacks(execute=True):
        client.post(f"/annotation/studies/{study.pk}/releases/1/retry")
    release.refresh_from_db()
    assert queued == [release.pk] and release.status == ReleaseStatus.PENDING
    assert release.error == ""
    assert tasks.release_build_task(release.pk) == ReleaseStatus.DONE
    release.refresh_from_db()
    assert release.number == 1 and release.checksum
    assert release_format.read(release_folder(release=release))[0]["release"] == 1
    # Only failed releases can be retried.
    response = client.post(
        f"/annotation/studies/{study.pk}/releases/1/retry", follow=True
    )
    assert "release 1 is done: only a failed release can be retried" in (
        response.content.decode()
    )


def test_release_admin_is_read_only(simulated_study, admin_user):
    from django.test import Client

    study, _users = simulated_study
    release_build(release_id=release_request(study=study, queue=False).pk)
    client = Client()
    client.force_login(admin_user)
    listing = client.get("/admin/annotation/release/")
    assert listing.status_code == 200 and "Simulated" in listing.content.decode()
    release = Release.objects.get()
    detail = client.get(f"/admin/annotation/release/{release.pk}/change/")
    assert detail.status_code == 200
    assert release.checksum in detail.content.decode()
    assert client.get("/admin/annotation/release/add/").status_code == 403
    assert (
        client.post(f"/admin/annotation/release/{release.pk}/delete/", {"post": "yes"})
    ).status_code == 403
    assert Release.objects.count() == 1
