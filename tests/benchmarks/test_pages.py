"""HTML pages and the admin: who sees what, and list pages in bounded queries."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.urls import reverse

from benchmarks.models import (
    Dataset,
    Document,
    PoolEntry,
    Qrel,
    Query,
    RankingEntry,
    System,
)
from tests.factories import PoolEntryFactory, QrelFactory, RankingEntryFactory

pytestmark = pytest.mark.django_db

ADMIN_MODELS = [Dataset, Query, Document, PoolEntry, Qrel, System, RankingEntry]


def _populate(n: int) -> None:
    for _ in range(n):
        PoolEntryFactory()
        QrelFactory()
        RankingEntryFactory()


@pytest.mark.parametrize("model", ADMIN_MODELS, ids=lambda m: m.__name__)
def test_admin_changelists_render_in_bounded_queries(
    model, client, admin_user, django_assert_max_num_queries
):
    """The query count does not grow with the number of rows listed (no N+1)."""
    client.force_login(admin_user)
    url = reverse(f"admin:benchmarks_{model._meta.model_name}_changelist")
    _populate(3)
    client.get(url)  # warm caches (content types, session)
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as few:
        assert client.get(url).status_code == 200
    _populate(12)
    with django_assert_max_num_queries(len(few.captured_queries)):
        response = client.get(url)
    assert response.status_code == 200
    assert model.objects.count() >= 12


def test_admin_search_finds_a_document(client, admin_user):
    client.force_login(admin_user)
    call_command("demo", verbosity=0)
    response = client.get(
        reverse("admin:benchmarks_document_changelist"), {"q": "q2-d3"}
    )
    assert response.status_code == 200 and b"q2-d3" in response.content


def test_dashboard_lists_datasets_with_counts_for_staff(client, admin_user):
    call_command("demo", verbosity=0)
    client.force_login(admin_user)
    page = client.get("/").content.decode()
    assert "demo-synthetic" in page and "tiny" in page
    assert '<td class="num">1200</td>' in page  # demo-synthetic documents
    tiny = Dataset.objects.get(name="tiny")
    detail = client.get(
        reverse("benchmarks:dataset-detail", args=[tiny.pk])
    ).content.decode()
    assert "what causes ocean tides" in detail and "reranker" in detail
    query = tiny.queries.get(external_id="q1")
    pool = client.get(
        reverse("benchmarks:query-detail", args=[tiny.pk, query.pk])
    ).content.decode()
    assert "Bay of Fundy" in pool and pool.count("<tr>") == 9  # header + 8 pooled docs


def test_annotators_and_outsiders_see_no_benchmark_data(client, annotator, outsider):
    call_command("demo", verbosity=0)
    tiny = Dataset.objects.get(name="tiny")
    for user in (annotator, outsider):
        client.force_login(user)
        home = client.get("/")
        assert home.status_code == 200 and b"tiny" not in home.content
        assert (
            client.get(reverse("benchmarks:dataset-detail", args=[tiny.pk])).status_code
            == 403
        )
        assert (
            client.get(reverse("admin:index")).status_code == 302
        )  # to the admin login


def test_anonymous_is_sent_to_login(client):
    response = client.get("/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")
    assert b"Log in" in client.get("/login/").content


def test_demo_is_idempotent_and_creates_accounts(capsys):
    call_command("demo")
    counts = {m.__name__: m.objects.count() for m in ADMIN_MODELS}
    call_command("demo")
    assert {m.__name__: m.objects.count() for m in ADMIN_MODELS} == counts
    assert counts == {
        "Dataset": 2,
        "Query": 23,
        "Document": 1224,
        "PoolEntry": 1224,
        "Qrel": 93,
        "System": 6,
        "RankingEntry": 4848,
    }
    out = capsys.readouterr().out
    assert (
        "admin / admin-demo-password" in out
        and "annotator3 / annotator-demo-password" in out
    )
    from django.contrib.auth import authenticate

    assert authenticate(username="admin", password="admin-demo-password").is_staff
    bob = authenticate(username="annotator1", password="annotator-demo-password")
    assert not bob.is_staff and list(bob.get_all_permissions()) == [
        "annotation.annotate"
    ]
