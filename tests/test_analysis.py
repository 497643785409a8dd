"""The analysis helpers and the notebook that uses them, on a run directory written here."""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib
import numpy as np
import pytest

from tango_jax import analysis
from tango_jax.metrics import MetricsWriter

matplotlib.use("Agg")

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "analysis.ipynb"


def _write_run(path: Path, accuracy_gain: float) -> Path:
    with MetricsWriter(path, tensorboard=False) as w:
        w.write(0, {"eval/generator/accuracy": 0.2, "eval/verifier/f1": 0.5}, phase="eval")
        for step in range(1, 9):
            w.write(
                step,
                {
                    "generator/accuracy": 0.2 + accuracy_gain * step / 8,
                    "perf/step_s": 1.0,
                    "perf/generate_s": 0.5,
                },
                phase="generator",
            )
        w.write(
            9,
            {"eval/generator/accuracy": 0.2 + accuracy_gain, "eval/verifier/f1": float("nan")},
            phase="generator",
        )
    return path


def test_eval_table_first_and_last(tmp_path):
    runs = analysis.load_runs({"a": _write_run(tmp_path / "a", 0.3)})
    table = analysis.eval_table(
        runs, ["eval/generator/accuracy", "eval/verifier/f1", "eval/verifier/verdict_accuracy"]
    )
    assert table["a"]["eval/generator/accuracy"] == pytest.approx((0.2, 0.5))
    assert table["a"]["eval/verifier/f1"] == (0.5, 0.5)  # the non-finite (null) value is skipped
    assert all(math.isnan(x) for x in table["a"]["eval/verifier/verdict_accuracy"])
    assert "0.200 -> 0.500" in analysis.format_table(table)


def test_before_after_lines_report_first_and_last_evaluation(tmp_path):
    with MetricsWriter(tmp_path / "r", tensorboard=False) as w:
        w.write(
            0, {"eval/generator/sampled_accuracy": 0.25, "eval/verifier/step_f1": 0.1}, phase="eval"
        )
        w.write(5, {"generator/accuracy": 0.4}, phase="generator")
        w.write(
            9, {"eval/generator/sampled_accuracy": 0.5, "eval/verifier/step_f1": 0.4}, phase="eval"
        )
    lines = analysis.before_after_lines(analysis.load_runs({"r": tmp_path / "r"})["r"])
    assert lines == [
        "generator accuracy, sampled at the training T: 0.250 (step 0) -> 0.500 (step 9), +0.250",
        "verifier step F1 (first INCORRECT step vs first error): 0.100 (step 0) -> 0.400 "
        "(step 9), +0.300",
    ]


def test_smooth_is_a_trailing_mean():
    np.testing.assert_allclose(
        analysis.smooth(np.array([1.0, 3.0, 5.0, 7.0]), 2), [1.0, 2.0, 4.0, 6.0]
    )


def test_notebook_runs_end_to_end(tmp_path, monkeypatch):
    monkeypatch.setenv("TANGO_RUN", str(_write_run(tmp_path / "tango", 0.3)))
    monkeypatch.setenv("GRPO_RUN", str(_write_run(tmp_path / "grpo", 0.1)))
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    namespace: dict = {}
    for cell in cells:
        if cell["cell_type"] == "code":
            exec(compile("".join(cell["source"]), str(NOTEBOOK), "exec"), namespace)
    assert set(namespace["runs"]) == {"tango", "grpo"}
