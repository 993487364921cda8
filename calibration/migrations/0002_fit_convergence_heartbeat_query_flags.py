"""Fits record whether they converged; an unconverged fit is never ``done``.

Existing fits from judgments take ``converged`` from their stored optimiser
diagnostics; a ``done`` fit that had not converged becomes ``unconverged`` (its rows
stay). Reversible: the reverse step leaves statuses as they are, and the field and
constraint are dropped by the schema operations.
"""

from django.conf import settings
from django.db import migrations, models


def backfill_converged(apps, schema_editor):
    Fit = apps.get_model("calibration", "CalibrationFit")
    for fit in Fit.objects.filter(source="judgments").exclude(diagnostics={}):
        converged = bool((fit.diagnostics or {}).get("optimizer", {}).get("converged"))
        fit.converged = converged
        fields = ["converged"]
        if fit.status == "done" and not converged:
            fit.status = "unconverged"
            fit.error = "the 2PL optimiser stopped before converging"
            fields += ["status", "error"]
        fit.save(update_fields=fields)


class Migration(migrations.Migration):

    dependencies = [
        ('benchmarks', '0001_initial'),
        ('calibration', '0001_initial'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='calibrationfit',
            name='converged',
            field=models.BooleanField(blank=True, help_text='every optimiser converged (None: no fit ran)', null=True),
        ),
        migrations.AddField(
            model_name='calibrationfit',
            name='heartbeat_at',
            field=models.DateTimeField(blank=True, help_text='last sign of life of the running fit', null=True),
        ),
        migrations.AddField(
            model_name='querycalibration',
            name='flags',
            field=models.JSONField(blank=True, default=list, help_text='codes of rcp.irt.FLAG_TEXT (scale pinned by priors or a bound) and invalid_windows (> 5% invalid in a stage, or any adaptive)'),
        ),
        migrations.AlterField(
            model_name='calibrationfit',
            name='status',
            field=models.CharField(choices=[('pending', 'pending'), ('running', 'running'), ('done', 'done'), ('unconverged', 'unconverged (results stored, not trusted)'), ('failed', 'failed')], default='pending', max_length=20),
        ),
        migrations.AlterField(
            model_name='querycalibration',
            name='flagged',
            field=models.BooleanField(default=False, help_text='any flag'),
        ),
        migrations.RunPython(backfill_converged, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name='calibrationfit',
            constraint=models.CheckConstraint(condition=models.Q(models.Q(('source', 'judgments'), ('status', 'done'), _negated=True), ('converged', True), _connector='OR'), name='fit_done_converged'),
        ),
    ]
