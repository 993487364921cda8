"""portal/figures.py: one style for every figure, labelled axes, legends outside
the data, honest empty states, deterministic and cached output in four formats."""

from __future__ import annotations

import csv
import io
import xml.etree.ElementTree as ET

import pytest
from django.core.cache import cache

from portal import figures
from portal.figures import Figure
from tests.figures import SVG, marks, texts

BARS = Figure(
    name="bars",
    title="Per-annotator agreement",
    kind="hbars",
    columns=("annotator", "agreement"),
    rows=(("alice", 0.75), ("bob <b>", None)),
    xlabel="agreement (%)",
    params={"unit": "%", "maximum": 1.0},
)
RELIABILITY = Figure(
    name="rel",
    title="Reliability",
    kind="reliability",
    columns=("lo", "hi", "count", "predicted", "observed"),
    rows=(
        (0.0, 0.5, 10, 0.3, 0.25),
        (0.5, 1.0, 0, None, None),
        (0.5, 1.0, 4, 0.8, 0.9),
    ),
    xlabel="predicted (%)",
    ylabel="observed (%)",
)


@pytest.fixture(autouse=True)
def _empty_cache():
    cache.clear()


def _svg(fig: Figure) -> ET.Element:
    return ET.fromstring(fig.inline_svg())


def test_labels_units_and_values_are_drawn_as_text():
    svg = _svg(BARS)
    drawn = texts(svg)
    assert "Per-annotator agreement" in drawn and "agreement (%)" in drawn
    assert "alice" in drawn and "bob <b>" in drawn  # escaped by the SVG writer
    assert "75%" in drawn and "no data" in drawn  # None is said, not drawn as 0
    assert svg.find(f"{SVG}title").text == "Per-annotator agreement"
    markup = BARS.inline_svg()
    assert "<?xml" not in markup and "<style" not in markup and "<b>" not in markup
    assert 'class="plot"' in markup and 'role="img"' in markup


def test_points_count_equals_non_empty_bins():
    assert marks(_svg(RELIABILITY), "rel-points") == 2
    assert "perfect calibration" in texts(_svg(RELIABILITY))


def test_empty_figure_says_so_and_draws_no_axes():
    empty = Figure(
        name="e",
        title="Verdict classes",
        kind="hbars",
        columns=("c", "n"),
        rows=(),
        empty="No graded contests yet.",
    )
    drawn = texts(_svg(empty))
    assert sorted(drawn) == ["No graded contests yet.", "Verdict classes"]


def test_csv_is_the_table_with_full_precision():
    rows = list(csv.reader(io.StringIO(RELIABILITY.csv())))
    assert rows[0] == ["lo", "hi", "count", "predicted", "observed"]
    assert rows[1] == ["0.0", "0.5", "10", "0.3", "0.25"]
    assert rows[2] == ["0.5", "1.0", "0", "", ""]


@pytest.mark.parametrize(
    ("fmt", "magic"), [("svg", b"<?xml"), ("pdf", b"%PDF"), ("png", b"\x89PNG")]
)
def test_formats_are_deterministic_and_cached(fmt, magic, monkeypatch):
    first = BARS.render(fmt)
    assert first.startswith(magic)
    cache.clear()
    assert BARS.render(fmt) == first  # same input, same bytes (citable)
    calls = []
    monkeypatch.setattr(figures, "_draw", lambda *a: calls.append(a) or b"")
    assert BARS.render(fmt) == first and calls == []  # served from the cache


def test_every_kind_draws_its_labels():
    """One figure per kind with labels: each renders, titles and labels included,
    and the legend (if any) is placed outside the axes."""
    cases = [
        Figure(
            "g",
            "Grouped",
            "grouped_bars",
            ("g", "s", "r", "n", "lo", "hi"),
            (("all", "rcp", 0.6, 10, 0.4, 0.8), ("all", "qrel", None, 0, None, None)),
            xlabel="band (nDCG points)",
            ylabel="matched (%)",
        ),
        Figure(
            "h",
            "Hist",
            "histogram",
            ("lo", "hi", "n"),
            ((0, 1, 2), (1, 2, 3)),
            xlabel="τ (unitless)",
            ylabel="queries (count)",
            params={"markers": {"p5": 0.2, "p95": 1.9}},
        ),
        Figure(
            "i",
            "Curves",
            "item_curves",
            ("c", "q", "g", "b"),
            (("C1", "Is it on topic?", 1.0, 0.0),),
            xlabel="θ (logit)",
            ylabel="P (%)",
        ),
        Figure(
            "f",
            "Forest",
            "forest",
            ("s", "v", "lo", "hi", "ch"),
            (("bm25", 0.5, 0.4, 0.6, False), ("dense", 0.7, 0.6, 0.8, True)),
            xlabel="nDCG@10 (0–1)",
        ),
        Figure(
            "m",
            "Matrix",
            "matrix",
            ("a", "b", "d", "p", "s", "t", "c"),
            (("bm25", "dense", 0.2, 0.01, True, False, "better"),),
            xlabel="B",
            ylabel="A",
            params={"systems": ["bm25", "dense"]},
        ),
    ]
    for fig in cases:
        drawn = texts(_svg(fig))
        assert fig.title in drawn and fig.xlabel in drawn, fig.kind
    assert "no data" in texts(_svg(cases[0]))
    assert "p5 = 0.2" in texts(_svg(cases[1]))
    assert "C1 (β = 0.00): Is it on topic?" in texts(_svg(cases[2]))
    assert {"bm25", "dense"} <= set(texts(_svg(cases[3])))
    assert "+20.0" in texts(_svg(cases[4]))
