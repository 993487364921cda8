"""Blinding is a data-access rule: a real study is graded to the end through every
annotator-facing page and endpoint, and every response body and URL is scanned for
system names and ids, ranks and list membership, document and query external ids,
qrels, gains and metric values."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from django.test import Client

from annotation.models import Contest, ContestDocument
from benchmarks.models import Document, Qrel, Query, System
from calibration.models import DocumentAbility
from tests.annotation.factories import full_grades

pytestmark = pytest.mark.django_db

ALLOWED_KEYS = {
    # payload
    "assignment", "status", "query", "instructions", "questions", "documents",
    "options", "expires_at", "progress", "draft", "draft_saved_at",
    "key", "text", "title", "order", "comment", "contests_done",
    "contests_left",
    # grades (inside "draft") and responses
    "grades", "answers", "seconds", "submitted_at", "already_submitted",
    "message", "extra", "missing", "reason", "C1", "C2", "C3", "C4", "C5",
}  # fmt: skip
FORBIDDEN_WORDS = re.compile(
    r"\b(qrels?|gains?|ndcg|rcp_[ab]|qrel_[ab]|system_[ab]|systems?_id|rank_[ab]"
    r"|list_[ab]|discordant\w*|concordant|design|cell|external_id|theta)\b",
    re.IGNORECASE,
)
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?")
URL_SHAPES = [
    re.compile(r"^/annotation/$"),
    re.compile(r"^/annotation/studies/\d+/grading$"),
    re.compile(r"^/api/v1/studies/\d+/assignments/next$"),
    re.compile(r"^/api/v1/assignments/\d+(/draft|/submit)?$"),
]


class Recorder:
    """A logged-in test client that keeps every URL and response body."""

    def __init__(self, user):
        self.client = Client()
        self.client.force_login(user)
        self.seen: list[tuple[str, str]] = []

    def __call__(self, method, url, body=None):
        kwargs = {}
        if body is not None:
            kwargs = {"data": json.dumps(body), "content_type": "application/json"}
        response = getattr(self.client, method)(url, **kwargs)
        self.seen.append((url, response.content.decode()))
        return response


def _forbidden_strings(study) -> set[str]:
    dataset_ids = list(study.datasets.values_list("pk", flat=True))
    values = set(
        System.objects.filter(dataset__in=dataset_ids).values_list("name", flat=True)
    )
    values |= set(
        Query.objects.filter(dataset__in=dataset_ids).values_list(
            "external_id", flat=True
        )
    )
    values |= set(
        Document.objects.filter(dataset__in=dataset_ids).values_list(
            "external_id", flat=True
        )
    )
    values |= {study.name, *study.datasets.values_list("name", flat=True)}
    numbers = []
    for c in Contest.objects.filter(study=study):
        numbers += [c.rcp_a, c.rcp_b, c.qrel_a, c.qrel_b, c.rcp_margin, c.qrel_margin]
    numbers += list(
        DocumentAbility.objects.filter(fit=study.fit).values_list("gain", flat=True)
    )
    for x in numbers:
        if x is not None and 0.0 < abs(x) < 1.0:
            values |= {repr(x), f"{x:.4f}", f"{x:.3f}"}
    return {v for v in values if v and len(v) >= 3}


def _json_keys(value, out):
    if isinstance(value, dict):
        for k, v in value.items():
            out.add(k)
            _json_keys(v, out)
    elif isinstance(value, list):
        for v in value:
            _json_keys(v, out)
    return out


def test_no_annotator_response_of_a_real_study_leaks_anything(study, members):
    recorders = {u.pk: Recorder(u) for u in members}
    rng = np.random.default_rng(5)
    orders_seen = []
    for rec in recorders.values():
        rec("get", "/annotation/")
        rec("get", f"/annotation/studies/{study.pk}/grading")
    active = True
    while active:
        active = False
        for rec in recorders.values():
            r = rec("post", f"/api/v1/studies/{study.pk}/assignments/next")
            if r.status_code == 204:
                continue
            assert r.status_code == 201
            active = True
            body = r.json()
            aid = body["assignment"]
            grades = full_grades(body, rng)
            first = next(iter(grades))
            rec(
                "put",
                f"/api/v1/assignments/{aid}/draft",
                {"grades": {first: grades[first]}},
            )
            rec("get", f"/api/v1/assignments/{aid}")
            rec("post", f"/api/v1/assignments/{aid}/submit", {"grades": {}})  # 400
            rec("post", f"/api/v1/assignments/{aid}/submit", {"grades": grades})
            rec("post", f"/api/v1/assignments/{aid}/submit", {"grades": grades})
            rec("get", f"/api/v1/assignments/{aid}")
            orders_seen.append((aid, [d["key"] for d in body["documents"]]))
    assert len(orders_seen) == study.contests.count() * study.per_contest

    forbidden = _forbidden_strings(study)
    assert len(forbidden) > 50
    for rec in recorders.values():
        for url, content in rec.seen:
            assert any(shape.match(url) for shape in URL_SHAPES), url
            # Timestamps may contain any digits; metric values never appear in them.
            scanned = TIMESTAMP.sub("<t>", content)
            for value in forbidden:
                assert value not in scanned, (url, value)
            assert not FORBIDDEN_WORDS.search(content), (
                url,
                FORBIDDEN_WORDS.search(content).group(0),
            )
            if content.lstrip().startswith(("{", "[")):
                assert _json_keys(json.loads(content), set()) <= ALLOWED_KEYS | {
                    k for _a, keys in orders_seen for k in keys
                }, url
            else:
                # HTML: the only data attributes are the page's API address
                attrs = set(re.findall(r"data-[\w-]+", content))
                assert attrs <= {"data-next", "data-home"}, (url, attrs)


def test_document_keys_and_order_reveal_nothing(study, members, api_client_for):
    """Keys are random per assignment; the shown order is not the lists' order."""
    bodies = []
    for user in members[:3]:
        r = api_client_for(user).post(f"/api/v1/studies/{study.pk}/assignments/next")
        bodies.append(r.json())
    contest = Contest.objects.get(assignments__pk=bodies[0]["assignment"])
    entries = list(
        ContestDocument.objects.filter(contest=contest).select_related("document")
    )
    by_title = {e.document.title: e for e in entries}
    ids = {str(e.document_id) for e in entries} | {
        e.document.external_id for e in entries
    }
    union_order = [e.document.title for e in sorted(entries, key=lambda e: e.id)]
    shown_orders = []
    keys = []
    for body in bodies:
        assert {d["title"] for d in body["documents"]} == set(by_title)
        keys.append({d["key"] for d in body["documents"]})
        shown_orders.append([d["title"] for d in body["documents"]])
        for d in body["documents"]:
            assert re.fullmatch(r"[0-9a-f]{12}", d["key"]) and d["key"] not in ids
    assert not keys[0] & keys[1] and not keys[1] & keys[2]
    assert any(order != union_order for order in shown_orders)
    assert len({tuple(o) for o in shown_orders}) > 1
    grades = {q.document_id: q.grade for q in Qrel.objects.filter(query=contest.query)}
    assert grades  # the world has qrels here: none of them reached the page
