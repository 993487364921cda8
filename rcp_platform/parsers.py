"""The API's JSON parser: DRF's, plus limits no client may cross (issue 10, item 4).

A JSON body is refused with a 400 (``ParseError``, the one error shape of
``rcp_platform/api.py``) when it is nested deeper than ``MAX_JSON_DEPTH`` (100k
nested ``[`` made the decoder raise RecursionError, a 500, even before login), or
when any string or key holds a NUL character or an unpaired UTF-16 surrogate
(PostgreSQL stores neither: DataError, a 500, after the request had already
changed rows). Checking once here protects every endpoint, including the free-form
values inside ``DictField``/``JSONField`` inputs that DRF's ``CharField`` validators
never see.
"""

from __future__ import annotations

import re
from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

MAX_JSON_DEPTH = 64
_FORBIDDEN = re.compile("[\x00\ud800-\udfff]")


def json_problem(data: Any, *, max_depth: int = MAX_JSON_DEPTH) -> str | None:
    """Why ``data`` (a parsed JSON value) is refused, or None.

    Iterative (no recursion of our own): depth, then every string and key.
    """
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            if _FORBIDDEN.search(value):
                return (
                    "JSON strings must not contain NUL characters (\\u0000) or "
                    "unpaired surrogates (\\ud800-\\udfff)"
                )
            continue
        if isinstance(value, dict | list):
            if depth > max_depth:
                return f"JSON nested deeper than {max_depth} levels"
            if isinstance(value, dict):
                stack.extend((k, depth) for k in value)
                stack.extend((v, depth + 1) for v in value.values())
            else:
                stack.extend((v, depth + 1) for v in value)
    return None


class StrictJSONParser(JSONParser):
    """DRF's JSONParser (strict: no NaN/Infinity) with the limits above."""

    def parse(
        self,
        stream: Any,
        media_type: str | None = None,
        parser_context: dict[str, Any] | None = None,
    ) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError as exc:
            raise ParseError(
                f"JSON parse error - nested deeper than {MAX_JSON_DEPTH} levels"
            ) from exc
        problem = json_problem(data)
        if problem is not None:
            raise ParseError(f"JSON parse error - {problem}")
        return data
