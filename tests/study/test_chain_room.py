"""The chain-room measurement (study/chain_room.py) on hand-written judged rows: accuracies per
pass and per chain length, groups with no right sample, and the first-error histogram."""

from __future__ import annotations

import subprocess
import sys

from tango_jax.study.chain_room import room


def _row(k: int, right: bool, first: int | None) -> dict:
    return {"k": k, "right": right, "first": first}


def test_room_counts_accuracies_groups_and_first_errors():
    greedy = [_row(5, True, -1), _row(6, False, 2)]
    sampled = [  # two samples per problem: problem 1 (5 steps), problem 2 (6 steps)
        _row(5, True, -1),
        _row(5, False, 0),  # first step wrong: position 1
        _row(6, False, 2),  # third step wrong: position 3
        _row(6, False, -1),  # every step right, the answer or the count not: "other"
    ]
    out = room(greedy, sampled, sampled_n=2)
    assert out["greedy_accuracy"] == 0.5 and out["sampled_accuracy"] == 0.25
    assert out["by_steps"] == {
        5: {"greedy": 1.0, "sampled": 0.5, "sampled_answers": 2},
        6: {"greedy": 0.0, "sampled": 0.0, "sampled_answers": 2},
    }
    assert out["all_wrong_groups"] == 0.5  # problem 2's group has no right sample
    assert list(out["first_error_histogram"].items()) == [("1", 1), ("3", 1), ("other", 1)]
    assert out["wrong_sampled"] == 3


def test_positions_sort_as_numbers_and_other_comes_last():
    sampled = [_row(12, False, f) for f in (10, None, 1, 1)]
    out = room([_row(12, False, 1)], sampled, sampled_n=4)
    assert list(out["first_error_histogram"]) == ["2", "11", "other"]
    assert out["first_error_histogram"]["2"] == 2 and out["all_wrong_groups"] == 1.0


def test_it_runs_as_a_module_and_needs_a_config_and_a_checkpoint():
    run = [sys.executable, "-m", "tango_jax.study.chain_room"]
    usage = subprocess.run(run, capture_output=True, text=True, timeout=120)
    assert usage.returncode == 2
    assert "the following arguments are required: --config, --generator" in usage.stderr
    assert usage.stderr.startswith("usage: python -m tango_jax.study.chain_room")
