"""The label ceiling (study/label_ceiling.py) on hand-worked line-chain rollouts, and on a
committed record against the informedness its run logged."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tango_jax.data.line_chains import SOURCE, ChainQuestion
from tango_jax.data.synthetic import ArithProblem, Op
from tango_jax.study.label_ceiling import ceiling, measure
from tango_jax.text.formats import StepSplit

CHAIN = ChainQuestion(ArithProblem(9, ((Op.ADD, 3), (Op.SUB, 3))))  # 9 + 3 = 12, 12 - 3 = 9
RECORD = Path(__file__).parents[2] / "docs/claim2_real/runs/tango_s0_set1"


def _row(solution: str, correct: bool, verifications=()) -> dict:
    return {
        "question": CHAIN.question,
        "answer": str(CHAIN.answer),
        "source": SOURCE,
        "id": CHAIN.id,
        "solution": solution,
        "correct": correct,
        "verifications": [
            {"step_judgments": labels, "verdict": verdict, "closing": False}
            for labels, verdict in verifications
        ],
    }


def test_hand_worked_label_sets():
    right = _row("9 + 3 = 12\n12 - 3 = 9", True, [([1, 1], 1)])
    # second line wrong; one verification labels it, the other writes one label and says right
    wrong = _row("9 + 3 = 12\n\n12 - 3 = 8", False, [([1, -1], 0), ([1], 1)])
    other = dict(right, source="gsm8k")  # no step truth: left out
    out = ceiling([right, wrong, other], StepSplit.LINES)
    assert out["replies"] == 2
    assert out["logged"] == pytest.approx(1.0)  # the one-label verification is not accepted
    # every line gets the outcome: right lines 2 of 3 labelled CORRECT, the wrong line INCORRECT
    assert out["outcome_copied"] == pytest.approx(2 / 3 + 1 - 1)
    # each verdict on every line: right lines 3 of 4 CORRECT, wrong lines 1 of 2 INCORRECT
    assert out["verdict_copied"] == pytest.approx(3 / 4 + 1 / 2 - 1)


def test_undefined_with_one_kind_of_line():
    out = ceiling([_row("9 + 3 = 12\n12 - 3 = 9", True, [([1, 1], 1)])], StepSplit.LINES)
    assert out == {"replies": 1, "logged": None, "outcome_copied": None, "verdict_copied": None}


def test_logged_labels_equal_the_runs_metric_on_a_record():
    logged = {}
    for line in (RECORD / "metrics.jsonl").read_text().splitlines():
        m = json.loads(line)
        key = "generator/feedback/process/step_label_informedness"
        if key in m:
            logged[m["step"]] = m[key]
    table = measure(RECORD)
    assert [r["step"] for r in table] == sorted(logged)
    for r in table:
        assert r["logged"] == pytest.approx(logged[r["step"]], abs=1e-12)
        assert r["outcome_copied"] > 0.3  # a perfect verdict copied down: about the gate's bar


def test_it_runs_as_a_module_and_refuses_a_record_without_rollouts(tmp_path):
    run = [sys.executable, "-m", "tango_jax.study.label_ceiling", str(tmp_path)]
    out = subprocess.run(run, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "has no rollouts/" in out.stderr
