"""The line chains of configs/smollm2_line_chains.py: the line reader, the first wrong line, the
reward, the problems and the task's registration, on hand-worked examples."""

from __future__ import annotations

import pytest

from tango_jax.data import line_chains as lc
from tango_jax.data import step_truth
from tango_jax.data.prompts import DataConfig, DataSource
from tango_jax.data.synthetic import ArithConfig, ArithProblem, Op, apply_op
from tango_jax.data.tasks import by_source, task_of
from tango_jax.text import formats, reward_function
from tango_jax.text.templates import PromptStyle

# Start with 7. Add 5, then multiply by 2, then subtract 3: 12, 24, 21.
CHAIN = ArithProblem(7, ((Op.ADD, 5), (Op.MUL, 2), (Op.SUB, 3)))
RIGHT = ["7 + 5 = 12", "12 * 2 = 24", "24 - 3 = 21"]


@pytest.mark.parametrize(
    "line, equations, unreadable",
    [
        ("7 + 5 = 12", [(7, Op.ADD, 5, 12)], False),
        ("12 × 2 = 24", [(12, Op.MUL, 2, 24)], False),
        ("12 x 2 = 24", [(12, Op.MUL, 2, 24)], False),
        ("Step 2: $12 \\times 2 = 24$", [(12, Op.MUL, 2, 24)], False),
        ("24 − 3 = 21", [(24, Op.SUB, 3, 21)], False),
        ("- 24 - 3 = 21", [(24, Op.SUB, 3, 21)], False),  # a list marker, not a minus
        ("3. **24 - 3 = 21**", [(24, Op.SUB, 3, 21)], False),
        ("7+5=12", [(7, Op.ADD, 5, 12)], False),
        ("2 - 5 = -3", [(2, Op.SUB, 5, -3)], False),
        ("7 + 5 = 12 * 2 = 24", [(7, Op.ADD, 5, 12), (12, Op.MUL, 2, 24)], False),  # chained
        ("Add 5: 7 + 5 = 12.", [(7, Op.ADD, 5, 12)], False),  # a full stop after the result
        ("12 * 2 = 24.5", [], True),  # not an integer
        ("(7 + 5) * 2 = 24", [], True),  # two operations in one expression
        ("7 + 5 + 3 = 15", [], True),
        ("x = 7", [], True),
        ("Start with 7.", [], False),
        ("", [], False),
    ],
)
def test_read_line(line, equations, unreadable):
    read = lc.read_line(line)
    assert [(e.a, e.op, e.b, e.c) for e in read.equations] == equations
    assert read.unreadable is unreadable


@pytest.mark.parametrize(
    "lines, first",
    [
        (RIGHT, -1),
        (["Start with 7.", *RIGHT, "The result is 21."], -1),  # prose is not judged
        (["7 + 5 = 12 * 2 = 24 - 3 = 21"], -1),  # three equations on one line
        (["5 + 7 = 12", "2 * 12 = 24", "24 - 3 = 21"], -1),  # + and * in either order
        (["7 + 5 = 13", "13 * 2 = 26", "26 - 3 = 23"], 0),  # a slip, carried on correctly
        (["7 + 5 = 12", "12 * 2 = 25", "25 - 3 = 22"], 1),
        (["7 + 5 = 12", "12 * 2 = 24", "24 - 3 = 20"], 2),
        (["7 + 5 = 12", "12 * 2 = 25", "24 - 3 = 21"], 1),  # the first mistake counts
        (["7 + 5 = 12", "13 * 2 = 26", "26 - 3 = 23"], 1),  # not the previous line's result
        (["7 + 5 = 12", "12 + 2 = 14", "14 - 3 = 11"], 1),  # the wrong operation
        (["7 + 5 = 12", "12 * 3 = 36", "36 - 3 = 33"], 1),  # the wrong operand
        (["3 - 24 = -21"], 0),  # - does not commute
        (["7 + 5 = 12", "12 * 2 = 24"], 2),  # a missing step: the number of lines
        (["Adding 5 gives 12.", "12 * 2 = 24", "24 - 3 = 21"], 1),  # words are not read
        ([*RIGHT, "21 + 1 = 22"], 3),  # an extra operation
        ([*RIGHT, "The result is 22."], 3),  # the last number is not the answer
        (["(7 + 5) * 2 = 24", "24 - 3 = 21"], 0),  # two operations in one line
        (["I cannot do that."], 1),
        ([], 0),
    ],
)
def test_first_wrong_line_by_hand(lines, first):
    assert lc.first_error(CHAIN, lines) == first


@pytest.mark.parametrize(
    "reply, reward",
    [
        ("\n".join(RIGHT), 1.0),
        ("7 + 5 = 12\n12 * 2 = 24\n24 - 3 = 21\nThe result is 21.", 1.0),
        ("The result is 21.", 1.0),  # the outcome only: no working needed
        ("21 is the result of 3 operations.", 0.0),  # the last integer counts
        ("7 + 5 = 12\n12 * 2 = 24", 0.0),
        ("", 0.0),
    ],
)
def test_final_number_reward(reply, reward):
    assert lc.final_number_reward(reply, "21", "question") == reward
    fn = reward_function.load("tango_jax.data.line_chains:final_number_reward")
    assert fn is lc.final_number_reward


def test_all_lines_right_means_reward_one():
    """First error -1 implies reward 1 (the module's promise), on every reply of the tests."""
    for lines in ([*RIGHT], ["Start:", *RIGHT, "So 21."], [*RIGHT, "The result is 22."]):
        if lc.first_error(CHAIN, lines) == -1:
            assert lc.final_number_reward("\n".join(lines), "21", "") == 1.0


TASK = lc.LineChainTask(ArithConfig(min_steps=2, max_steps=4))


def test_questions_read_back_and_answers_are_right():
    problems = TASK.held_out_problems(64, seed=0)
    assert len({p.question for p in problems}) == 64
    for p in problems:
        chain = lc.parse_chain(p.question)
        assert chain == p.chain and 2 <= len(chain.ops) <= 4
        value = chain.start
        for op, operand in chain.ops:
            value = apply_op(op, value, operand)
            assert 0 <= value <= 20
        assert str(value) == p.to_problem().answer
    first = problems[0]
    assert first.question == (
        "Start with 6. Multiply by 3, then add 1. What is the result? "
        'Write one calculation per line, like "7 + 5 = 12".'
    )
    assert first.answer == 19 and TASK.bucket(first.to_problem()) == "2_ops"
    # an example in the wording comes before the question: the question's chain is read
    example = lc.ChainQuestion(CHAIN, lc.WORDINGS["example"])
    assert "Start with 4." in example.question and lc.parse_chain(example.question) == CHAIN
    assert lc.parse_chain("What is 7 + 5?") is None


def test_problems_are_deterministic_and_split():
    a = TASK.stream(8, seed=3, position=None)
    b = TASK.stream(8, seed=3, position=None)
    batch = a.next_batch()
    assert batch == b.next_batch() and batch != TASK.stream(8, seed=4, position=None).next_batch()
    assert all(p.source == lc.SOURCE for p in batch)
    trained = {p.question for _ in range(20) for p in a.next_batch()}
    held = {p.question for p in TASK.held_out_problems(64, seed=0)}
    assert not trained & held
    assert TASK.held_out_problems(64, seed=0) == TASK.held_out_problems(64, seed=0)


def test_sft_solutions_are_one_operation_per_line_and_labelled_right():
    """The generator's SFT replies: reference solutions have no wrong line; a slipped one is
    wrong exactly at its slip; the SFT prompt is the bare question (the run wraps the chat
    template around it)."""
    examples = TASK.sft_examples(False, 64, seed=0, style=PromptStyle.COMPACT)
    slips = 0
    for i, ex in enumerate(examples):
        problem = TASK.sft_problem(i, 0)
        solution = TASK.solution(problem, ex.correct, 0)
        lines = ex.response.split("\n")
        assert len(lines) == len(problem.chain.ops) and ex.response == solution.text
        want = -1 if ex.correct else solution.first_error
        assert lc.first_error(problem.chain, lines) == want
        assert lc.final_number_reward(ex.response, str(problem.answer), "") == float(ex.correct)
        slips += not ex.correct
    assert 0 < slips < 64  # data.arith.slip_fraction 0.2


def test_the_verifier_is_shown_one_step_per_line():
    (ex,) = TASK.sft_examples(True, 1, seed=0, style=PromptStyle.COMPACT)
    problem, correct = TASK.verifier_case(0, 0)
    solution = TASK.solution(problem, correct, 0)
    shown = formats.tagged_solution(solution.text, formats.StepSplit.LINES)
    assert shown.count(formats.STEP_OPEN) == len(problem.chain.ops) and shown in ex.prompt
    (item,) = TASK.process_items(1, seed=0)
    assert item.solution.count(formats.STEP_OPEN) == item.num_steps
    analyses = TASK.step_analyses(TASK.solution(lc.ChainQuestion(CHAIN), False, 0))
    assert analyses[0] == "Step 1 Analysis: 7 + 5 = 12." and len(analyses) == 3


def test_the_task_is_registered_with_its_step_truth():
    task = task_of(DataConfig(source=DataSource.LINE_CHAINS, arith=ArithConfig(max_steps=4)))
    assert isinstance(task, lc.LineChainTask) and task.config.max_steps == 4
    assert by_source(lc.SOURCE) is not None
    problem = lc.ChainQuestion(CHAIN).to_problem()
    assert step_truth.first_error(problem, RIGHT) == -1
    assert step_truth.first_error(problem, ["7 + 5 = 12", "12 * 2 = 25"]) == 1
