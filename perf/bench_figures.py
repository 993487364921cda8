"""Figure rendering: every kind of portal/figures.py at leaderboard scale, cold
(cache cleared) per format and then from the cache.

    .venv/bin/python perf/bench_figures.py [--systems 12] [--repeat 3]

Prints the median milliseconds per figure and format. Pages render each figure's
SVG once per content (a fit, a report, a leaderboard); downloads render the asked
format once; later views are cache hits.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rcp_platform.settings")
os.environ.setdefault("DEBUG", "true")


def figures(n_systems: int) -> list:
    import numpy as np

    from portal.figures import Figure, matrix_class

    rng = np.random.default_rng(0)
    names = [f"system-{i:02d}" for i in range(n_systems)]
    values = np.sort(rng.uniform(0.4, 0.8, n_systems))[::-1]
    pairs = []
    for i, a in enumerate(names):
        for j, b in enumerate(names):
            if i != j:
                d = float(values[j] - values[i])
                pairs.append(
                    (
                        a,
                        b,
                        d,
                        0.01,
                        abs(d) > 0.05,
                        abs(d) < 0.02,
                        matrix_class(d, abs(d) > 0.05, abs(d) < 0.02),
                    )
                )
    bins = tuple(
        (
            i / 10,
            (i + 1) / 10,
            int(rng.integers(1, 200)),
            i / 10 + 0.05,
            min(1.0, i / 10 + rng.uniform(0, 0.1)),
        )
        for i in range(10)
    )
    return [
        Figure(
            "forest",
            "RCP-nDCG@10",
            "forest",
            ("s", "v", "lo", "hi", "c"),
            tuple(
                (n, float(v), float(v) - 0.03, float(v) + 0.03, i % 3 == 0)
                for i, (n, v) in enumerate(zip(names, values, strict=True))
            ),
            xlabel="RCP-nDCG@10 (0–1)",
        ),
        Figure(
            "matrix",
            "pairs",
            "matrix",
            ("a", "b", "d", "p", "s", "t", "c"),
            tuple(pairs),
            params={"systems": names},
        ),
        Figure(
            "curves",
            "items",
            "item_curves",
            ("c", "q", "g", "b"),
            tuple(
                (
                    f"C{k}",
                    "Does the document answer the question?",
                    1.0 + k / 5,
                    k - 3.0,
                )
                for k in range(1, 6)
            ),
            xlabel="θ",
            ylabel="P (%)",
        ),
        Figure(
            "reliability",
            "reliability",
            "reliability",
            ("lo", "hi", "n", "p", "o"),
            bins,
            xlabel="p (%)",
            ylabel="o (%)",
        ),
        Figure(
            "hist",
            "tau",
            "histogram",
            ("lo", "hi", "n"),
            tuple((i / 10, (i + 1) / 10, int(rng.integers(0, 50))) for i in range(20)),
            xlabel="τ",
            ylabel="queries (count)",
            params={"markers": {"p5": 0.2, "p95": 1.8}},
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--systems", type=int, default=12)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    import django

    django.setup()
    from django.core.cache import cache

    for fig in figures(args.systems):
        row = []
        for fmt in ("svg", "pdf", "png"):
            cold, warm = [], []
            for _ in range(args.repeat):
                cache.clear()
                t = time.perf_counter()
                fig.render(fmt)
                cold.append(time.perf_counter() - t)
                t = time.perf_counter()
                fig.render(fmt)
                warm.append(time.perf_counter() - t)
            row.append(
                f"{fmt} {statistics.median(cold) * 1e3:6.0f} ms cold, "
                f"{statistics.median(warm) * 1e3:.2f} ms cached"
            )
        print(f"{fig.kind:12s} " + " | ".join(row))


if __name__ == "__main__":
    main()
