"""Annotator accounts: the annotators group, creation (one or a CSV), deactivation,
study membership."""

from __future__ import annotations

import csv
import io
import secrets
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.contrib.auth.password_validation import validate_password
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import ValidationError
from django.db import transaction

from rcp_platform.exceptions import ApplicationError, ConflictError

from .. import selectors
from ..models import (
    Annotator,
    AnnotatorRandomId,
    Assignment,
    AssignmentStatus,
    Study,
    StudyMember,
)

ANNOTATORS_GROUP = "annotators"
ANNOTATE_CODENAME = "annotate"


@transaction.atomic
def annotator_group_ensure() -> Group:
    """Return the ``annotators`` group, creating it with only ``annotation.annotate``.

    Idempotent. The permission is declared on the ``Annotator`` proxy model (created
    by migrate; created here too so the function works before post-migrate ran).
    Annotators get nothing of the staff UI or API.
    """
    content_type = ContentType.objects.get_for_model(
        Annotator, for_concrete_model=False
    )
    permission, _ = Permission.objects.get_or_create(
        codename=ANNOTATE_CODENAME,
        content_type=content_type,
        defaults={"name": "Can grade contests of open studies"},
    )
    group, _ = Group.objects.get_or_create(name=ANNOTATORS_GROUP)
    group.permissions.set([permission])
    return group


@transaction.atomic
def annotator_random_id_ensure(*, user: Any) -> str:
    """The account's random release id (annotation.models.AnnotatorRandomId),
    created on first call; idempotent. Called when an annotator account or a study
    membership is created, so every annotator has one before grading."""
    random_id, _created = AnnotatorRandomId.objects.get_or_create(user_id=user.pk)
    return random_id.value


def _new_password() -> str:
    return secrets.token_urlsafe(12)


def _check_password(password: str, user: Any) -> None:
    try:
        validate_password(password, user)
    except ValidationError as exc:
        raise ApplicationError(f"password refused: {' '.join(exc.messages)}") from exc


@transaction.atomic
def annotator_create(
    *,
    username: str,
    password: str | None = None,
    email: str = "",
    study: Study | None = None,
    update: bool = False,
    reset_password: bool = False,
    unusable_password: bool = False,
) -> tuple[Any, str | None]:
    """Create an annotator, or with ``update`` make an existing account one; optionally
    invite it to a study. Returns (user, generated password or None).

    An existing account keeps its password unless ``reset_password`` is given
    explicitly: inviting someone to a second study must never lock them out of the
    first. A new account gets ``password``, a generated one, or with
    ``unusable_password`` none at all (staff then hand out a one-time set-password
    link, ``annotator_password_link``). Refuses an existing username without
    ``update``, a password for an existing account without ``reset_password``, and
    staff accounts always (an annotator holds nothing but the annotate permission).
    """
    User = get_user_model()
    username = username.strip()
    user = User.objects.filter(username=username).first()
    if user is not None and not update:
        raise ConflictError(f"user {username!r} exists already")
    if user is not None and (user.is_staff or user.is_superuser):
        raise ConflictError(f"user {username!r} is staff; it cannot be an annotator")
    if user is not None and password and not reset_password:
        raise ApplicationError(
            f"user {username!r} exists already: its password is kept unless you ask "
            "for a reset explicitly (--reset-password)"
        )
    generated = None
    if user is None:
        user = User(username=username, email=email)
        try:
            user.full_clean(exclude=["password"])
        except ValidationError as exc:
            raise ApplicationError(
                f"invalid username {username!r}: "
                + "; ".join(m for msgs in exc.message_dict.values() for m in msgs)
            ) from exc
        if unusable_password and not password:
            user.set_unusable_password()
        else:
            if not password:
                password = generated = _new_password()
            _check_password(password, user)
            user.set_password(password)
        user.save()
    else:
        fields = []
        if reset_password:
            if not password:
                password = generated = _new_password()
            _check_password(password, user)
            user.set_password(password)
            fields.append("password")
        if not user.is_active and reset_password:
            # A reset is the one path that brings a deactivated account back;
            # a plain invitation leaves deactivation to the admin's decision.
            user.is_active = True
            fields.append("is_active")
        if fields:
            user.save(update_fields=fields)
    user.groups.add(annotator_group_ensure())
    annotator_random_id_ensure(user=user)
    if study is not None:
        study_member_add(study=study, annotator=user)
    return user, generated


def annotator_password_link(*, user: Any) -> str:
    """The path of a one-time set-password page for an annotator account.

    Django's ``default_token_generator``: the token hashes the password hash and the
    last login, so it stops working once used (the password changed) or once the
    annotator logged in, and after PASSWORD_RESET_TIMEOUT. Nothing is sent: staff
    hand the link over. Refused for staff accounts (those are reset in the admin) and
    for users outside the annotators group, so the staff page cannot be used to take
    over another kind of account.
    """
    from django.contrib.auth.tokens import default_token_generator
    from django.urls import reverse
    from django.utils.encoding import force_bytes
    from django.utils.http import urlsafe_base64_encode

    if user.is_staff or user.is_superuser:
        raise ConflictError(f"user {user.username!r} is staff; use the admin")
    if not user.groups.filter(name=ANNOTATORS_GROUP).exists():
        raise ApplicationError(f"user {user.username!r} is not an annotator")
    if not user.is_active:
        raise ConflictError(f"user {user.username!r} is deactivated")
    return reverse(
        "annotation:set-password",
        kwargs={
            "uidb64": urlsafe_base64_encode(force_bytes(user.pk)),
            "token": default_token_generator.make_token(user),
        },
    )


@dataclass(frozen=True)
class ImportedAnnotator:
    username: str
    password: str | None  # the generated password (shown once), None if given
    created: bool


@transaction.atomic
def annotators_import(
    *, text: str, study: Study | None = None, update: bool = False
) -> list[ImportedAnnotator]:
    """Create annotators from CSV text with header ``username[,password][,email]``.

    All or nothing: the first bad row raises ApplicationError naming its line. Empty
    passwords of new accounts are generated and returned once. ``update`` invites
    existing annotators instead of refusing them; their password changes only where
    the row gives one (an explicit reset).
    """
    reader = csv.DictReader(io.StringIO(text.lstrip("\ufeff")))
    header = [h.strip().lower() for h in (reader.fieldnames or [])]
    if "username" not in header:
        raise ApplicationError("line 1: the CSV header must name a username column")
    reader.fieldnames = header
    User = get_user_model()
    out: list[ImportedAnnotator] = []
    seen: set[str] = set()
    for line, row in enumerate(reader, start=2):
        username = (row.get("username") or "").strip()
        if not username:
            raise ApplicationError(f"line {line}: username is empty")
        if username in seen:
            raise ApplicationError(f"line {line}: duplicate username {username!r}")
        seen.add(username)
        existed = User.objects.filter(username=username).exists()
        password = (row.get("password") or "").strip() or None
        try:
            _user, generated = annotator_create(
                username=username,
                password=password,
                email=(row.get("email") or "").strip(),
                study=study,
                update=update,
                reset_password=existed and password is not None,
            )
        except ApplicationError as exc:
            raise ApplicationError(f"line {line}: {exc.message}") from exc
        out.append(ImportedAnnotator(username, generated, not existed))
    if not out:
        raise ApplicationError("the CSV has no rows after the header")
    return out


@transaction.atomic
def annotator_deactivate(*, user: Any) -> int:
    """Deactivate an account and return its open leases to the pool at once.

    Returns the number of leases released. Their drafts are kept.
    """
    user.is_active = False
    user.save(update_fields=["is_active"])
    return Assignment.objects.filter(
        annotator=user, status=AssignmentStatus.LEASED
    ).update(status=AssignmentStatus.EXPIRED, slot=None)


@transaction.atomic
def annotator_activate(*, user: Any) -> Any:
    user.is_active = True
    user.save(update_fields=["is_active"])
    return user


@transaction.atomic
def study_member_add(*, study: Study, annotator: Any) -> StudyMember:
    """Invite an annotator to a study (idempotent; re-activates a removed member,
    never an excluded one). Never touches the password."""
    if not annotator.has_perm(selectors.ANNOTATE_PERMISSION) and not (
        annotator.groups.filter(name=ANNOTATORS_GROUP).exists()
    ):
        raise ApplicationError(f"user {annotator.username!r} is not an annotator")
    annotator_random_id_ensure(user=annotator)
    member, created = StudyMember.objects.get_or_create(
        study=study, annotator=annotator
    )
    if member.excluded_at is not None:
        raise ConflictError(
            f"{annotator.username!r} was excluded from this study "
            f"({member.excluded_reason}); an exclusion is final"
        )
    if not created and not member.active:
        member.active = True
        member.save(update_fields=["active"])
    return member
