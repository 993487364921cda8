"""Staff pages (study creation with a preview, monitoring, close/reopen), the admin's
CSV import and deactivation, and the security rules: CSRF on every form, login
throttling, no open redirect after login, safe Markdown instructions."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from annotation import markdown
from annotation.models import AssignmentStatus, Study, StudyMember, StudyStatus
from annotation.selectors import is_annotator
from annotation.services import assignment_next, study_member_add
from rcp_platform.exceptions import ApplicationError
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def _client(user=None, csrf=False):
    client = Client(enforce_csrf_checks=csrf)
    if user is not None:
        client.force_login(user)
    return client


def _form(world, **extra):
    data = {
        "name": "From the page",
        "datasets": [world.dataset.pk],
        "systems": [s.pk for s in world.systems],
        "contests": 9,
        "depth": 5,
        "per_contest": 3,
        "quota_decisive": 0.5,
        "quota_marginal": 0.25,
        "quota_concordant": 0.25,
        "seed": 2,
        "lease_minutes": 30,
        "collect_comments": "on",
    }
    data.update(extra)
    return data


def test_staff_previews_then_creates_a_study(world, admin_user):
    client = _client(admin_user)
    page = client.post("/annotation/studies/", _form(world, preview="1"))
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="preview"' in html and 'id="create-button"' in html
    assert "24 candidate contests" in html
    assert not Study.objects.exists()  # a preview writes nothing
    created = client.post(
        "/annotation/studies/", _form(world, create="1", open_now="on")
    )
    study = Study.objects.get(name="From the page")
    assert created.status_code == 302
    assert created["Location"] == f"/annotation/studies/{study.pk}/"
    assert study.status == StudyStatus.OPEN and study.contests.count() == 9
    assert study.created_by == admin_user


def test_create_form_shows_sampling_errors(world, admin_user):
    page = _client(admin_user).post(
        "/annotation/studies/", _form(world, contests=500, preview="1")
    )
    assert page.status_code == 200
    assert "only 24 candidate contests" in page.content.decode()


def test_monitoring_page_and_api_show_progress(study, members, admin_user):
    assignment_next(study=study, annotator=members[0])
    page = _client(admin_user).get(f"/annotation/studies/{study.pk}/")
    html = page.content.decode()
    assert 'id="n-in-progress">1<' in html and 'id="n-not-started">5<' in html
    assert members[0].username in html
    progress = _client(admin_user).get(f"/api/v1/studies/{study.pk}").json()["progress"]
    assert progress["contests"] == 6 and progress["in_progress"] == 1
    assert progress["gradings_needed"] == 18
    names = {a["username"]: a for a in progress["annotators"]}
    assert names[members[0].username]["leased"] == 1


def test_close_and_reopen_from_the_page(study, admin_user):
    client = _client(admin_user)
    client.post(f"/annotation/studies/{study.pk}/close")
    study.refresh_from_db()
    assert study.status == StudyStatus.CLOSED
    page = client.get(f"/annotation/studies/{study.pk}/").content.decode()
    assert "Reopen study" in page
    client.post(f"/annotation/studies/{study.pk}/open")
    study.refresh_from_db()
    assert study.status == StudyStatus.OPEN


def test_annotator_home_lists_their_studies(study, members, client):
    client.force_login(members[0])
    assert f"/annotation/studies/{study.pk}/grading" in client.get("/").content.decode()
    html = client.get("/annotation/").content.decode()
    assert f"/annotation/studies/{study.pk}/grading" in html
    assert "Study A" not in html  # staff names of studies are not shown
    grading = client.get(f"/annotation/studies/{study.pk}/grading").content.decode()
    assert "<strong>query</strong>" in grading  # instructions rendered from Markdown


# ---------------------------------------------------------------------------- admin


def test_admin_imports_annotators_from_csv(study, admin_user):
    client = _client(admin_user)
    csv = "username,password,email\nann01,a-long-password-1,a@example.org\nann02,,\n"
    page = client.post(
        "/admin/annotation/annotator/import/",
        {"file": SimpleUploadedFile("a.csv", csv.encode()), "study": study.pk},
    )
    assert page.status_code == 200
    html = page.content.decode()
    generated = re.search(r"<td>ann02</td><td>yes</td><td><code>([^<]+)</code>", html)
    assert generated
    User = get_user_model()
    ann01, ann02 = (
        User.objects.get(username="ann01"),
        User.objects.get(username="ann02"),
    )
    assert ann01.check_password("a-long-password-1")
    assert ann02.check_password(generated.group(1))
    assert is_annotator(ann01) and not ann01.is_staff
    assert set(ann01.get_all_permissions()) == {"annotation.annotate"}
    assert StudyMember.objects.filter(study=study).count() == 2


def test_admin_csv_import_is_all_or_nothing(admin_user):
    csv = "username,password\nok1,a-long-password-1\n,nope\n"
    page = _client(admin_user).post(
        "/admin/annotation/annotator/import/",
        {"file": SimpleUploadedFile("a.csv", csv.encode())},
    )
    assert "line 3: username is empty" in page.content.decode()
    assert not get_user_model().objects.filter(username="ok1").exists()


def test_admin_deactivation_returns_leases(study, members, admin_user):
    lease = assignment_next(study=study, annotator=members[0])
    response = _client(admin_user).post(
        "/admin/annotation/annotator/",
        {"action": "deactivate", "_selected_action": [members[0].pk]},
    )
    assert response.status_code == 302
    lease.refresh_from_db()
    members[0].refresh_from_db()
    assert not members[0].is_active and lease.status == AssignmentStatus.EXPIRED
    assert (
        _client(members[0])
        .post(f"/api/v1/studies/{study.pk}/assignments/next")
        .status_code
        == 403
    )


# ---------------------------------------------------------------------------- security


def test_every_form_carries_a_csrf_token(study, admin_user):
    client = _client(admin_user)
    for url in (
        "/annotation/studies/",
        f"/annotation/studies/{study.pk}/",
        "/admin/annotation/annotator/import/",
    ):
        html = client.get(url).content.decode()
        forms = re.findall(r"<form[^>]*method=\"post\"[^>]*>(.*?)</form>", html, re.S)
        assert forms, url
        assert all("csrfmiddlewaretoken" in f for f in forms), url


def test_posts_without_csrf_token_are_refused(study, members, admin_user):
    staff = _client(admin_user, csrf=True)
    assert staff.post(f"/annotation/studies/{study.pk}/close").status_code == 403
    assert staff.post("/annotation/studies/", {}).status_code == 403
    annotator = _client(members[0], csrf=True)
    response = annotator.post(f"/api/v1/studies/{study.pk}/assignments/next")
    assert response.status_code == 403 and "CSRF" in response.json()["message"]
    study.refresh_from_db()
    assert study.status == StudyStatus.OPEN


def test_login_is_throttled_after_repeated_failures(db, settings):
    settings.LOGIN_THROTTLE_ATTEMPTS = 3
    UserFactory(username="victim", password="right-password-1")
    UserFactory(username="someone", password="right-password-2")
    client = Client()
    for _ in range(3):
        page = client.post("/login/", {"username": "victim", "password": "wrong"})
        assert page.status_code == 200
    blocked = client.post(
        "/login/", {"username": "victim", "password": "right-password-1"}
    )
    assert blocked.status_code == 200 and "_auth_user_id" not in client.session
    other = client.post(
        "/login/", {"username": "someone", "password": "right-password-2"}
    )
    assert other.status_code == 302  # the lock is per username and address
    token = Client().post(
        "/api/v1/auth/token", {"username": "victim", "password": "right-password-1"}
    )
    assert token.status_code == 400  # the API token endpoint is throttled too


@pytest.mark.parametrize(
    ("next_url", "target"),
    [
        ("https://evil.example/phish", "/"),
        ("//evil.example/", "/"),
        ("/\\evil.example", "/"),
        ("javascript:alert(1)", "/"),
        ("/annotation/", "/annotation/"),
    ],
)
def test_no_open_redirect_after_login(db, next_url, target):
    UserFactory(username="eve", password="right-password-1")
    response = Client().post(
        "/login/",
        {"username": "eve", "password": "right-password-1", "next": next_url},
    )
    assert response.status_code == 302
    assert response["Location"] == target


def _markup(html: str) -> list[tuple[str, list[tuple[str, str | None]]]]:
    """Every start tag of ``html`` with its attributes (a real HTML parser)."""
    from html.parser import HTMLParser

    found: list = []

    class Collect(HTMLParser):
        def handle_starttag(self, tag, attrs):
            found.append((tag, attrs))

    Collect().feed(html)
    return found


def test_markdown_instructions_are_rendered_safely():
    html = markdown.render(
        "# Task\n\nRead **carefully** and see [guide](https://example.org/g).\n\n"
        "<script>alert(1)</script> [x](javascript:alert(1)) <img src=x onerror=y>\n\n"
        '- one\n- [two](https://a.example/" onmouseover="x)\n\n1. first\n2. `code <b>`'
    )
    flat = re.sub(r">\s+<", "><", html)
    assert "<script>" not in html and "<img" not in html
    assert 'href="javascript' not in html
    assert "<strong>carefully</strong>" in html
    assert '<a href="https://example.org/g" rel="noopener noreferrer">guide</a>' in html
    assert "<ul><li>one</li>" in flat and "<ol><li>first</li>" in flat
    assert "<code>code &lt;b&gt;</code>" in html
    assert [t for t, _a in _markup(html) if t == "a"] == ["a"]  # only the guide link


XSS_PAYLOADS = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "<svg/onload=alert(1)>",
    '<a href="javascript:alert(1)">x</a>',
    "[x](javascript:alert(1))",
    "[x](JaVaScRiPt:alert(1))",
    "[x](<javascript:alert(1)>)",
    "[x](&#106;avascript:alert(1))",
    "[x](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "[x](vbscript:msgbox(1))",
    '[x](https://ok.example "title" onclick="alert(1)")',
    '[x](https://a.example/" onmouseover="alert(1))',
    "![x](https://a.example/x.png)",
    "<iframe src=https://evil.example></iframe>",
    '<div style="background:url(javascript:alert(1))">x</div>',
    "**<b onmouseover=alert(1)>bold</b>**",
    "`</code><script>alert(1)</script>`",
    "# <script>alert(1)</script>",
    "- <a href=https://x onclick=alert(1)>x</a>",
    "<!-- --><script>alert(1)</script>",
    "[x](https://ok.example/?q=<script>)",
]


@pytest.mark.parametrize("payload", XSS_PAYLOADS)
def test_markdown_xss_payloads_yield_only_allowed_markup(payload):
    """Whatever the payload, the HTML holds only the allowed tags, no attribute but
    a link's href (http, https or mailto) and rel, and no script element."""
    html = markdown.render(f"Intro\n\n{payload}\n\n- item {payload}")
    for tag, attrs in _markup(html):
        assert tag in markdown.ALLOWED_TAGS, (tag, html)
        for name, value in attrs:
            assert (tag, name) in {("a", "href"), ("a", "rel")}, (tag, name, html)
            if name == "href":
                assert value.lower().startswith(("http://", "https://", "mailto:"))
    assert "<script" not in html.lower()


def test_markdown_follows_commonmark():
    """A real parser: escapes, links with parentheses, nested emphasis, list items
    over several lines, deeper headings capped below the page's own."""
    html = markdown.render(
        "Use \\*stars\\* literally; see [Foo](https://en.wikipedia.org/wiki/Foo_(bar)).\n\n"
        "*very **important** note*\n\n"
        "- first line\n  continues here\n- second\n\n"
        "#### Deep"
    )
    assert "Use *stars* literally" in html
    assert '<a href="https://en.wikipedia.org/wiki/Foo_(bar)"' in html
    assert "<em>very <strong>important</strong> note</em>" in html
    assert "<li>first line\ncontinues here</li>" in html
    assert "<h4>Deep</h4>" in html


def test_only_annotators_can_be_invited(study, admin_user):
    plain = UserFactory(username="plain")
    refused = _client(admin_user).post(
        f"/api/v1/studies/{study.pk}/annotators",
        {"usernames": ["plain"]},
        content_type="application/json",
    )
    assert refused.status_code == 404
    with pytest.raises(ApplicationError, match="not an annotator"):
        study_member_add(study=study, annotator=plain)
    assert not StudyMember.objects.filter(annotator=plain).exists()


def test_inline_scripts_carry_the_csp_nonce(study, members, admin_user):
    """The study and grading pages' scripts run under the CSP: each inline script
    carries the nonce the response's policy allows, and no other inline script
    exists."""
    for user, url in (
        (admin_user, f"/annotation/studies/{study.pk}/"),
        (members[0], f"/annotation/studies/{study.pk}/grading"),
    ):
        response = _client(user).get(url)
        assert response.status_code == 200
        nonce = re.search(
            r"script-src 'self' 'nonce-([^']+)'",
            response.headers["Content-Security-Policy"],
        )[1]
        scripts = re.findall(r"<script([^>]*)>", response.content.decode())
        inline = [a for a in scripts if "src=" not in a and "json" not in a]
        assert inline and all(f'nonce="{nonce}"' in a for a in inline), scripts
