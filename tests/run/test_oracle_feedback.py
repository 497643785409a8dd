"""Oracle and noisy-oracle step labels on hand-worked cases, and proof that they enter exactly
the verifier's step-advantage path (same step-reward arrays, same normalisation, same α)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from advantage_inputs import assert_close
from numpy_reference import grpo_outcome, grpo_step

from tango_jax.config.run import StepSource, base_config, load_run_config
from tango_jax.data import last_letter as ll
from tango_jax.data.synthetic import Draws
from tango_jax.models.tokenizer import tiny_tokenizer
from tango_jax.rl.advantages import AdvantageEstimator, AdvantageOptions
from tango_jax.rollout.base import Completion, FinishReason
from tango_jax.run.feedback import Judgment, Solution, process_metrics, step_reward_arrays
from tango_jax.run.oracle_feedback import flipped, oracle_judged, oracle_judgments
from tango_jax.schema import ConfigError
from tango_jax.tango.process_advantages import AlphaSchedule, blended_advantages
from tango_jax.text import formats

PROBLEM = ll.LetterProblem(("kaz", "qup", "hjr"))


@pytest.mark.parametrize(
    "first_error, num_steps, want",
    [
        (-1, 3, (1, 1, 1)),
        (0, 3, (-1, -1, -1)),
        (1, 3, (1, -1, -1)),
        (2, 3, (1, 1, -1)),
        (3, 3, (1, 1, -1)),  # a missing step: wrong from the last written step
        (5, 2, (1, -1)),
        (-1, 0, ()),
        (0, 0, ()),
    ],
)
def test_oracle_judgments_by_hand(first_error, num_steps, want):
    assert oracle_judgments(first_error, num_steps) == want


def test_oracle_judgments_reject_bad_input():
    with pytest.raises(ValueError, match="first_error"):
        oracle_judgments(-2, 3)


def test_flips():
    j = (1, 1, -1, -1, 1)
    assert flipped(j, 0.0, Draws("t", 0)) == j
    assert flipped(j, 1.0, Draws("t", 0)) == tuple(-x for x in j)
    draws = Draws("t", 1)
    n, q = 20_000, 0.3
    flips = sum(flipped((1,), q, draws) == (-1,) for _ in range(n))
    # binomial: mean 6000, sd ~65; 5 sd either side
    assert abs(flips - n * q) < 5 * np.sqrt(n * q * (1 - q))


def _solution(tok, steps, answer):
    text = formats.render_generator_response(steps, answer)
    ids = tuple(tok(text, add_special_tokens=False)["input_ids"])
    c = Completion(ids, text, (0.0,) * len(ids), FinishReason.STOP, 0)
    reward = float(answer == PROBLEM.answer)
    return Solution(
        PROBLEM.to_problem(),
        c,
        reward,
        formats.generator_format_score(text),
        tuple(formats.split_steps(text)),
    )


# A group of 4 rollouts: right; wrong letter at step 1 (carried on); right letter but the
# string wrong at step 2; a missing last step (answer wrong, every written step right: the
# oracle marks the last written one).
ROLLOUTS = [
    (["kaz: z, z", "qup: p, zp", "hjr: r, zpr"], "zpr"),
    (["kaz: z, z", "qup: u, zu", "hjr: r, zur"], "zur"),
    (["kaz: z, z", "qup: p, zp", "hjr: r, zp"], "zp"),
    (["kaz: z, z", "qup: p, zp"], "zp"),
]
WANT = [(1, 1, 1), (1, -1, -1), (1, 1, -1), (1, -1)]


def test_oracle_judged_by_hand():
    tok = tiny_tokenizer()
    sols = [_solution(tok, s, a) for s, a in ROLLOUTS]
    judged = oracle_judged(sols, flip_prob=0.0, seed=0, step=1)
    assert [row[0].verification.step_judgments for row in judged] == WANT
    assert [row[0].verification.verdict for row in judged] == [1, 0, 0, 0]
    assert all(len(row) == 1 and row[0].completion is None for row in judged)
    noisy = oracle_judged(sols, flip_prob=1.0, seed=0, step=1)
    assert [r[0].verification.step_judgments for r in noisy] == [tuple(-j for j in w) for w in WANT]
    # the flips are a function of (seed, step, rollout): reproducible, and they differ by step
    a = oracle_judged(sols * 8, flip_prob=0.5, seed=3, step=1)
    assert a == oracle_judged(sols * 8, flip_prob=0.5, seed=3, step=1)
    assert a != oracle_judged(sols * 8, flip_prob=0.5, seed=3, step=2)


def test_oracle_needs_step_truth():
    tok = tiny_tokenizer()
    sol = _solution(tok, *ROLLOUTS[0])
    other = Solution(
        sol.problem.__class__("q", "1", "jsonl", "0"), *list(sol.__dict__.values())[1:]
    )
    with pytest.raises(ValueError, match="step_source='oracle' needs step truth"):
        oracle_judged([other], flip_prob=0.0, seed=0, step=1)


def test_oracle_enters_the_verifier_path_exactly():
    """The oracle's judgments give the same step-reward arrays as a verifier that wrote the same
    judgments, and the blended advantage equals the NumPy reference of Tango's formulas
    ((1 - α)·z-scored outcome + α·reverse cumsum of group-pooled z-scored ±1/K step rewards),
    with a hand-computed value."""
    tok = tiny_tokenizer()
    sols = [_solution(tok, s, a) for s, a in ROLLOUTS]
    oracle = oracle_judged(sols, flip_prob=0.0, seed=0, step=1)
    verifier = []
    for w in WANT:
        text = formats.render_verification(list(w), int(all(j == 1 for j in w)))
        v = formats.parse_verification(text)
        verifier.append([Judgment(Completion((), text, (), FinishReason.STOP, 0), v, 1.0, 1.8)])
    slots = 96
    r_o, m_o, stats_o = step_reward_arrays(sols, oracle, tok, slots)
    r_v, m_v, stats_v = step_reward_arrays(sols, verifier, tok, slots)
    np.testing.assert_array_equal(r_o, r_v)
    np.testing.assert_array_equal(m_o, m_v)
    assert stats_o == stats_v and stats_o["step_rewards/aligned_frac"] == 1.0
    # ±1/K at step ends: rollout 1 has K = 3, rollout 3 has K = 2
    assert sorted(r_o[1, 0][m_o[1, 0] > 0].tolist()) == pytest.approx([-1 / 3, -1 / 3, 1 / 3])
    assert r_o[3, 0][m_o[3, 0] > 0].tolist() == pytest.approx([0.5, -0.5])

    schedule = AlphaSchedule(total_steps=36, alpha0=0.1)
    weights = schedule.weights(0)
    assert weights == pytest.approx((0.9, 0.1))
    rewards = np.array([s.reward for s in sols], np.float32)
    mask = np.zeros((4, slots), np.float32)
    for i, s in enumerate(sols):
        mask[i, : len(s.completion.token_ids)] = 1
    a, _, _ = blended_advantages(
        jnp.asarray(rewards),
        jnp.asarray(mask),
        4,
        AdvantageOptions(AdvantageEstimator.GRPO),
        weights,
        jnp.asarray(r_o),
        jnp.asarray(m_o),
    )
    want = 0.9 * grpo_outcome(rewards, 4)[:, None] * mask + 0.1 * grpo_step(r_o, m_o, 4) * mask
    assert_close(np.asarray(a), want, tol=1e-5)
    # By hand, rollout 0 (right) at its first token: outcome z = (1 - 1/4) / sd([1,0,0,0]) =
    # 0.75 / 0.5 = 1.5; the 11 pooled step rewards (1/3 x6, -1/3 x3, 1/2, -1/2) have mean
    # 1/11 and sd s; the sum of its three z-scores is 3·(1/3 - 1/11)/s.
    pool = [1 / 3] * 6 + [-1 / 3] * 3 + [0.5, -0.5]
    assert np.mean(pool) == pytest.approx(1 / 11)
    s = np.std(pool, ddof=1)
    by_hand = 0.9 * 1.5 + 0.1 * 3 * (1 / 3 - np.mean(pool)) / (s + 1e-6)
    assert float(a[0, 0]) == pytest.approx(by_hand, rel=1e-5)


def _letters_config(**algorithm):
    c = base_config()
    c.data.source = "last_letter"
    c.generator.model.preset = "tiny-qwen2"
    c.verifier.model.preset = "tiny-qwen2"
    c.verifier.enable = False
    c.verifier.trainable = False
    c.schedule.verifier_warmup_steps = 0
    c.schedule.total_steps = 4
    for k, v in algorithm.items():
        c.algorithm[k] = v
    return c


def test_oracle_config_checks():
    cfg = load_run_config(_letters_config(step_source="oracle", oracle_flip_prob=0.2))
    assert cfg.algorithm.step_source is StepSource.ORACLE
    with pytest.raises(ConfigError, match="algorithm.step_source"):
        c = _letters_config(step_source="oracle")
        c.verifier.enable = True
        load_run_config(c)
    with pytest.raises(ConfigError, match="algorithm.oracle_flip_prob"):
        load_run_config(_letters_config(oracle_flip_prob=0.2))
    with pytest.raises(ConfigError, match="oracle_flip_prob"):
        load_run_config(_letters_config(step_source="oracle", oracle_flip_prob=1.5))


@pytest.mark.parametrize(
    "first_error, num_steps, correct, want",
    [
        (-1, 3, True, (1, 1, 1, 1)),
        (-1, 3, False, (1, 1, 1, -1)),  # every step right, the answer wrong: the closing is
        (0, 3, False, (-1, -1, -1, -1)),
        (1, 3, False, (1, -1, -1, -1)),
        (3, 3, False, (1, 1, 1, -1)),  # a missing step: wrong at the closing, not step 3
        (5, 2, False, (1, 1, -1)),
        (0, 0, False, (-1,)),
    ],
)
def test_oracle_closing_judgments_by_hand(first_error, num_steps, correct, want):
    got = oracle_judgments(first_error, num_steps, closing=True, correct=correct)
    assert got == want


def test_step_label_accuracy_by_hand():
    """The share of written steps judged as they are, over the judgments that become step
    rewards, and the informedness of those labels. Truth of ROLLOUTS' written steps: (R R R),
    (R W W), (R R W), (R R): 11 steps. The plain oracle marks the stopped-early rollout's last
    written step, a right one: 10 / 11; with the closing step it marks the closing instead:
    11 / 11. A verifier's judgment with the wrong count gives no step rewards and is not
    counted."""
    tok = tiny_tokenizer()
    sols = [_solution(tok, s, a) for s, a in ROLLOUTS]
    plain = process_metrics(sols, oracle_judged(sols, flip_prob=0.0, seed=0, step=1))
    assert plain["process/step_label_accuracy"] == pytest.approx(10 / 11)
    # informedness: 7 of the 8 right steps judged CORRECT, the 3 wrong ones all INCORRECT
    assert plain["process/step_label_informedness"] == pytest.approx(7 / 8 + 3 / 3 - 1)
    closing = oracle_judged(sols, flip_prob=0.0, seed=0, step=1, closing_step=True)
    m = process_metrics(sols, closing)
    assert m["process/step_label_accuracy"] == 1.0 and m["process/step_label_informedness"] == 1.0

    def said(*judgments):
        v = formats.parse_verification(formats.render_verification(judgments, 0))
        return Judgment(None, v, 1.0, 0.0)

    # rollout 0 (R R R): one judgment wrong, one of the wrong count; rollout 1 (R W W): all right
    rows = [[said(-1, 1, 1), said(1, 1)], [said(1, -1, -1)]]
    m = process_metrics(sols[:2], rows)
    assert m["process/step_label_accuracy"] == pytest.approx(5 / 6)
    assert m["process/step_label_informedness"] == pytest.approx(3 / 4 + 2 / 2 - 1)
    # labels that ignore the truth: every step CORRECT, or each step's label a coin
    assert process_metrics(sols, [[said(*[1] * len(s.steps))] for s in sols])[
        "process/step_label_informedness"
    ] == pytest.approx(0.0)
    # only right steps: informedness is undefined, not logged
    assert "process/step_label_informedness" not in process_metrics(sols[:1], [[said(1, 1, 1)]])


def test_oracle_closing_step_sits_on_the_last_token():
    """With the closing step, the stopped-early rollout keeps +1 on its written steps and gets
    -1 at its last token; every rollout has K + 1 rewards of ±1/(K + 1), the closing one at the
    last response token, and the tokens after the last `</step>` get that reward's z-score as
    their step advantage (0 without the closing step)."""
    tok = tiny_tokenizer()
    sols = [_solution(tok, s, a) for s, a in ROLLOUTS]
    judged = oracle_judged(sols, flip_prob=0.0, seed=0, step=1, closing_step=True)
    assert [row[0].verification.step_judgments for row in judged] == [
        (1, 1, 1, 1),
        (1, -1, -1, -1),
        (1, 1, -1, -1),
        (1, 1, -1),
    ]
    assert all(row[0].closing for row in judged)
    slots = 96
    r, m, stats = step_reward_arrays(sols, judged, tok, slots)
    assert stats["step_rewards/aligned_frac"] == 1.0 and stats["step_rewards/count"] == 15
    for i, s in enumerate(sols):
        last = len(s.completion.token_ids) - 1
        k = len(s.steps) + 1
        assert m[i, 0, last] == 1 and m[i, 0, last + 1 :].sum() == 0
        assert r[i, 0, last] == pytest.approx(judged[i][0].verification.step_judgments[-1] / k)
        assert m[i, 0].sum() == k
    assert r[3, 0][m[3, 0] > 0].tolist() == pytest.approx([1 / 3, 1 / 3, -1 / 3])
    mask = np.zeros((4, slots), np.float32)
    for i, s in enumerate(sols):
        mask[i, : len(s.completion.token_ids)] = 1
    step = grpo_step(r, m, 4)
    ends = [np.flatnonzero(m[i, 0]) for i in range(4)]
    # between the last </step> and the last token: the closing z-score alone
    z_last = step[3, ends[3][-1]]
    assert z_last < 0 and np.all(step[3, ends[3][-2] + 1 : ends[3][-1] + 1] == z_last)
    plain = oracle_judged(sols, flip_prob=0.0, seed=0, step=1)
    r0, m0, _ = step_reward_arrays(sols, plain, tok, slots)
    assert np.all(grpo_step(r0, m0, 4)[3, ends[3][-2] + 1 :] == 0)


def test_oracle_closing_config_check():
    cfg = load_run_config(_letters_config(step_source="oracle", oracle_closing_step=True))
    assert cfg.algorithm.oracle_closing_step
    with pytest.raises(ConfigError, match="algorithm.oracle_closing_step"):
        load_run_config(_letters_config(oracle_closing_step=True))
