"""The issue-11 scorecard (benchmarks/accuracy/targets.py) on hand-built zoo rows whose ratios are known."""

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.accuracy.targets import main, scorecard  # noqa: E402


def _rows(case, config, ise1, ise0, seeds=(1, 2)):
    return [{"case": case, "config": config, "seed": s, "n": 1000, "v_points": 100, "ise1": a, "ise0": b,
             "status": "ok", "commit": "abc1234"} for s, a, b in zip(seeds, ise1, ise0)]


@pytest.fixture
def rows():
    # through_w: dim V 2, confounding outside V.  ihdp_all25: dim V 25, confounding inside V only.
    return pd.DataFrame(
        _rows("through_w", "ridge_dr", [1.0, 4.0], [1.0, 1.0])
        + _rows("through_w", "ridge_onestep", [2.0, 2.0], [2.0, 2.0])
        + _rows("through_w", "oracle_grid", [1.0, 1.0], [0.9, 0.95])
        + _rows("through_w", "neural_kernel", [1.2, 4.8], [2.0, 0.5])
        + _rows("ihdp_all25", "ridge_dr", [1.0, 1.0], [3.0, 3.0])
        + _rows("ihdp_all25", "ridge_onestep", [9.0, 9.0], [9.0, 9.0])
        + _rows("ihdp_all25", "marginal", [2.0, 2.0], [4.0, 4.0]))


def _ratio(card, target, case, arm):
    hit = card[(card.target == target) & (card.case == case) & (card.arm == arm)]
    assert len(hit) == 1
    return float(hit.ratio.iloc[0]), bool(hit.met.iloc[0])


def test_ratios_are_geometric_means_over_seeds(rows):
    card = scorecard(rows)
    # arm 1: per-seed ratios 1/2 and 4/2 -> geometric mean 1 (not the ratio of means, 2.5/2).
    assert _ratio(card, "beats one-step", "through_w", "arm 1") == (pytest.approx(1.0), False)
    assert _ratio(card, "within 15% of the hand grid", "through_w", "arm 0") == (
        pytest.approx(np.sqrt(1 / 0.9 * 1 / 0.95)), True)
    assert _ratio(card, "Neural-Kernel within 20% of ridge", "through_w", "arm 1") == (pytest.approx(1.2), True)
    assert _ratio(card, "Neural-Kernel within 20% of ridge", "through_w", "arm 0") == (pytest.approx(1.0), True)


def test_targets_apply_to_their_cases_only(rows):
    card = scorecard(rows)
    # ihdp_all25 confounds inside V only and has 25 covariates in V: scored against the marginal alone.
    assert set(card[card.case == "ihdp_all25"].target) == {"2x below the marginal"}
    assert _ratio(card, "2x below the marginal", "ihdp_all25", "arm 1") == (pytest.approx(0.5), True)
    assert _ratio(card, "2x below the marginal", "ihdp_all25", "arm 0") == (pytest.approx(0.75), False)
    # No Deep Feature rows: that target has no case-arms rather than invented ones.
    assert "Deep Feature within 20% of ridge" not in set(card.target)


def test_a_later_file_replaces_an_earlier_row(rows, tmp_path, capsys):
    first, second = tmp_path / "first.csv", tmp_path / "second.csv"
    rows.to_csv(first, index=False)
    rerun = pd.DataFrame(_rows("through_w", "ridge_onestep", [0.5, 8.0], [2.0, 2.0]))
    rerun.to_csv(second, index=False)
    out = tmp_path / "card.csv"
    assert main([str(first), str(second), "--out", str(out)]) == 0
    card = pd.read_csv(out)
    hit = card[(card.target == "beats one-step") & (card.case == "through_w") & (card.arm == "arm 1")]
    assert float(hit.ratio.iloc[0]) == pytest.approx(1.0)   # per seed 1/0.5 = 2 and 4/8 = 0.5
    printed = capsys.readouterr().out
    assert "beats one-step (ridge_dr / ridge_onestep < 1): met on 1 of 2 case-arms" in printed
    assert "missed: through_w arm 1 (report) 1.00" in printed
