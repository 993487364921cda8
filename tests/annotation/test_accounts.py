"""Annotator accounts (issue 13, item 1): invitations never touch a password, the
staff page creates and invites annotators and issues one-time set-password links
(Django's token generator, the password validators on)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from annotation.models import StudyMember
from annotation.services import annotator_create, annotator_password_link
from rcp_platform.exceptions import ApplicationError, ConflictError
from tests.factories import AnnotatorFactory, UserFactory

pytestmark = pytest.mark.django_db


def _staff_client(admin_user):
    client = Client()
    client.force_login(admin_user)
    return client


def test_inviting_an_existing_annotator_keeps_their_password(study, make_study):
    user, generated = annotator_create(
        username="ann", password="first-password-1", study=study
    )
    assert generated is None
    second = make_study(name="Second", seed=5)
    again, generated = annotator_create(username="ann", study=second, update=True)
    assert again.pk == user.pk and generated is None
    again.refresh_from_db()
    assert again.check_password("first-password-1")
    assert Client().login(username="ann", password="first-password-1")
    assert StudyMember.objects.filter(annotator=user).count() == 2
    with pytest.raises(ApplicationError, match="reset explicitly"):
        annotator_create(username="ann", password="x-new-password-2", update=True)
    with pytest.raises(ConflictError, match="exists already"):
        annotator_create(username="ann")


def test_staff_page_invites_without_touching_the_password(
    study, make_study, admin_user
):
    ann = AnnotatorFactory(username="carol", password="carol-password-1")
    second = make_study(name="Second", seed=5)
    client = _staff_client(admin_user)
    page = client.get("/annotation/annotators/")
    assert page.status_code == 200 and 'data-username="carol"' in page.content.decode()
    done = client.post(
        "/annotation/annotators/",
        {"action": "invite", "invite-annotator": ann.pk, "invite-study": second.pk},
        follow=True,
    )
    assert "password is unchanged" in done.content.decode()
    assert StudyMember.objects.filter(annotator=ann, study=second, active=True).exists()
    assert Client().login(username="carol", password="carol-password-1")


def test_staff_creates_an_annotator_who_sets_a_password_once(study, admin_user):
    client = _staff_client(admin_user)
    page = client.post(
        "/annotation/annotators/",
        {"action": "create", "create-username": "dora", "create-study": study.pk},
    )
    html = page.content.decode()
    user = get_user_model().objects.get(username="dora")
    assert not user.has_usable_password()
    assert StudyMember.objects.filter(annotator=user, study=study).exists()
    url = html.split('id="password-link-url">')[1].split("<")[0]
    assert url.startswith("http://testserver/annotation/set-password/")
    path = url.removeprefix("http://testserver")
    visitor = Client()
    form = visitor.get(path, follow=True)
    assert form.status_code == 200 and 'id="set-password-form"' in form.content.decode()
    form_url = form.redirect_chain[-1][0]
    # The validators are on: a short password is refused and nothing changes.
    short = visitor.post(form_url, {"new_password1": "abc", "new_password2": "abc"})
    assert "too short" in short.content.decode()
    common = visitor.post(
        form_url, {"new_password1": "password123", "new_password2": "password123"}
    )
    assert "too common" in common.content.decode()
    numeric = visitor.post(
        form_url, {"new_password1": "8305719264", "new_password2": "8305719264"}
    )
    assert "entirely numeric" in numeric.content.decode()
    user.refresh_from_db()
    assert not user.has_usable_password()
    ok = visitor.post(
        form_url,
        {"new_password1": "dora-chose-this-1", "new_password2": "dora-chose-this-1"},
    )
    assert ok.status_code == 302 and ok.url == "/annotation/set-password/done/"
    assert Client().login(username="dora", password="dora-chose-this-1")
    # One time: the same link is dead now.
    again = Client().get(path, follow=True)
    assert 'id="invalid-link"' in again.content.decode()


def test_link_for_an_existing_annotator_keeps_the_old_password_until_used(
    study, admin_user
):
    ann = AnnotatorFactory(username="erin", password="erin-password-1")
    client = _staff_client(admin_user)
    page = client.post("/annotation/annotators/", {"action": "link", "user": ann.pk})
    assert 'id="password-link"' in page.content.decode()
    ann.refresh_from_db()
    assert ann.check_password("erin-password-1")


def test_links_are_refused_for_staff_and_non_annotators(admin_user):
    staff = UserFactory(username="ops", is_staff=True)
    plain = UserFactory(username="plain")
    with pytest.raises(ConflictError, match="staff"):
        annotator_password_link(user=staff)
    with pytest.raises(ApplicationError, match="not an annotator"):
        annotator_password_link(user=plain)
    # The page only lists annotator accounts: a staff id is not found.
    client = _staff_client(admin_user)
    refused = client.post(
        "/annotation/annotators/", {"action": "link", "user": staff.pk}
    )
    assert refused.status_code == 404


def test_the_annotators_page_is_staff_only(study):
    ann = AnnotatorFactory()
    client = Client()
    client.force_login(ann)
    assert client.get("/annotation/annotators/").status_code == 403
    reviewer = UserFactory(username="rev")
    client.force_login(reviewer)
    assert client.get("/annotation/annotators/").status_code == 403
