"""Writes of the annotation app."""

from __future__ import annotations

from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.db import transaction

ANNOTATORS_GROUP = "annotators"
ANNOTATE_CODENAME = "annotate"


@transaction.atomic
def annotator_group_ensure() -> Group:
    """Return the ``annotators`` group, creating it with only ``annotation.annotate``.

    Idempotent. The permission hangs off a content type of its own because it
    guards a role, not a model; annotators get nothing of the staff UI or API.
    """
    content_type, _ = ContentType.objects.get_or_create(
        app_label="annotation", model="annotatorrole"
    )
    permission, _ = Permission.objects.get_or_create(
        codename=ANNOTATE_CODENAME,
        content_type=content_type,
        defaults={"name": "Can grade contests of open studies"},
    )
    group, _ = Group.objects.get_or_create(name=ANNOTATORS_GROUP)
    group.permissions.set([permission])
    return group
