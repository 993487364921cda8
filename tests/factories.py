"""factory_boy factories for the domain models."""

from __future__ import annotations

import factory
from django.contrib.auth import get_user_model

from benchmarks.models import (
    Dataset,
    Document,
    PoolEntry,
    Qrel,
    Query,
    RankingEntry,
    System,
)


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.django.Password("pw-test-123")


class DatasetFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Dataset

    name = factory.Sequence(lambda n: f"dataset-{n}")


class QueryFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Query

    dataset = factory.SubFactory(DatasetFactory)
    external_id = factory.Sequence(lambda n: f"q{n}")
    text = factory.Faker("sentence")


class DocumentFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Document

    dataset = factory.SubFactory(DatasetFactory)
    external_id = factory.Sequence(lambda n: f"d{n}")
    title = factory.Faker("sentence", nb_words=4)
    text = factory.Faker("paragraph")


class PoolEntryFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = PoolEntry

    query = factory.SubFactory(QueryFactory)
    document = factory.SubFactory(
        DocumentFactory, dataset=factory.SelfAttribute("..query.dataset")
    )
    rank = factory.Sequence(lambda n: n + 1)


class QrelFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Qrel

    query = factory.SubFactory(QueryFactory)
    document = factory.SubFactory(
        DocumentFactory, dataset=factory.SelfAttribute("..query.dataset")
    )
    grade = 1.0


class SystemFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = System

    dataset = factory.SubFactory(DatasetFactory)
    name = factory.Sequence(lambda n: f"system-{n}")


class RankingEntryFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = RankingEntry

    system = factory.SubFactory(SystemFactory)
    query = factory.SubFactory(
        QueryFactory, dataset=factory.SelfAttribute("..system.dataset")
    )
    document = factory.SubFactory(
        DocumentFactory, dataset=factory.SelfAttribute("..system.dataset")
    )
    rank = factory.Sequence(lambda n: n + 1)
    score = 0.0


class AnnotatorFactory(UserFactory):
    """A user of the ``annotators`` group (only ``annotation.annotate``)."""

    class Meta:
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"annotator-{n}")

    @factory.post_generation
    def annotator_group(self, create, extracted, **kwargs):
        if create:
            from annotation.services import annotator_group_ensure

            self.groups.add(annotator_group_ensure())
