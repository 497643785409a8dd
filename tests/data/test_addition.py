"""The small-addition task of configs/smollm2_addition.py: its reward, its split, its files."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tango_jax.data import addition
from tango_jax.text import formats, reward_function


@pytest.mark.parametrize(
    "reply, reward",
    [
        ("55", 1.0),
        ("47 + 8 = 55", 1.0),  # the last integer counts
        ("The answer is 55.", 1.0),
        ("55 is 47 + 8", 0.0),
        ("1,055", 0.0),  # thousands commas are removed: 1055
        ("fifty-five", 0.0),
        ("", 0.0),
        ("-55", 0.0),
    ],
)
def test_last_integer_reward(reply, reward):
    assert addition.last_integer_reward(reply, "55", "What is 47 + 8?") == reward


def test_the_reward_loads_as_a_config_reward():
    fn = reward_function.load("tango_jax.data.addition:last_integer_reward")
    assert fn is addition.last_integer_reward


def test_held_out_problems_are_never_trained_on():
    train = addition.addition_problems(addition.TRAIN_AND_EVAL, "train")
    held = addition.addition_problems(addition.TRAIN_AND_EVAL, "eval")
    assert (len(train), len(held)) == (48, 16)
    assert not {p.question for p in train} & {p.question for p in held}
    assert held[0].question == "What is 3 + 2? Answer with just the number."
    assert held[0].answer == "5"


def test_shipped_files_are_the_module_output(tmp_path, monkeypatch):
    shipped = Path(addition.ASSETS)
    monkeypatch.setattr(addition, "ASSETS", tmp_path)
    addition.main()
    shipped_files = ("train.jsonl", "eval.jsonl", "generator_prompt.json", "verifier_sft.jsonl")
    for name in (*shipped_files, "verifier_sft_restated.jsonl"):
        assert (tmp_path / name).read_text() == (shipped / name).read_text(), name
    assert json.loads((tmp_path / "generator_prompt.json").read_text()) == {
        "template": "{question}"
    }


def test_verifier_sft_records_judge_every_line_by_its_truth():
    """Each training question in every reply shape, right and wrong; one judgment per line,
    each the reply's truth (every line of these shapes states the sum), the verdict the
    outcome, and the solution shown as the verifier sees line steps."""
    train = addition.addition_problems(addition.TRAIN_AND_EVAL, "train")
    records = addition.verifier_sft_records(train)
    assert len(records) == len(train) * len(addition.REPLY_SHAPES) * 2
    assert {r["question"] for r in records} == {p.question for p in train}
    verdicts = []
    for r in records:
        a, b = (int(x) for x in re.findall(r"\d+", r["question"]))
        steps = formats.split_steps(r["solution"])
        said = int(re.findall(r"\d+", steps[-1].text)[-1])
        v = formats.parse_verification(r["response"])
        truth = formats.CORRECT if said == a + b else formats.INCORRECT
        assert v.verdict == truth and len(v.step_judgments) == len(steps) in (1, 2)
        assert set(v.step_judgments) == {1 if truth == formats.CORRECT else -1}
        assert f"Analysis: {a} + {b} = {a + b}." in r["response"]
        assert 1 <= abs(said - (a + b)) <= 2 or said == a + b
        verdicts.append(v.verdict)
    assert verdicts.count(formats.CORRECT) == len(records) // 2


def test_restating_records_read_the_replys_answer_back_before_the_verdict():
    """With `restate`, every line's analysis reads the reply's answer back and compares it with
    the sum, worked by hand for 2 + 2: right, "as it says"; wrong, "not <answer>". The two extra
    shapes come in, and the set stays balanced between the verdicts."""
    train = addition.addition_problems(addition.TRAIN_AND_EVAL, "train")
    records = addition.verifier_sft_records(train, restate=True)
    shapes = len(addition.REPLY_SHAPES) + len(addition.RESTATED_EXTRA_SHAPES)
    assert len(records) == len(train) * shapes * 2
    first = [r for r in records if r["question"].startswith("What is 2 + 2?")]
    assert first[0]["solution"] == "<step>4</step>"
    assert "Step 1 Analysis: The reply says 4. 2 + 2 = 4, as it says." in first[0]["response"]
    wrong = int(re.findall(r"\d+", first[1]["solution"])[-1])
    assert wrong != 4
    assert f"The reply says {wrong}. 2 + 2 = 4, not {wrong}." in first[1]["response"]
    for r in records:
        v = formats.parse_verification(r["response"])
        said = int(re.findall(r"\d+", formats.split_steps(r["solution"])[-1].text)[-1])
        steps = formats.split_steps(r["solution"])
        assert r["response"].count(f"The reply says {said}.") == len(steps) == len(v.step_judgments)
    verdicts = [formats.parse_verification(r["response"]).verdict for r in records]
    assert verdicts.count(formats.CORRECT) == len(records) // 2
