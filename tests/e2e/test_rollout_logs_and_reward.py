"""A short real run of the tiny config with a reward function of its own (data.reward) and the
rollout log on: the outcome rewards are the function's, in training and in the held-out
evaluation; the logged rows hold what each model wrote and trained on; a resumed run rewrites
the steps after its checkpoint identically and leaves one file per logged step; a bad reward
name stops the run in the pre-run checks with nothing written."""

from __future__ import annotations

import dataclasses
import math
import shutil

import custom_rewards
import pytest
from short_runs import short_config

from tango_jax.metrics.rollouts import RolloutLogConfig, logged_steps, read_rollouts
from tango_jax.metrics.writer import read_metrics
from tango_jax.parallel.mesh import make_mesh
from tango_jax.run.loop import TangoLoop
from tango_jax.schema import ConfigError

pytestmark = pytest.mark.slow

REWARD = "custom_rewards:digit_share"


def _config(run_dir, reward: str = REWARD):
    c = short_config(run_dir)
    return dataclasses.replace(
        c,
        data=dataclasses.replace(c.data, reward=reward),
        log_rollouts=RolloutLogConfig(every_steps=2, max_rows=16, max_chars=10_000),
    )


def _run(cfg):
    return TangoLoop(cfg, make_mesh(cfg.mesh)).run()


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("custom") / "run"
    _run(_config(run_dir))
    return run_dir


def test_outcome_rewards_come_from_the_function(run):
    rows = read_rollouts(run)
    for r in rows:
        expected = custom_rewards.digit_share(r["solution"], r["answer"], r["question"])
        assert r["outcome_reward"] == pytest.approx(expected, abs=1e-6)
        assert r["correct"] == (r["outcome_reward"] > 0.5)
    assert rows and all(0.0 < r["outcome_reward"] < 1.0 for r in rows)  # Math-Verify: 0 or 1
    metrics = read_metrics(run)
    for m in metrics:
        for prefix in ("generator", "verifier/solutions", "eval/generator"):
            for failure in ("errors", "out_of_range", "not_a_number"):
                assert m.get(f"{prefix}/reward/{failure}", 0.0) == 0.0
    key = "eval/generator/reward/mean"
    held_out = [m[key] for m in metrics if key in m]
    # the held-out set of 4 problems: Math-Verify's mean would be a multiple of 1/4
    assert held_out and all(0.0 < x < 1.0 and x * 4 != round(x * 4) for x in held_out)


def test_rollout_log_holds_both_models_outputs(run):
    assert logged_steps(run) == [1, 2, 4]  # step 1, then every 2nd of the 5
    by_step = {s: read_rollouts(run, [s]) for s in (1, 2, 4)}
    # step 1, the verifier's warm-up: one solution per problem, its n = 2 judgments trained on
    warm = by_step[1]
    assert [(r["phase"], r["problem"], r["sample"]) for r in warm] == [
        ("verifier_warmup", 0, 0),
        ("verifier_warmup", 1, 0),
    ]
    for r in warm:
        assert len(r["verifications"]) == 2 and "advantage" not in r
        # GRPO: a group's advantages are centred (and 0 when its rewards are equal)
        assert sum(v["advantage"] for v in r["verifications"]) == pytest.approx(0.0, abs=1e-4)
        for v in r["verifications"]:
            assert v["verdict"] in (0, 1, None) and set(v["step_judgments"]) <= {1, -1}
            assert v["text"] and 0.0 <= v["format_score"] <= 1.0
    # generator steps: 2 problems x 2 samples, each with the verifier's one feedback output
    for step in (2, 4):
        rows = by_step[step]
        assert [(r["problem"], r["sample"]) for r in rows] == [(0, 0), (0, 1), (1, 0), (1, 1)]
        assert {r["phase"] for r in rows} == {"generator"}
        for r in rows:
            assert r["prompt"].endswith(r["question"]) or r["question"] in r["prompt"]
            assert r["solution"] and r["finish_reason"] in ("stop", "length")
            assert r["response_tokens"] <= 24 and math.isfinite(r["advantage"])
            assert len(r["step_advantages"]) == r["num_steps"]
            (v,) = r["verifications"]
            if v["step_rewards"] is not None:  # ±1/K where the K judgments match the steps
                assert len(v["step_rewards"]) == r["num_steps"] == len(v["step_judgments"])
                assert {abs(x) for x in v["step_rewards"]} == {1 / r["num_steps"]}
        for a, b in (rows[0:2], rows[2:4]):  # the two samples of a problem share its prompt
            assert a["prompt"] == b["prompt"] and a["id"] == b["id"]
    assert by_step[4][0]["weight_version"] > by_step[2][0]["weight_version"]


def test_resume_rewrites_later_steps_identically(run, tmp_path):
    """A crash after step 2's checkpoint, simulated on a copy: step 4's file (from the crashed
    attempt) is removed, then written again by the resumed run, the same."""
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    for name in ("4", "5"):
        shutil.rmtree(copy / "checkpoints" / name)
    shutil.rmtree(copy / "hf")
    _run(_config(copy))
    assert logged_steps(copy) == [1, 2, 4]
    assert read_rollouts(copy) == read_rollouts(run)


def test_a_bad_reward_name_stops_before_anything_is_written(tmp_path):
    run_dir = tmp_path / "bad"
    with pytest.raises(ConfigError, match=r"config.data.reward \('custom_rewards:nope'\) names"):
        _run(_config(run_dir, reward="custom_rewards:nope"))
    assert not run_dir.exists()
