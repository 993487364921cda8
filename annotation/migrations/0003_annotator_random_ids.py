"""A random id per annotator account (issue 10, item 2): releases hash it instead
of the enumerable user id. Backfills every existing annotator: members of the
``annotators`` group and every account with a study membership or an assignment.

Reversible: going back drops the table; the hashes of releases made before this
migration were HMACs of user ids and stay as they are (releases are immutable).
"""

import secrets

import annotation.models
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def backfill_random_ids(apps, schema_editor):
    User = apps.get_model(*settings.AUTH_USER_MODEL.split("."))
    AnnotatorRandomId = apps.get_model("annotation", "AnnotatorRandomId")
    StudyMember = apps.get_model("annotation", "StudyMember")
    Assignment = apps.get_model("annotation", "Assignment")
    ids = set(
        User.objects.filter(groups__name="annotators").values_list("pk", flat=True)
    )
    ids |= set(StudyMember.objects.values_list("annotator_id", flat=True))
    ids |= set(Assignment.objects.values_list("annotator_id", flat=True))
    ids -= set(AnnotatorRandomId.objects.values_list("user_id", flat=True))
    AnnotatorRandomId.objects.bulk_create(
        [AnnotatorRandomId(user_id=i, value=secrets.token_hex(32)) for i in sorted(ids)],
        batch_size=1000,
    )


class Migration(migrations.Migration):

    dependencies = [
        ('annotation', '0002_study_releases'),
        ('auth', '0012_alter_user_first_name_max_length'),
    ]

    operations = [
        migrations.CreateModel(
            name='AnnotatorRandomId',
            fields=[
                ('user', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='annotator_random_id', serialize=False, to=settings.AUTH_USER_MODEL)),
                ('value', models.CharField(default=annotation.models.new_random_id, editable=False, max_length=64, unique=True)),
            ],
            options={
                'verbose_name': 'annotator random id',
            },
        ),
        migrations.RunPython(backfill_random_ids, migrations.RunPython.noop),
    ]
