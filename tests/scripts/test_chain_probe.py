"""scripts/bench/smollm2_chain_probe.py: its first-wrong-line histogram on hand-worked cases (the
probe itself samples the real model for minutes: docs/claim2_real.md is its run)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _probe():
    path = ROOT / "scripts" / "bench" / "smollm2_chain_probe.py"
    spec = importlib.util.spec_from_file_location("smollm2_chain_probe", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_histogram_names_all_right_positions_and_missing_steps():
    # first errors of five replies and their line counts: all right, line 0, line 2 twice
    # (one of them the last line), a step missing after 3 right lines (error == line count)
    errors, lines = [-1, 0, 2, 2, 3], [3, 4, 3, 5, 3]
    assert _probe().histogram(errors, lines) == {"-1": 1, "0": 1, "2": 2, "missing": 1}
    assert list(_probe().histogram([10, 2, 0], [12, 3, 1])) == ["0", "2", "10"]  # by number
    assert _probe().histogram([0], [0]) == {"missing": 1}  # an empty reply


def test_every_candidate_names_a_wording_of_the_task():
    from tango_jax.data.line_chains import WORDINGS

    for wording, lo, hi in _probe().CANDIDATES.values():
        assert wording in WORDINGS and 1 <= lo <= hi
