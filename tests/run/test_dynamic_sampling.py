"""Dynamic sampling in a step's collection (run/steps.collect, run/dynamic_sampling.py), on
stand-in rounds whose rewards are a fixed table per problem: which rounds are sampled on which
prompts, which groups the batch keeps, how far the data position moves, the metrics with the
option on and off; and its config errors."""

import dataclasses
import types

import numpy as np
import pytest
from short_runs import CONFIGS

from tango_jax.config.files import load_config_file
from tango_jax.config.roles import RoleConfig, RolloutSettings
from tango_jax.config.run import load_run_config
from tango_jax.data.datasets import Problem, PromptStream, StreamPosition
from tango_jax.rl.dynamic_sampling import Selection
from tango_jax.run import steps
from tango_jax.run.dynamic_sampling import StepBatches, merge_rounds, sampling_metrics
from tango_jax.run.feedback import RolloutRewards, Rollouts
from tango_jax.schema import ConfigError, to_dict
from tango_jax.tango.kind import Kind
from tango_jax.tango.schedule import Phase

PROBLEMS = [Problem(f"q{i}", "1", "toy", str(i)) for i in range(8)]
# Two prompts a step. The stream's order for seed 0 (PromptStream's PCG64 keys):
# epoch 0 batches [3, 2] [1, 6] [0, 7] [4, 5], epoch 1 [7, 4] [5, 1] ...
ORDER = [[3, 2], [1, 6], [0, 7], [4, 5], [7, 4], [5, 1]]
# Each problem's n = 2 rewards: its group. Equal (no signal): 0, 2, 4, 6, 7.
REWARDS = {
    "0": [1.0, 1.0],
    "1": [1.0, 0.0],
    "2": [1.0, 1.0],
    "3": [1.0, 0.0],
    "4": [0.0, 0.0],
    "5": [0.0, 1.0],
    "6": [0.0, 0.0],
    "7": [1.0, 1.0],
}


def _stream(index: int = 0) -> PromptStream:
    return PromptStream(PROBLEMS, 2, seed=0, position=StreamPosition(0, 0, index))


def _ctx(kind: Kind, **rollout):
    role = types.SimpleNamespace(
        name=kind.value, config=RoleConfig(rollout=RolloutSettings(n=2, **rollout))
    )
    return types.SimpleNamespace(generator=role, verifier=role)


@pytest.fixture
def rounds(monkeypatch):
    """Stand-ins for one sampling round (its problems, k solutions each, labelled by id) and
    its group rewards (REWARDS); returns the (round, problem ids) of every round sampled."""
    calls = []

    def one_round(ctx, problems, *, global_step, phase, timer, round_index):
        calls.append((round_index, [p.id for p in problems]))
        k = 2 if phase.kind is Kind.GENERATOR else 1  # solutions per problem
        sols = [f"{p.id}/{j}" for p in problems for j in range(k)]
        metrics = {"reward/mean": float(round_index), "reward/timeouts": 1.0}
        judged = [[f"judgment of {s}"] for s in sols]
        rewards = RolloutRewards(np.concatenate([REWARDS[p.id] for p in problems]), None)
        return Rollouts(global_step, phase, problems, [p.id for p in problems], sols, metrics,
                        [f"prompt of {s}" for s in sols], judged, rewards=rewards)  # fmt: skip

    monkeypatch.setattr(steps, "_collect_round", one_round)
    return calls


def _collect(ctx, stream, kind=Kind.GENERATOR):
    batches = StepBatches(stream)
    phase = Phase(kind, False)
    out = steps.collect(
        ctx, batches.first, more=batches.extra, global_step=3, phase=phase, timer=None
    )
    return out, batches


def test_off_one_round_and_the_share_of_equal_reward_groups_is_still_measured(rounds):
    stream = _stream()
    out, batches = _collect(_ctx(Kind.GENERATOR), stream)
    assert rounds == [(0, ["3", "2"])] and batches.drawn == 1
    assert [p.id for p in out.problems] == ["3", "2"]  # as collected: nothing dropped
    assert stream.position == StreamPosition(0, 0, 1)
    assert out.sampling == {
        "dynamic_sampling/zero_var_groups": 0.5,  # problem 2's group
        "dynamic_sampling/rounds": 1.0,
        "dynamic_sampling/padded_groups": 0.0,
    }


def test_generator_groups_fill_the_batch_and_the_position_counts_every_prompt(rounds):
    """Step 1: [3 K, 2 Z], then [1 K, 6 Z]: full after 2 rounds, problems 3 and 1. Step 2:
    [0 Z, 7 Z], [4 Z, 5 K], [7 Z, 4 Z] (epoch 1), [5 K, 1 K]: full after 4 rounds, problem 5
    twice (rounds 1 and 3); round 3's problem 1 is thrown away."""
    stream, ctx = _stream(), _ctx(Kind.GENERATOR, dynamic_sampling=True)
    out, _ = _collect(ctx, stream)
    assert rounds == [(0, ["3", "2"]), (1, ["1", "6"])]
    assert [p.id for p in out.problems] == ["3", "1"] and out.prompts == ["3", "1"]
    assert out.solutions == ["3/0", "3/1", "1/0", "1/1"]  # each group's n solutions together
    assert out.ver_prompts == [f"prompt of {s}" for s in out.solutions]
    assert out.judged == [[f"judgment of {s}"] for s in out.solutions]
    assert out.rewards.values.tolist() == REWARDS["3"] + REWARDS["1"]  # the groups' own rows
    assert out.reward_metrics == {"reward/mean": 0.5, "reward/timeouts": 2.0}  # over rounds
    assert out.sampling["dynamic_sampling/rounds"] == 2.0
    assert out.sampling["dynamic_sampling/zero_var_groups"] == 0.5
    assert stream.position == StreamPosition(0, 0, 2)  # 4 prompts consumed, 2 dropped

    rounds.clear()
    out, _ = _collect(ctx, stream)
    assert [ids for _, ids in rounds] == [["0", "7"], ["4", "5"], ["7", "4"], ["5", "1"]]
    assert [r for r, _ in rounds] == [0, 1, 2, 3]  # each round its own sampling seeds
    assert [p.id for p in out.problems] == ["5", "5"]
    assert out.sampling == {
        "dynamic_sampling/zero_var_groups": 5 / 8,
        "dynamic_sampling/rounds": 4.0,
        "dynamic_sampling/padded_groups": 0.0,
    }
    assert stream.position == StreamPosition(0, 1, 2)  # 8 more: into epoch 1


def test_at_the_round_cap_the_batch_is_topped_up_with_the_first_dropped_group(rounds):
    """From [0 Z, 7 Z] with 2 rounds at most: [4 Z, 5 K] adds one kept group; the batch is
    problem 0's group (the first dropped, as padding) then problem 5's, in consumption order."""
    stream = _stream(index=2)
    ctx = _ctx(Kind.GENERATOR, dynamic_sampling=True, dynamic_sampling_max_rounds=2)
    out, _ = _collect(ctx, stream)
    assert [p.id for p in out.problems] == ["0", "5"]
    assert out.sampling["dynamic_sampling/padded_groups"] == 1.0
    assert out.sampling["dynamic_sampling/zero_var_groups"] == 0.75
    assert stream.position == StreamPosition(0, 1, 0)  # the end of epoch 0


def test_verifier_groups_are_the_judgments_of_one_solution(rounds):
    """A verifier step samples one solution per problem; the group of solution i is its n
    judgments (the stand-in's rewards per problem). Same prompts as the generator case."""
    stream = _stream()
    out, _ = _collect(_ctx(Kind.VERIFIER, dynamic_sampling=True), stream, Kind.VERIFIER)
    assert [p.id for p in out.problems] == ["3", "1"]
    assert out.solutions == ["3/0", "1/0"]
    assert out.judged == [["judgment of 3/0"], ["judgment of 1/0"]]
    assert stream.position == StreamPosition(0, 0, 2)


def test_step_batches_draw_each_extra_batch_once():
    """A collection run again (a failed prefetch) gets the same extra prompts and does not
    move the stream further."""
    stream = _stream()
    batches = StepBatches(stream)
    assert [p.id for p in batches.first] == ["3", "2"]
    assert [p.id for p in batches.extra(2)] == ["0", "7"]  # draws rounds 1 and 2
    assert [p.id for p in batches.extra(1)] == ["1", "6"] and batches.drawn == 3
    assert stream.position == StreamPosition(0, 0, 3)
    with pytest.raises(ValueError, match="round 0 is `first`"):
        batches.extra(0)


def test_merge_and_metrics_of_a_selection_by_hand():
    a = Rollouts(1, Phase(Kind.VERIFIER, False), ["a", "b"], ["A", "B"], ["sa", "sb"],
                 {"reward/mean": 1.0}, None, [["ja"], ["jb"]])  # fmt: skip
    b = dataclasses.replace(a, problems=["c", "d"], solutions=["sc", "sd"], judged=[["jc"], ["jd"]])
    out = merge_rounds([a, b], Selection(((0, 1), (1, 0)), padded=0))
    assert out.problems == ["b", "c"] and out.solutions == ["sb", "sc"]
    assert out.ver_prompts is None and out.judged == [["jb"], ["jc"]]
    zero_var = [np.array([True, False]), np.array([False, True])]
    assert sampling_metrics(zero_var, Selection(((0, 1), (1, 0)), padded=1)) == {
        "dynamic_sampling/zero_var_groups": 0.5,
        "dynamic_sampling/rounds": 2.0,
        "dynamic_sampling/padded_groups": 1.0,
    }


def _tiny() -> dict:
    c = load_config_file(CONFIGS / "tiny_arith.py").get_config("tango")
    return to_dict(load_run_config(c))


@pytest.mark.parametrize(
    "role, fields, message",
    [
        (
            "generator",
            dict(dynamic_sampling=True, dynamic_sampling_max_rounds=1),
            r"^config.generator.rollout.dynamic_sampling_max_rounds \(1\) must be >= 2 with "
            r"dynamic_sampling=True .*; raise it, or set dynamic_sampling=False.$",
        ),
        (
            "verifier",
            dict(dynamic_sampling_max_rounds=0),
            r"^config.verifier.rollout.dynamic_sampling_max_rounds \(0\) must be >= 1.$",
        ),
        (
            "verifier",
            dict(dynamic_sampling=True, n=1),
            r"^config.verifier.rollout.n \(1\) must be >= 2 with dynamic_sampling=True .*; "
            "raise n, or set dynamic_sampling=False.$",
        ),
    ],
)
def test_bad_values_are_one_line_naming_field_value_and_fix(role, fields, message):
    d = _tiny()
    d[role]["rollout"] |= fields
    with pytest.raises(ConfigError, match=message):
        load_run_config(d)


def test_dynamic_sampling_of_a_role_that_is_never_trained_is_refused():
    d = _tiny()
    d["verifier"]["trainable"] = False  # the fixed-verifier ablation
    d["schedule"]["verifier_warmup_steps"] = 0
    d["verifier"]["rollout"]["dynamic_sampling"] = True
    with pytest.raises(
        ConfigError,
        match=r"^config.verifier.rollout.dynamic_sampling \(True\) acts in verifier steps.*"
        "set it False.$",
    ):
        load_run_config(d)
    d["verifier"]["trainable"] = True
    cfg = load_run_config(d)  # the verifier trains: accepted, the generator's still off
    assert cfg.verifier.rollout.dynamic_sampling and not cfg.generator.rollout.dynamic_sampling
