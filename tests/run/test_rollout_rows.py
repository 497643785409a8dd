"""The rollout log's rows (tango_jax.run.rollout_rows) on hand-built steps: which solutions are
logged, the advantage read at each step's closing token, and each verification's advantage in
verifier steps. A real run's rows: tests/e2e/test_loop.py."""

from __future__ import annotations

import numpy as np

from tango_jax.data.datasets import Problem
from tango_jax.models.tokenizer import tiny_tokenizer
from tango_jax.rollout.base import Completion, FinishReason, Prompt
from tango_jax.run import rollout_rows
from tango_jax.run.feedback import Judgment, Rollouts, Solution
from tango_jax.tango.kind import Kind
from tango_jax.tango.schedule import Phase
from tango_jax.text import formats

TEXT = "<think><step>2 + 3 = 5</step><step>5 * 2 = 10</step></think><answer>\\boxed{10}</answer>"


def _solution(tok, problem: Problem, text: str, reward: float) -> Solution:
    ids = tuple(tok(text, add_special_tokens=False)["input_ids"])
    c = Completion(ids, text, (0.0,) * len(ids), FinishReason.STOP, 3)
    steps = tuple(formats.split_steps(text))
    return Solution(problem, c, reward, formats.generator_format_score(text), steps)


def _judgment(judgments, verdict) -> Judgment:
    text = formats.render_verification(list(judgments), verdict)
    return Judgment(Completion((1,), text, (0.0,), FinishReason.STOP, 2),
                    formats.parse_verification(text), 1.0, 1.8)  # fmt: skip


def _closing_token(tok, ids, nth) -> int:
    """Independent reference: the first token whose prefix decodes to the nth `</step>`."""
    return next(i - 1 for i in range(1, len(ids) + 1) if tok.decode(ids[:i]).count("</step>") > nth)


def _rollouts(tok, kind: Kind, group: int, problems: int, judged_per_solution: int) -> Rollouts:
    probs = [Problem(f"What is {i}?", "10", "test", str(i)) for i in range(problems)]
    sols = [
        _solution(tok, p, TEXT if j == 0 else "no steps, \\boxed{9}", 1.0 if j == 0 else 0.0)
        for p in probs
        for j in range(group)
    ]
    judged = [[_judgment([1, -1], 0)] * judged_per_solution for _ in sols]
    prompts = [Prompt((1, 2), f"User: {p.question}") for p in probs]
    return Rollouts(5, Phase(kind, False), probs, prompts, sols, {}, None, judged)


def test_generator_rows_keep_whole_groups_and_read_advantages_at_step_ends():
    tok = tiny_tokenizer()
    r = _rollouts(tok, Kind.GENERATOR, group=2, problems=3, judged_per_solution=1)
    t = 64
    adv = np.arange(6 * t, dtype=np.float32).reshape(6, t)  # a distinct value per token
    rewards_b = np.asarray([0.9, 0.1] * 3, np.float32)
    rows = rollout_rows.generator_rows(
        r, rewards_b, adv, tok, group=2, with_step_advantages=True, max_rows=5
    )
    assert [(x["problem"], x["sample"]) for x in rows] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    first = rows[0]
    ids = list(r.solutions[0].completion.token_ids)
    ends = [_closing_token(tok, ids, k) for k in range(2)]
    assert first["step_advantages"] == [float(adv[0, e]) for e in ends]
    assert first["advantage"] == float(adv[0, 0]) and first["reward"] == np.float32(0.9)
    assert rows[1]["step_advantages"] == [] and rows[1]["num_steps"] == 0
    assert first["phase"] == "generator" and first["prompt"] == "User: What is 0?"
    assert (first["outcome_reward"], first["correct"], first["weight_version"]) == (1.0, True, 3)
    (v,) = first["verifications"]
    assert (v["step_judgments"], v["verdict"], v["step_rewards"]) == ([1, -1], 0, [0.5, -0.5])
    assert rows[1]["verifications"][0]["step_rewards"] is None  # 2 judgments, 0 steps
    # a group larger than max_rows: its first rows
    big = rollout_rows.generator_rows(
        r, rewards_b, adv, tok, group=2, with_step_advantages=False, max_rows=1
    )
    assert [(x["problem"], x["sample"]) for x in big] == [(0, 0)]
    assert "step_advantages" not in big[0]


def test_verifier_rows_give_each_verification_its_advantage():
    tok = tiny_tokenizer()
    r = _rollouts(tok, Kind.VERIFIER, group=1, problems=3, judged_per_solution=2)
    adv = [0.5, -0.5, 1.0, -1.0, 0.0, 0.0]  # solution-major, 2 per solution
    rows = rollout_rows.verifier_rows(r, adv, max_rows=2)
    assert [(x["problem"], x["sample"]) for x in rows] == [(0, 0), (1, 0)]
    advantages = [[v["advantage"] for v in x["verifications"]] for x in rows]
    assert advantages == [[0.5, -0.5], [1.0, -1.0]]
    assert "advantage" not in rows[0] and rows[0]["phase"] == "verifier"
