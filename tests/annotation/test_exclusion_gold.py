"""Quality control (issue 13, items 2-3): exclusion with replacement to exactly N
valid reviews, validity from the database in reports and releases, gold items mixed
in blind, acceptance figures and flags."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from django.test import Client

from annotation import acceptance
from annotation.analysis import contradictory
from annotation.models import (
    Assignment,
    AssignmentStatus,
    ContestDocument,
    GoldAnswer,
    GoldItem,
    Grade,
    StudyMember,
)
from annotation.release_format import read as read_release
from annotation.selectors import assignment_payload, study_progress
from annotation.services import (
    annotator_exclude,
    assignment_draft_save,
    assignment_next,
    assignment_submit,
    gold_item_add,
    gold_items_from_qrels,
    qrel_to_grade,
    release_export,
    study_gold_rate_set,
    study_member_add,
    study_report_build,
)
from benchmarks.models import Document, Qrel
from rcp_platform.exceptions import ApplicationError, ConflictError, NotFoundError
from tests.annotation.factories import full_grades
from tests.factories import AnnotatorFactory

pytestmark = pytest.mark.django_db


def _grade_until_done(study, users, seed=0, answer=None):
    """Everyone grades until nothing is left; ``answer(user, payload)`` may choose."""
    rng = np.random.default_rng(seed)
    active = True
    while active:
        active = False
        for user in users:
            a = assignment_next(study=study, annotator=user)
            if a is None:
                continue
            active = True
            payload = assignment_payload(assignment=a)
            grades = answer(user, a, payload) if answer else full_grades(payload, rng)
            assignment_submit(assignment=a, grades=grades)


def _valid_per_contest(study):
    rows = Assignment.objects.filter(
        contest__study=study, status=AssignmentStatus.SUBMITTED, valid=True
    ).values_list("contest_id", "annotator_id")
    per = Counter(c for c, _ in rows)
    distinct = {c: len({u for cc, u in rows if cc == c}) for c in per}
    return per, distinct


def test_exclusion_reopens_contests_to_exactly_n_valid_reviews(study, members):
    bad = members[0]
    _grade_until_done(study, members, seed=1)
    theirs = set(
        Assignment.objects.filter(annotator=bad, contest__study=study).values_list(
            "contest_id", flat=True
        )
    )
    assert theirs  # bob graded some contests
    with pytest.raises(ApplicationError, match="reason"):
        annotator_exclude(study=study, annotator=bad, reason="  ")
    counts = annotator_exclude(
        study=study, annotator=bad, reason="gold accuracy 0.2", excluded_by=None
    )
    assert counts == {"reviews": len(theirs), "leases": 0, "contests": len(theirs)}
    per, _ = _valid_per_contest(study)
    assert all(per[c] == study.per_contest - 1 for c in theirs)
    progress = study_progress(study=study)
    assert progress["complete"] == progress["contests"] - len(theirs)
    assert progress["gradings_invalid"] == len(theirs)
    member = StudyMember.objects.get(study=study, annotator=bad)
    assert not member.active and member.excluded_reason == "gold accuracy 0.2"
    with pytest.raises(NotFoundError):
        assignment_next(study=study, annotator=bad)
    with pytest.raises(ConflictError, match="excluded"):
        study_member_add(study=study, annotator=bad)
    with pytest.raises(ConflictError, match="excluded already"):
        annotator_exclude(study=study, annotator=bad, reason="again")
    # Others (two newcomers, since each old member may have had the contest) re-grade.
    newcomers = AnnotatorFactory.create_batch(2)
    for user in newcomers:
        study_member_add(study=study, annotator=user)
    _grade_until_done(study, [*members[1:], *newcomers], seed=2)
    per, distinct = _valid_per_contest(study)
    contests = study.contests.count()
    assert len(per) == contests
    assert set(per.values()) == {study.per_contest}
    assert set(distinct.values()) == {study.per_contest}
    assert not Assignment.objects.filter(annotator=bad, valid=True).exists()
    assert not Assignment.objects.filter(annotator=bad, slot__isnull=False).exists()
    # The excluded annotator's grades are kept (invalid), not deleted.
    assert Grade.objects.filter(assignment__annotator=bad).count() > 0


def test_an_open_lease_of_an_excluded_annotator_never_comes_back(study, members):
    bad = members[0]
    lease = assignment_next(study=study, annotator=bad)
    counts = annotator_exclude(study=study, annotator=bad, reason="left the project")
    assert counts["leases"] == 1
    lease.refresh_from_db()
    assert lease.status == AssignmentStatus.EXPIRED and not lease.valid
    with pytest.raises(ConflictError, match="no longer take part"):
        assignment_draft_save(assignment=lease, grades={})
    lease.refresh_from_db()
    assert lease.slot is None


def test_reports_and_releases_use_validity_from_the_database(simulated_study, tmp_path):
    study, users = simulated_study
    total = Assignment.objects.filter(
        contest__study=study, status=AssignmentStatus.SUBMITTED
    ).count()
    before, _names = study_report_build(study=study)
    assert "with_excluded" not in before
    bad = users[0]
    theirs = Assignment.objects.filter(
        annotator=bad, status=AssignmentStatus.SUBMITTED
    ).count()
    annotator_exclude(study=study, annotator=bad, reason="wrote comments in grades")
    report, names = study_report_build(study=study)
    assert report["reviews"] == {"valid": total - theirs, "invalid": theirs}
    assert report["with_excluded"]["reviews"] == {"valid": total, "invalid": 0}
    # With everyone counted, the main results are the report from before.
    assert report["with_excluded"]["main"] == before["main"]
    assert report["with_excluded"]["verdicts"] == before["verdicts"]
    assert [names[p] for p in report["excluded_annotators"]] == [bad.username]
    release = release_export(study=study, out=tmp_path / "out")
    _manifest, tables = read_release(tmp_path / "out")
    assert release.number == 1 and _manifest["version"] == 2
    bad_hash = report["excluded_annotators"][0]
    assert {
        g["valid_review"] for g in tables["grades"] if g["annotator"] == bad_hash
    } == {False}
    assert all(
        g["valid_review"] for g in tables["grades"] if g["annotator"] != bad_hash
    )
    assert {r["valid"] for r in tables["reviews"] if r["annotator"] == bad_hash} == {
        False
    }


def _hidden_doc(study, contest):
    """A document of the contest's query that no contest of that query shows."""
    shown = set(
        ContestDocument.objects.filter(
            contest__study=study, contest__query=contest.query
        ).values_list("document_id", flat=True)
    )
    return (
        Document.objects.filter(
            dataset=contest.query.dataset,
            external_id__startswith=contest.query.external_id + "-",
        )
        .exclude(pk__in=shown)
        .order_by("pk")
        .first()
    )


def test_gold_documents_are_mixed_in_blind_and_never_graded(study, members):
    for contest in study.contests.all():
        doc = _hidden_doc(study, contest)
        if doc is not None:
            gold_item_add(
                study=study, query=contest.query, document=doc, expected_grade=0
            )
    assert GoldItem.objects.filter(study=study).exists()
    study_gold_rate_set(study=study, rate=1.0)
    gold_queries = set(GoldItem.objects.values_list("query_id", flat=True))

    def careful_or_careless(user, a, payload):
        gold_keys = {d["key"] for d in a.documents if d.get("gold")}
        keys = [q["key"] for q in payload["questions"]]
        return {
            d["key"]: {
                # bob says "yes" to everything; the others see the gold doc is off.
                "answers": {
                    k: (user == members[0] or d["key"] not in gold_keys) and i < 3
                    for i, k in enumerate(keys)
                },
                "seconds": 10.0,
            }
            for d in payload["documents"]
        }

    a = assignment_next(study=study, annotator=members[1])
    payload = assignment_payload(assignment=a)
    shown = ContestDocument.objects.filter(contest=a.contest).count()
    if a.contest.query_id in gold_queries:
        assert len(payload["documents"]) == shown + 1
        assert sum(1 for d in a.documents if d.get("gold")) == 1
    assert all(set(d) == {"key", "title", "text"} for d in payload["documents"])
    assignment_submit(assignment=a, grades=careful_or_careless(members[1], a, payload))
    _grade_until_done(study, members, answer=careful_or_careless)
    gold_answers = GoldAnswer.objects.filter(assignment__contest__study=study)
    assert gold_answers.exists()
    # Gold documents never become grades: every grade is of a contest document.
    for g in Grade.objects.filter(assignment__contest__study=study).select_related(
        "assignment"
    ):
        assert ContestDocument.objects.filter(
            contest_id=g.assignment.contest_id, document_id=g.document_id
        ).exists()
    rows = {r["username"]: r for r in acceptance.study_acceptance(study=study)}
    bob = rows[members[0].username]
    assert (
        bob["gold_answered"]
        == gold_answers.filter(assignment__annotator=members[0]).count()
    )
    # Expected 0, bob answers grade 3: outside the tolerance of 1, every time.
    assert bob["gold_accuracy"] == 0.0 and "gold" in bob["flags"]
    for user in members[1:]:
        row = rows[user.username]
        if row["gold_answered"]:
            assert row["gold_accuracy"] == 1.0 and "gold" not in row["flags"]
    assert all(r["contradictions"] == 0 for r in rows.values())


def test_gold_items_from_qrels_skip_shown_documents(study):
    made = gold_items_from_qrels(study=study, per_query=2)
    assert made
    for item in made:
        assert not ContestDocument.objects.filter(
            contest__study=study, contest__query=item.query, document=item.document
        ).exists()
        qrel = Qrel.objects.get(query=item.query, document=item.document).grade
        assert item.expected_grade == qrel_to_grade(qrel, top=2.0, levels=5)
    assert len(gold_items_from_qrels(study=study, per_query=2)) == len(made)
    assert GoldItem.objects.filter(study=study).count() == len(made)
    contest = study.contests.first()
    shown = ContestDocument.objects.filter(contest=contest).first().document
    with pytest.raises(ApplicationError, match="shown in a contest"):
        gold_item_add(
            study=study, query=contest.query, document=shown, expected_grade=1
        )
    with pytest.raises(ApplicationError, match="0 to 5"):
        gold_item_add(
            study=study,
            query=contest.query,
            document=_hidden_doc(study, contest),
            expected_grade=6,
        )


def test_qrel_to_grade_and_contradictions():
    assert [qrel_to_grade(q, top=2.0, levels=5) for q in (0, 1, 2)] == [0, 2, 5]
    assert qrel_to_grade(3, top=3, levels=4) == 4
    keys = ["C1", "C2", "C3", "C4", "C5"]
    assert contradictory({"C1": False, "C4": True}, keys)
    assert not contradictory({"C1": True, "C2": True, "C3": False}, keys)
    assert not contradictory({"C1": False, "C2": False}, keys)
    assert contradictory({"C1": True, "C2": False, "C3": None, "C5": True}, keys)


def test_staff_excludes_from_the_monitoring_page(study, members, admin_user):
    _grade_until_done(study, members[:3], seed=3)
    client = Client()
    client.force_login(admin_user)
    page = client.get(f"/annotation/studies/{study.pk}/").content.decode()
    assert (
        'id="acceptance"' in page and f'data-username="{members[0].username}"' in page
    )
    done = client.post(
        f"/annotation/studies/{study.pk}/annotators/{members[0].pk}/exclude",
        {"reason": "straight-lined everything"},
        follow=True,
    ).content.decode()
    assert "contests re-open" in done and "straight-lined everything" in done
    assert StudyMember.objects.get(annotator=members[0], study=study).excluded_by == (
        admin_user
    )
    report = client.get(f"/annotation/studies/{study.pk}/report").content.decode()
    assert 'id="with-excluded"' in report
    gold = client.post(
        f"/annotation/studies/{study.pk}/gold", {"action": "rate", "rate": "0.3"}
    )
    assert gold.status_code == 302
    study.refresh_from_db()
    assert study.gold_rate == 0.3
    # Annotators cannot exclude anyone.
    other = Client()
    other.force_login(members[1])
    assert (
        other.post(
            f"/annotation/studies/{study.pk}/annotators/{members[2].pk}/exclude",
            {"reason": "x"},
        ).status_code
        == 403
    )


def test_admin_shows_the_exclusion_and_keeps_it(study, members, admin_user):
    annotator_exclude(study=study, annotator=members[0], reason="spam answers")
    client = Client()
    client.force_login(admin_user)
    page = client.get(f"/admin/annotation/study/{study.pk}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "spam answers" in html and "id_acceptance" in html and "id_gold_rate" in html


def test_version_1_releases_still_read_with_valid_review_filled(
    simulated_study, tmp_path
):
    """A release written before grades carried ``valid_review`` (format v1) still
    verifies and reads; ``valid_review`` then comes from ``reviews.valid``."""
    import csv
    import json

    from annotation import release_format

    study, _users = simulated_study
    release_export(study=study, out=tmp_path / "v2")
    folder = tmp_path / "v2"
    rows = [json.loads(line) for line in (folder / "grades.jsonl").open()]
    for row in rows:
        del row["valid_review"]
    (folder / "grades.jsonl").write_text(
        "".join(json.dumps(row) + "\n" for row in rows)
    )
    with (folder / "grades.csv").open(newline="") as fh:
        table = list(csv.reader(fh))
    drop = table[0].index("valid_review")
    with (folder / "grades.csv").open("w", newline="") as fh:
        csv.writer(fh, lineterminator="\n").writerows(
            [c for i, c in enumerate(r) if i != drop] for r in table
        )
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["version"] = 1
    for name in ("grades.jsonl", "grades.csv"):
        manifest["files"][name]["sha256"] = release_format.sha256_file(folder / name)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    read_manifest, tables = read_release(folder)
    assert read_manifest["version"] == 1
    assert len(tables["grades"]) == len(rows)
    assert all(g["valid_review"] is True for g in tables["grades"])
    manifest["version"] = 3
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(release_format.ReleaseError, match="manifest"):
        read_release(folder)


def test_staff_add_gold_items_on_the_study_page(study, admin_user):
    client = Client()
    client.force_login(admin_user)
    url = f"/annotation/studies/{study.pk}/gold"
    done = client.post(url, {"action": "qrels"}, follow=True).content.decode()
    from_qrels = GoldItem.objects.filter(study=study, source="qrel").count()
    assert from_qrels > 0 and f"{from_qrels} gold items from the qrels" in done
    contest = study.contests.select_related("query").first()
    doc = _hidden_doc(study, contest)
    GoldItem.objects.filter(study=study, document=doc).delete()
    form = {
        "action": "add",
        "query": contest.query.external_id,
        "document": doc.external_id,
        "grade": "4",
    }
    done = client.post(url, form, follow=True).content.decode()
    assert "Gold item saved" in done
    item = GoldItem.objects.get(study=study, document=doc)
    assert item.expected_grade == 4 and item.source == "staff"
    assert item.created_by == admin_user
    refused = client.post(url, {**form, "grade": "9"}, follow=True).content.decode()
    assert "expected grade must be 0 to 5" in refused
    missing = client.post(url, {**form, "document": "nope"}, follow=True)
    assert "not found" in missing.content.decode()
