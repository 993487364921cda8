"""``rate``: a report rate dict as "0.750 (6/8) [0.52, 0.98]", or "–"."""

from __future__ import annotations

from typing import Any

from django import template

register = template.Library()


@register.filter
def rate(value: Any) -> str:
    if not isinstance(value, dict) or value.get("rate") is None:
        return "–"
    text = f"{value['rate']:.3f} ({value['k']}/{value['n']})"
    ci = value.get("ci")
    if ci:
        text += f" [{ci[0]:.2f}, {ci[1]:.2f}]"
    return text
