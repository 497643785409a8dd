"""The verifier's balanced probe (run/verifier_probe.py), on hand-worked examples.

Scripted samplers stand in for the models so that every reply and every verdict is known: the
generator answers "2 + 3 = 5" or "2 + 3 = 6" by a rule of (seed, sample), the verifier with
verdicts and step labels from a list. The replies are scored by the run's real answer check
(`last_integer_reward` in the scoring pool)."""

import dataclasses
import logging
from pathlib import Path

import pytest

from tango_jax.config.roles import RoleConfig
from tango_jax.data.datasets import Problem
from tango_jax.models.tokenizer import tiny_tokenizer
from tango_jax.rollout.base import Completion, FinishReason
from tango_jax.run import feedback
from tango_jax.run.roles import Role
from tango_jax.run.verifier_probe import (
    FILE,
    SEED_OFFSET,
    VerifierProbe,
    answer_step,
    informedness,
    one_sided,
)
from tango_jax.tango.kind import Kind
from tango_jax.text import formats, templates
from tango_jax.text.answer_check import RewardKind
from tango_jax.text.scoring_pool import OutcomeScorer

REWARD = "tango_jax.data.addition:last_integer_reward"
PROBLEMS = [Problem(f"What is {a} + 3?", str(a + 3), "test", f"p{a}") for a in (2, 4, 6)]
STYLE = templates.PromptStyle.COMPACT


def _completion(tok, text):
    ids = tuple(tok(text, add_special_tokens=False)["input_ids"])
    return Completion(ids, text, (0.0,) * len(ids), FinishReason.STOP, 0)


class RuleGenerator:
    """Sample j of problem i under seed s is right when `right(s, i, j)`: the reply is
    "Let me add.\\n<a> + 3 = <sum>" with the sum off by one when it is wrong."""

    weight_version = 0

    def __init__(self, tok, right):
        self.tok, self.right, self.calls = tok, right, []

    def generate(self, prompts, params):
        self.calls.append(params.seed)
        out = []
        for i, p in enumerate(PROBLEMS[: len(prompts)]):
            a = int(p.question.split()[2])
            row = []
            for j in range(params.n):
                total = a + 3 + (0 if self.right(params.seed, i, j) else 1)
                row.append(_completion(self.tok, f"Let me add.\n{a} + 3 = {total}"))
            out.append(row)
        return out

    def close(self):
        pass


class ListVerifier:
    """Answers the i-th prompt with the i-th text of `texts`."""

    weight_version = 0

    def __init__(self, tok, texts):
        self.tok, self.texts = tok, texts

    def generate(self, prompts, params):
        assert params.temperature == 0.0 and params.n == 1  # the probe is judged greedily
        return [[_completion(self.tok, t)] for t in self.texts[: len(prompts)]]

    def close(self):
        pass


@pytest.fixture(scope="module")
def scorer():
    with OutcomeScorer(num_workers=1, timeout_s=10.0, reward_function=REWARD) as s:
        yield s


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def _role(kind, tok, sampler):
    cfg = dataclasses.replace(RoleConfig(), max_prompt_len=4096)
    return Role(kind, cfg, Path("."), None, tok, None, sampler)


def _score(scorer):
    def score(problems, outs):
        return feedback.score_solutions(
            scorer, problems, outs, timeout_s=10.0, kind=RewardKind.CUSTOM, split="lines"
        )[0]

    return score


def test_half_right_half_wrong_spread_over_the_problems(scorer, tok):
    # Round 0 (seed 7 + offset): only sample 0 of each problem is right; 6 asked: 2 a problem.
    gen = RuleGenerator(tok, lambda seed, i, j: j == 0)
    probe = VerifierProbe.build(
        _role(Kind.GENERATOR, tok, gen), PROBLEMS, _score(scorer), size=6, seed=7, style=STYLE
    )
    assert gen.calls == [7 + SEED_OFFSET]  # one round was enough
    assert probe.counts == (3, 3)
    assert [s.correct for s in probe.solutions] == [True] * 3 + [False] * 3
    # sample-major: each problem once among the right ones, and once among the wrong ones
    assert [s.problem.id for s in probe.solutions] == ["p2", "p4", "p6"] * 2


def test_more_rounds_for_the_rarer_class_then_a_warning(scorer, tok, caplog):
    gen = RuleGenerator(tok, lambda seed, i, j: (seed - SEED_OFFSET, i, j) == (1, 0, 0))
    with caplog.at_level(logging.WARNING):
        probe = VerifierProbe.build(
            _role(Kind.GENERATOR, tok, gen), PROBLEMS, _score(scorer), size=6, seed=0, style=STYLE
        )
    assert gen.calls == [SEED_OFFSET + r for r in range(4)]  # every round: one right reply
    assert probe.counts == (1, 3)
    assert "1 right and 3 wrong replies where 3 of each were asked for" in caplog.text


def test_saved_replies_are_read_back_and_rescored(scorer, tok, tmp_path):
    gen = RuleGenerator(tok, lambda seed, i, j: i != 1)
    role = _role(Kind.GENERATOR, tok, gen)
    built = VerifierProbe.load_or_build(
        tmp_path, role, PROBLEMS, _score(scorer), size=4, seed=0, style=STYLE
    )
    assert (tmp_path / FILE).exists() and not list(tmp_path.glob("*.tmp"))
    again = VerifierProbe.load_or_build(
        tmp_path, role, PROBLEMS, _score(scorer), size=4, seed=99, style=STYLE
    )
    assert len(gen.calls) == 1  # the second run read the file: no sampling
    assert [(s.problem.id, s.completion.text, s.correct) for s in again.solutions] == [
        (s.problem.id, s.completion.text, s.correct) for s in built.solutions
    ]
    assert [len(s.steps) for s in again.solutions] == [2] * 4  # split into lines again


def test_the_measures_by_hand(scorer, tok):
    """Four replies (2 right, 2 wrong), verdicts CORRECT, CORRECT, CORRECT, unparsable: recall
    of the right ones 1, of the wrong ones 1/2, balanced accuracy 0.75, 3/4 called CORRECT.
    The answer line's labels (step 2 of 2; the third verification has one step judgment only,
    so it is left out): right, right / wrong -> wrong, so informedness 1 + 1 - 1 = 1."""
    gen = RuleGenerator(tok, lambda seed, i, j: j == 0)
    probe = VerifierProbe.build(
        _role(Kind.GENERATOR, tok, gen), PROBLEMS[:2], _score(scorer), size=4, seed=0, style=STYLE
    )
    assert [s.correct for s in probe.solutions] == [True, True, False, False]
    texts = [
        formats.render_verification([1, 1], formats.CORRECT),
        formats.render_verification([-1, 1], formats.CORRECT),
        formats.render_verification([1], formats.CORRECT),  # one label for two lines
        # step labels, but no verdict: unparsable
        formats.render_verification([1, -1], formats.INCORRECT).split("<final_verification>")[0],
    ]
    verifier = _role(Kind.VERIFIER, tok, ListVerifier(tok, texts))
    m = probe.measure(verifier, style=STYLE, format_weight=0.8)
    assert m["eval/probe/size"] == 4.0
    assert m["eval/probe/balanced_accuracy"] == 0.75
    assert m["eval/probe/predicted_correct"] == 0.75
    assert m["eval/probe/parse_fail"] == 0.25
    assert m["eval/probe/answer_label_aligned"] == 0.75
    assert m["eval/probe/answer_label_informedness"] == 1.0
    assert one_sided(m) is None


def test_answer_step_and_informedness_by_hand():
    sol = feedback.Solution(
        PROBLEMS[0],
        Completion((), "", (), FinishReason.STOP, 0),
        1.0,
        1.0,
        tuple(formats.split_lines("I add.\n2 + 3 = 5\nDone!")),
        "lines",
    )
    assert answer_step(sol) == 1  # the last line with a digit, not "Done!"
    assert informedness([True, True, False, False], [True, False, False, False]) == 0.5
    assert informedness([True, True, False, False], [True, True, True, True]) == 0.0
    assert informedness([True, True], [True, False]) is None  # one class only


def test_a_one_sided_verifier_is_named():
    m = {"eval/probe/predicted_correct": 0.125, "eval/probe/size": 64.0}
    assert one_sided(m) == (
        "the verifier calls 88% of the 64 balanced probe replies INCORRECT or unparsable: a "
        "one-sided verifier (more than 80% one class; docs/verifier.md)"
    )
    assert one_sided({"eval/probe/predicted_correct": 0.8, "eval/probe/size": 8.0}) is None
    assert one_sided({}) is None
