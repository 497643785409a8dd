"""The small-addition task of configs/smollm2_addition.py: its reward, its split, its files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tango_jax.data import addition
from tango_jax.text import reward_function


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
    for name in ("train.jsonl", "eval.jsonl", "generator_prompt.json"):
        assert (tmp_path / name).read_text() == (shipped / name).read_text(), name
    assert json.loads((tmp_path / "generator_prompt.json").read_text()) == {
        "template": "{question}"
    }
