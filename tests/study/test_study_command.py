"""`python -m tango_jax.study`: the command of both studies, checked against what it wrote."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tango_jax.study.__main__ import main

ROOT = Path(__file__).resolve().parents[2]
LETTERS = ROOT / "docs" / "study" / "last_letter"
# docs/last_letter.md's summary command: every arm and seed of the committed study.
ARMS = ["grpo", "oracle", "oracle,alpha0=0.5", "tango", "fixed_verifier", "fixed_generator"]
ARMS += ["noisy_oracle,q=0.1", "noisy_oracle,q=0.2", "noisy_oracle,q=0.3"]


def test_the_letters_summary_is_rebuilt_byte_for_byte_from_its_committed_records(tmp_path):
    """The summary reads only the run records (docs/study/last_letter/runs/): no run directory
    is needed, and table.md, results.json and ranking.json come out as committed."""
    out = tmp_path / "summary"
    shutil.copytree(LETTERS / "runs", out / "runs")
    seeds = [str(s) for s in range(1, 11)]
    argv = ["--task", "last_letter", "--summary-only", "--seeds", *seeds, "--variants", *ARMS]
    assert main([*argv, "--root", str(tmp_path / "none"), "--summary-dir", str(out)]) == 0
    for name in ("table.md", "results.json", "ranking.json"):
        assert (out / name).read_bytes() == (LETTERS / name).read_bytes(), name


def test_bad_arguments_are_refused():
    with pytest.raises(SystemExit):
        main(["--task", "arith", "--length", "fast"])
    with pytest.raises(SystemExit, match="--variants: choose from"):
        main(["--variants", "nope", "--summary-only", "--root", "/nonexistent/x"])
