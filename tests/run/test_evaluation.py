"""The held-out evaluation scores every pass with the run's own answer check.

A sampler that answers every prompt with one known reply, on which the run's reward function
(`last_integer_reward`, configs/smollm2_addition.py's) and Math-Verify disagree: the greedy and
the sampled accuracy must both be the run's reward, never Math-Verify's."""

import dataclasses
from pathlib import Path

import pytest

from tango_jax.config.files import load_config_file
from tango_jax.config.roles import RoleConfig
from tango_jax.config.run import load_run_config
from tango_jax.data.datasets import Problem
from tango_jax.metrics.writer import PhaseTimer
from tango_jax.models.tokenizer import tiny_tokenizer
from tango_jax.rollout.base import Completion, FinishReason
from tango_jax.run import evaluation, feedback
from tango_jax.run.roles import Role
from tango_jax.tango.kind import Kind
from tango_jax.text.answer_check import RewardKind
from tango_jax.text.formats import StepSplit
from tango_jax.text.scoring_pool import OutcomeScorer
from tango_jax.text.templates import PromptStyle

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
REWARD = "tango_jax.data.addition:last_integer_reward"  # the last integer of the reply
# It restates the sum without answering it: Math-Verify evaluates "3 + 2" and accepts it.
REPLY = "To calculate 3 + 2, we simply add them together."
PROBLEM = Problem("What is 3 + 2? Answer with just the number.", "5", "test", "p0")


class FixedReply:
    """Answers every prompt with REPLY, n times."""

    weight_version = 0

    def __init__(self, tokenizer):
        self.ids = tuple(tokenizer(REPLY, add_special_tokens=False)["input_ids"])

    def generate(self, prompts, params):
        done = Completion(self.ids, REPLY, (0.0,) * len(self.ids), FinishReason.STOP, 0)
        return [[done] * params.n for _ in prompts]

    def close(self):
        pass


@pytest.fixture(scope="module")
def scorer():
    with OutcomeScorer(num_workers=1, timeout_s=10.0, reward_function=REWARD) as s:
        yield s


def test_the_checks_disagree_on_the_reply(scorer):
    """The premise: Math-Verify accepts REPLY, the run's reward does not."""
    by_kind = {}
    for kind in (RewardKind.MATH, RewardKind.CUSTOM):
        scored = scorer.score([REPLY], [PROBLEM.answer], kind, questions=[PROBLEM.question])
        by_kind[kind] = scored.scores[0]
    assert by_kind == {RewardKind.MATH: 1.0, RewardKind.CUSTOM: 0.0}


def test_greedy_and_sampled_passes_score_with_the_runs_reward(scorer):
    tok = tiny_tokenizer()
    cfg = dataclasses.replace(RoleConfig(), max_prompt_len=4096)
    generator = Role(Kind.GENERATOR, cfg, Path("."), None, tok, None, FixedReply(tok))
    settings = evaluation.EvalSettings(
        kind=RewardKind.CUSTOM,
        split=StepSplit.LINES,
        style=PromptStyle.FULL,
        timeout_s=10.0,
        sampled_seed=0,
        sampled_n=4,
    )
    metrics = evaluation.evaluate(generator, None, [PROBLEM], scorer, settings, timer=PhaseTimer())
    assert metrics["eval/generator/accuracy"] == 0.0
    assert metrics["eval/generator/sampled_accuracy"] == 0.0  # Math-Verify would give 1.0


def test_every_scoring_call_names_its_check(scorer):
    """No default: a pass that forgets the run's check fails at once instead of falling back."""
    with pytest.raises(TypeError, match="kind"):
        feedback.score_solutions(scorer, [PROBLEM], [[]], timeout_s=1.0)


def test_the_settings_carry_the_runs_check_and_split_to_every_pass():
    """EvalSettings.from_config: configs/smollm2_addition.py's reward function (CUSTOM), its
    line-split steps, templates, format weight and sampled pass, each from the config; the
    check and the split have no default, so a pass built without them fails at once."""
    cfg = load_run_config(load_config_file(CONFIGS / "smollm2_addition.py").get_config("tango"))
    settings = evaluation.EvalSettings.from_config(cfg)
    assert (settings.kind, settings.split) == (RewardKind.CUSTOM, StepSplit.LINES)
    assert settings.style == cfg.data.templates and settings.timeout_s == cfg.scorer_timeout_s
    assert settings.format_weight == cfg.algorithm.verifier_format_weight
    assert cfg.eval.sampled and settings.sampled_seed == cfg.seed
    assert settings.sampled_n == cfg.eval.sampled_n
    greedy_only = dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, sampled=False))
    assert evaluation.EvalSettings.from_config(greedy_only).sampled_seed is None
    with pytest.raises(TypeError, match="split"):
        evaluation.EvalSettings(kind=RewardKind.MATH, style=PromptStyle.FULL, timeout_s=1.0)
