"""Model instances from fixed SQL, for the few hot paths where building a query with
the ORM costs more than running it.

The annotator API (``perf/bench_annotation.py``) spent about a third of its web
CPU compiling ORM queries (``SQLCompiler.as_sql``) for statements whose shape
never changes. ``Columns`` gives the SELECT list of a model's concrete columns under
a table alias and turns the matching slice of a row back into an instance exactly
as the ORM would: the backend's and the field's converters applied (SQLite returns
datetimes as text, JSON as text, booleans as integers), ``Model.from_db`` so the
instance is marked as loaded from this database.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django.db import connections
from django.db.models import Model

Converter = Callable[[Any, Any, Any], Any]


class Columns:
    """The concrete columns of ``model`` (or only ``fields``, by attribute name)
    under SQL alias ``alias``."""

    def __init__(
        self, model: type[Model], alias: str, fields: Sequence[str] | None = None
    ) -> None:
        concrete = model._meta.concrete_fields
        if fields is not None:
            wanted = set(fields)
            concrete = [f for f in concrete if f.attname in wanted or f.name in wanted]
        self.model = model
        self.alias = alias
        self.fields = list(concrete)
        self.attnames = [f.attname for f in self.fields]
        self._converters: dict[str, list[tuple[int, list[Converter], Any]]] = {}

    def __len__(self) -> int:
        return len(self.fields)

    @property
    def sql(self) -> str:
        """``alias."col", ...`` in the order ``build`` reads them."""
        return ", ".join(f'{self.alias}."{f.column}"' for f in self.fields)

    def _converters_for(self, using: str) -> list[tuple[int, list[Converter], Any]]:
        found = self._converters.get(using)
        if found is None:
            connection = connections[using]
            found = []
            for i, field in enumerate(self.fields):
                col = field.get_col(self.alias)
                convs = connection.ops.get_db_converters(col) + field.get_db_converters(
                    connection
                )
                if convs:
                    found.append((i, convs, col))
            self._converters[using] = found
        return found

    def values(self, row: Sequence[Any], start: int = 0, using: str = "default"):
        """The converted values of this model's columns in ``row`` from ``start``."""
        values = list(row[start : start + len(self.fields)])
        connection = connections[using]
        for i, convs, col in self._converters_for(using):
            value = values[i]
            for convert in convs:
                value = convert(value, col, connection)
            values[i] = value
        return values

    def build(self, row: Sequence[Any], start: int = 0, using: str = "default") -> Any:
        """The instance whose columns start at ``row[start]``."""
        return self.model.from_db(
            using, self.attnames, self.values(row, start, using=using)
        )


def scalar_converter(field: Any, using: str = "default") -> Callable[[Any], Any]:
    """A function converting one raw value of ``field`` (a model field) to Python."""
    connection = connections[using]
    col = field.get_col(field.model._meta.db_table)
    convs = connection.ops.get_db_converters(col) + field.get_db_converters(connection)

    def convert(value: Any) -> Any:
        for conv in convs:
            value = conv(value, col, connection)
        return value

    return convert
