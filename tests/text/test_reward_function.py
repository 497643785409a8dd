"""A run's own reward function (config data.reward): the pre-run check's one-line errors, and
scoring in the OutcomeScorer's worker processes with its time limit and error counts. The
end-to-end run with one is in tests/e2e/test_loop.py."""

from __future__ import annotations

import logging
from pathlib import Path

import custom_rewards
import pytest

from tango_jax.schema import ConfigError
from tango_jax.tango import rewards as R
from tango_jax.text import reward_function as F

HELPERS = Path(custom_rewards.__file__).parent


def test_load_returns_the_named_function():
    assert F.load("custom_rewards:last_number") is custom_rewards.last_number
    assert F.module_root("custom_rewards:last_number") == str(HELPERS)


@pytest.mark.parametrize(
    "spec, message",
    [
        ("custom_rewards", "must be 'module:function', e.g. 'my_rewards:exact_match'"),
        ("custom_rewards:", "must be 'module:function'"),
        ("no_such_module_xyz:f", "names module 'no_such_module_xyz', which is not found: put "
         "no_such_module_xyz.py in the directory the run starts from"),
        ("custom_rewards:missing", "names 'missing', which module 'custom_rewards' ("),
        # the fix names the module's own functions, never one it lacks
        ("custom_rewards:last_numbr", "does not define; did you mean "
         "'custom_rewards:last_number'?"),
        ("custom_rewards:zzz", "does not define; its functions: digit_share, every_failure, half, "
         "last_number, raises, returns_two, sleeps, two_arguments."),
        ("custom_rewards:NOT_A_FUNCTION", "names a int, not a function"),
        ("custom_rewards:two_arguments", "cannot be called as two_arguments(completion, answer, "
         "question)"),
    ],
)  # fmt: skip
def test_bad_names_fail_in_one_line_naming_the_field(spec, message):
    with pytest.raises(ConfigError) as e:
        F.load(spec)
    text = str(e.value)
    assert text.startswith(f"config.data.reward ({spec!r}) ") and message in text
    assert "\n" not in text


def test_a_module_that_fails_to_import_says_what_it_raised(tmp_path, monkeypatch):
    (tmp_path / "broken_rewards_xyz.py").write_text("import not_installed_pkg_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    expected = (
        "imports 'broken_rewards_xyz', which raised ModuleNotFoundError: No module named "
        "'not_installed_pkg_xyz'; fix it"
    )
    with pytest.raises(ConfigError, match=expected):
        F.load("broken_rewards_xyz:f")


@pytest.mark.parametrize("value", [2.0, -0.1, float("nan"), "1", None])
def test_checked_rejects_what_is_not_a_reward(value):
    with pytest.raises(ValueError, match="a reward is a number in \\[0, 1\\]"):
        F.checked(value)


def test_checked_accepts_numbers_and_bools():
    assert [F.checked(v) for v in (True, 0, 0.25, 1)] == [1.0, 0.0, 0.25, 1.0]


def test_the_pool_scores_with_the_function_in_its_workers():
    """The workers import custom_rewards from tests/helpers, which is on this process's
    sys.path only (conftest): they find it through the folder the trainer found it in."""
    with R.OutcomeScorer(num_workers=2, reward_function="custom_rewards:last_number") as pool:
        batch = pool.score(
            ["so 12", "13 or 12", "no number", "so 12"],
            ["12", "12", "12", "12"],
            R.RewardKind.CUSTOM,
            questions=["q", "q", "q", ""],  # the last: the function sees an empty question
        )
        assert batch.scores.tolist() == [1.0, 1.0, 0.0, 0.0]
        assert batch.errors == batch.timeouts == 0
        math_batch = pool.score(["\\boxed{12}"], ["12"])  # the built-in checks still work
        assert math_batch.scores.tolist() == [1.0]
        with pytest.raises(ValueError, match="one question per response"):
            pool.score(["1"], ["1"], R.RewardKind.CUSTOM)


@pytest.mark.parametrize(
    "spec, error, counted",
    [("custom_rewards:raises", "RuntimeError: cannot grade '7'", "errors"),
     ("custom_rewards:returns_two",
      "ScoreOutOfRange: returned 2.0; a reward is a number in [0, 1]", "out_of_range")],
)  # fmt: skip
def test_errors_score_zero_are_counted_and_the_first_is_logged(spec, error, counted, caplog):
    with (
        R.OutcomeScorer(num_workers=1, reward_function=spec) as pool,
        caplog.at_level(logging.WARNING, "tango_jax.text.scoring_pool"),
    ):
        batch = pool.score(["7", "7"], ["7", "7"], R.RewardKind.CUSTOM, questions=["q", "q"])
    assert batch.scores.tolist() == [0.0, 0.0] and getattr(batch, counted) == 2
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == 1 and error in logged[0]


def test_each_kind_of_failure_is_counted_apart_and_logged_once_with_its_value(caplog):
    """A function that raises on one answer, returns 2.0, a string and NaN on others: each
    kind scores 0, has its own count (and metric), and its first case is logged with the
    exception or the returned value, whatever kind came first."""
    answers = ["raise", "big", "text", "nan", "good", "big", "raise", "text"]
    with (
        R.OutcomeScorer(num_workers=1, reward_function="custom_rewards:every_failure") as pool,
        caplog.at_level(logging.WARNING, "tango_jax.text.scoring_pool"),
    ):
        batch = pool.score(answers, ["1"] * 8, R.RewardKind.CUSTOM, questions=["q"] * 8)
        stats = pool.stats
    assert batch.scores.tolist() == [0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]
    assert (batch.errors, batch.out_of_range, batch.not_a_number, batch.timeouts) == (2, 3, 2, 0)
    assert (stats.errors, stats.out_of_range, stats.not_a_number) == (2, 3, 2)
    metrics = batch.metrics("generator/reward")
    assert metrics["generator/reward/errors"] == 2.0
    assert metrics["generator/reward/out_of_range"] == 3.0  # 2.0 twice, and NaN
    assert metrics["generator/reward/not_a_number"] == 2.0
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == 3, logged
    assert "KeyError: 'no such case'" in logged[0]
    assert "returned 2.0; a reward is a number in [0, 1]" in logged[1]
    assert "returned 'yes'; a reward is a number in [0, 1]" in logged[2]
    assert all("metric" in line for line in logged)


def test_a_slow_function_times_out():
    with R.OutcomeScorer(
        num_workers=1, timeout_s=0.3, grace_s=0.5, reward_function="custom_rewards:sleeps"
    ) as pool:
        batch = pool.score(["1"], ["1"], R.RewardKind.CUSTOM, questions=["q"])
    assert batch.scores.tolist() == [0.0] and batch.timeouts == 1


def test_custom_kind_needs_the_function():
    with R.OutcomeScorer(num_workers=1) as pool, pytest.raises(ValueError, match="data.reward"):
        pool.score(["1"], ["1"], R.RewardKind.CUSTOM, questions=["q"])
