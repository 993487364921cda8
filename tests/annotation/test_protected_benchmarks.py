"""Benchmark data that a study shows cannot disappear under it: deleting the dataset
is refused with a readable message; replacing a system's run keeps the system."""

from __future__ import annotations

import pytest

from benchmarks.models import Dataset, RankingEntry, System
from benchmarks.services import dataset_delete, run_import
from rcp_platform.exceptions import ConflictError


def test_deleting_a_dataset_used_by_a_study_is_refused_and_changes_nothing(
    world, study
):
    before = RankingEntry.objects.count()
    with pytest.raises(ConflictError) as info:
        dataset_delete(dataset=world.dataset)
    assert f"dataset {world.dataset.name!r} is used by" in info.value.message
    assert "import under a new name" in info.value.message
    assert Dataset.objects.filter(pk=world.dataset.pk).exists()
    assert RankingEntry.objects.count() == before


def test_replacing_a_run_keeps_the_system_a_study_points_at(world, study, tmp_path):
    system = world.systems[0]
    query = world.dataset.queries.order_by("id").first()
    doc = world.dataset.documents.order_by("id").first()
    run = tmp_path / "run.trec"
    run.write_text(f"{query.external_id} Q0 {doc.external_id} 1 9.5 new\n")
    run_import(dataset=world.dataset, system_name=system.name, path=run, replace=True)
    assert System.objects.get(pk=system.pk).name == system.name
    assert list(
        RankingEntry.objects.filter(system=system).values_list("document_id", "score")
    ) == [(doc.pk, 9.5)]
