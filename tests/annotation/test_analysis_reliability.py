"""ICC(1,k), Krippendorff's alpha, pick agreement and within-one-grade share."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pingouin as pg
import pytest
from krippendorff import alpha as kalpha

from annotation.analysis.reliability import (
    balanced_units,
    icc1k,
    krippendorff_alpha,
    pick_agreement,
    within_one_share,
)

# Shrout & Fleiss (1979) Table 2: 6 targets x 4 judges; ICC(1,4) = 0.442797.
SF = np.array(
    [
        [9, 2, 5, 8],
        [6, 1, 3, 2],
        [8, 4, 6, 8],
        [7, 1, 2, 6],
        [10, 5, 6, 9],
        [6, 2, 4, 7],
    ],
    dtype=float,
)
# Krippendorff (2011) "C": 4 coders x 12 units, NaN = missing.
C = np.array(
    [
        [1, 2, 3, 3, 2, 1, 4, 1, 2, np.nan, np.nan, np.nan],
        [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, np.nan, 3],
        [np.nan, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, np.nan],
        [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, np.nan],
    ]
)


def _closed_form_icc1k(m: np.ndarray) -> float:
    n, k = m.shape
    msb = k * ((m.mean(1) - m.mean()) ** 2).sum() / (n - 1)
    msw = ((m - m.mean(1, keepdims=True)) ** 2).sum() / (n * (k - 1))
    return (msb - msw) / msb


def test_icc1k_hand_computed():
    """[[1,2],[3,4],[5,5]]: means 1.5 3.5 5, grand 10/3; MSB = 2 * 222/36 / 2 = 37/6,
    MSW = (4 * 0.25) / 3 = 1/3; ICC(1,k) = (37/6 - 1/3) / (37/6) = 35/37."""
    assert icc1k(np.array([[1, 2], [3, 4], [5, 5]])) == pytest.approx(35 / 37)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # pingouin vs pandas 3
def test_icc1k_shrout_fleiss_fixture_and_oracles():
    """Published ICC(1,4) = .44 (0.442797); 3 judges equal the closed form and a
    direct pingouin call."""
    assert icc1k(SF) == pytest.approx(0.442797, abs=1e-6)
    three = SF[:, :3]
    assert icc1k(three) == pytest.approx(_closed_form_icc1k(three), abs=1e-12)
    long = pd.DataFrame(
        [(i, j, three[i, j]) for i in range(6) for j in range(3)],
        columns=["t", "r", "s"],
    )
    table = pg.intraclass_corr(data=long, targets="t", raters="r", ratings="s")
    ref = table.set_index("Type").loc["ICC(1,k)", "ICC"]
    assert icc1k(three) == pytest.approx(ref, abs=1e-12)


def test_icc1k_undefined_cases():
    """One unit, one rater or no between-unit variance: None."""
    assert icc1k(np.array([[1.0, 2.0]])) is None
    assert icc1k(np.array([[1.0], [2.0]])) is None
    assert icc1k(np.array([[1.0, 2.0], [2.0, 1.0]])) is None


def test_krippendorff_hand_computed_interval_and_ordinal():
    """Units [1,2], [3,3]; n = 4 pairable values.
    Interval: D_o = (1 + 1) / 4 = 0.5; D_e = 2 * (1+4+4+1+1+0) / (4*3) = 22/12;
    alpha = 1 - 0.5 / (11/6) = 8/11.
    Ordinal (n_1 = 1, n_2 = 1, n_3 = 2): d(1,2) = (2 - 1)^2 = 1, d(1,3) =
    (4 - 1.5)^2 = 6.25, d(2,3) = (3 - 1.5)^2 = 2.25; D_o = 0.5; D_e = 2 * (1 + 2*6.25
    + 2*2.25) / 12 = 3; alpha = 1 - 0.5/3 = 5/6."""
    units = [[1, 2], [3, 3]]
    assert krippendorff_alpha(units, level="interval") == pytest.approx(8 / 11)
    assert krippendorff_alpha(units, level="ordinal") == pytest.approx(5 / 6)


def test_krippendorff_canonical_fixture():
    """Krippendorff (2011) C: ordinal .8154, interval .8491, nominal .7434; units
    with a single value (the last one) are not pairable and drop out."""
    units = [[v for v in C[:, j] if not np.isnan(v)] for j in range(C.shape[1])]
    assert krippendorff_alpha(units, level="ordinal") == pytest.approx(
        0.815388, abs=1e-6
    )
    assert krippendorff_alpha(units, level="interval") == pytest.approx(
        0.849107, abs=1e-6
    )
    assert krippendorff_alpha(units, level="nominal") == pytest.approx(
        0.743421, abs=1e-6
    )


def test_krippendorff_matches_package_on_ragged_random_units():
    """Rater identity does not enter alpha: our packing equals a raters x units
    matrix with the values placed under arbitrary raters."""
    rng = np.random.default_rng(4)
    truth = rng.integers(0, 6, 80)
    units = [
        list(np.clip(truth[j] + rng.integers(-1, 2, rng.integers(2, 4)), 0, 5))
        for j in range(80)
    ]
    wide = np.full((10, 80), np.nan)
    for j, u in enumerate(units):
        wide[rng.choice(10, len(u), replace=False), j] = u
    for level in ("ordinal", "interval"):
        assert krippendorff_alpha(units, level=level) == pytest.approx(
            kalpha(reliability_data=wide, level_of_measurement=level), abs=1e-12
        )


def test_krippendorff_undefined_cases():
    """A single value overall, or no unit with two values: None."""
    assert krippendorff_alpha([[2, 2], [2, 2]]) is None
    assert krippendorff_alpha([[1], [3]]) is None


def test_pick_agreement_pools_pairs():
    """[A,A,B]: 1 of 3 pairs; [B,B,B]: 3 of 3; [A,tie]: 0 of 1 -> 4/7."""
    assert pick_agreement([["A", "A", "B"], ["B", "B", "B"], ["A", "tie"]]) == (
        pytest.approx(4 / 7)
    )
    assert pick_agreement([["A"]]) is None


def test_within_one_share_pools_pairs():
    """[0,1,3]: (0,1) yes, (0,3) no, (1,3) no; [2,2]: yes -> 2/4."""
    assert within_one_share([[0, 1, 3], [2, 2]]) == 0.5
    assert within_one_share([[4]]) is None


def test_balanced_units_keeps_the_most_common_count():
    """Counts 3, 3, 2 (and a single) -> k = 3 with two units; a 1-1 tie picks the
    larger k."""
    m = balanced_units([[1, 2, 3], [4, 5, 6], [7, 8], [9]])
    assert m.tolist() == [[1, 2, 3], [4, 5, 6]]
    assert balanced_units([[1, 2], [3, 4, 5]]).shape == (1, 3)
    assert balanced_units([[1]]).shape == (0, 0)
