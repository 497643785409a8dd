"""The oracle arm on the line chains (configs/smollm2_line_chains.py:oracle): hand-written
replies, split into lines as the run splits them, get their true line labels from the task,
and those labels become ±1/K step rewards at the lines' ends exactly as a verifier's would."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tango_jax.config.files import load_config_file
from tango_jax.config.run import StepSource, load_run_config
from tango_jax.data import line_chains as lc
from tango_jax.data import step_truth
from tango_jax.data.synthetic import ArithProblem, Op
from tango_jax.data.tasks import task_of
from tango_jax.models.tokenizer import tiny_tokenizer
from tango_jax.rollout.base import Completion, FinishReason
from tango_jax.run.feedback import Solution, process_metrics, step_reward_arrays
from tango_jax.run.oracle_feedback import oracle_judged
from tango_jax.text import formats

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
# Start with 7. Add 5, then multiply by 2, then subtract 3: 12, 24, 21.
PROBLEM = lc.ChainQuestion(ArithProblem(7, ((Op.ADD, 5), (Op.MUL, 2), (Op.SUB, 3))))
# (reply, its lines' labels with the closing tokens judged, as the config has it, and without)
REPLIES = [
    ("7 + 5 = 12\n12 * 2 = 24\n24 - 3 = 21", (1, 1, 1, 1), (1, 1, 1)),
    # prose first, a slip at line 3, carried on: wrong from the slip, the closing too
    (
        "Start with 7.\n7 + 5 = 12\n12 * 2 = 25\n25 - 3 = 22\nThe result is 22.",
        (1, 1, -1, -1, -1, -1),
        (1, 1, -1, -1, -1),
    ),
    # stopped after two right lines: wrong at the closing (without it, at the last line)
    ("7 + 5 = 12\n\n12 * 2 = 24", (1, 1, -1), (1, -1)),
    # three right lines, then a wrong final number
    ("7 + 5 = 12\n12 * 2 = 24\n24 - 3 = 21\nThe result is 20.", (1, 1, 1, -1, -1), (1, 1, 1, -1)),
]


def _solution(tok, text: str) -> Solution:
    """A sampled reply: its tokens end with the EOS, which the text leaves out (`Role.generate`
    decodes without special tokens)."""
    ids = (*tok(text, add_special_tokens=False)["input_ids"], tok.eos_token_id)
    completion = Completion(ids, text, (0.0,) * len(ids), FinishReason.STOP, 0)
    problem = PROBLEM.to_problem()
    reward = lc.final_number_reward(text, problem.answer, problem.question)
    split = formats.StepSplit.LINES
    steps = tuple(formats.response_steps(text, split))
    return Solution(problem, completion, reward, formats.generator_format_score(text), steps, split)


@pytest.mark.parametrize("closing", [True, False])
def test_oracle_labels_hand_written_replies(closing):
    tok = tiny_tokenizer()
    sols = [_solution(tok, text) for text, _, _ in REPLIES]
    judged = oracle_judged(sols, flip_prob=0.0, seed=0, step=1, closing_step=closing)
    want = [with_closing if closing else without for _, with_closing, without in REPLIES]
    assert [row[0].verification.step_judgments for row in judged] == want
    assert [s.correct for s in sols] == [True, False, False, False]


def test_oracle_labels_become_step_rewards_at_line_ends():
    """±1/K' at the token that ends each line (K' = lines + the closing), the closing's on the
    reply's last token; every reply aligned."""
    tok = tiny_tokenizer()
    sols = [_solution(tok, text) for text, _, _ in REPLIES]
    judged = oracle_judged(sols, flip_prob=0.0, seed=0, step=1, closing_step=True)
    slots = 64
    values, mask, stats = step_reward_arrays(sols, judged, tok, slots)
    assert stats["step_rewards/aligned_frac"] == 1.0
    for i, (sol, (_, labels, _)) in enumerate(zip(sols, REPLIES)):
        where = np.flatnonzero(mask[i, 0])
        assert len(where) == len(labels)  # one reward per line and one for the closing
        assert values[i, 0, where].tolist() == pytest.approx([j / len(labels) for j in labels])
        assert where[-1] == len(sol.completion.token_ids) - 1
        for pos, step in zip(where[:-1], sol.steps):  # each line's reward at its last token
            decoded = tok.decode(sol.completion.token_ids[: pos + 1])
            assert decoded.rstrip().endswith(step.text[-1])


def test_the_oracle_arm_reads_the_runs_own_problems():
    """The oracle variant's config: line steps, the oracle with the closing judged; the task
    of its data labels the problems its stream deals (a reference reply is all right, a slip
    wrong at its line)."""
    module = load_config_file(CONFIGS / "smollm2_line_chains.py")
    cfg = load_run_config(module.get_config("oracle"))
    assert cfg.algorithm.step_source is StepSource.ORACLE and cfg.algorithm.oracle_closing_step
    assert cfg.data.step_split is formats.StepSplit.LINES and not cfg.verifier.enable
    task = task_of(cfg.data)
    for problem in task.stream(4, seed=cfg.data.seed, position=None).next_batch():
        chain = lc.parse_chain(problem.question)
        right = task.solution(lc.ChainQuestion(chain), True, 0)
        slipped = task.solution(lc.ChainQuestion(chain), False, 0)
        assert step_truth.first_error(problem, right.steps) == -1
        assert step_truth.first_error(problem, slipped.steps) == slipped.first_error


def test_the_oracles_own_labels_score_against_the_line_truth():
    """`process_metrics` reads the oracle's judgments as the predicted first wrong line. With
    the closing tokens judged there is one judgment more than lines, and the reply that stopped
    early (truth: the missing line, index 2) is marked at the closing: the oracle agrees with
    the truth it comes from (ProcessBench F1 1). Without the closing, it marks that reply's
    last written line (index 1): 2 of the 3 wrong replies and the right one located, F1 =
    2 * (2/3 * 1) / (2/3 + 1) = 0.8."""
    tok = tiny_tokenizer()
    sols = [_solution(tok, text) for text, _, _ in REPLIES]
    for closing, f1 in ((True, 1.0), (False, 0.8)):
        judged = oracle_judged(sols, flip_prob=0.0, seed=0, step=1, closing_step=closing)
        assert process_metrics(sols, judged)["process/step_f1"] == pytest.approx(f1)
