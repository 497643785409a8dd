"""tango_jax.data.synthetic and synthetic_labels: arithmetic chains, their solutions, the SFT data
and the step-level truth.

Gold answers are checked against an independent reading of the question text (a regex turns the
words back into a Python expression, which `eval` computes); solutions against the project's own
parsers and rewards (formats, rewards.outcome_reward).
"""

from __future__ import annotations

import dataclasses
import operator
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tango_jax.data import synthetic as S
from tango_jax.data import synthetic_labels as L
from tango_jax.data.datasets import StreamPosition
from tango_jax.tango import rewards as R
from tango_jax.text import formats as F
from tango_jax.text import templates as T

CONFIG = S.ArithConfig()
_QUESTION = re.compile(r"Start with (\d+)\. (.*)\. What is the result\?")
_CLAUSE = {
    "add": "+",
    "subtract": "-",
    "multiply by": "*",
    "divide by": "/",
}


def eval_question(question: str) -> int:
    """The answer of a question, computed from its words alone."""
    m = _QUESTION.fullmatch(question)
    assert m, question
    expr = m.group(1)
    for clause in m.group(2).split(", then "):
        words, operand = clause.lower().rsplit(" ", 1)
        expr = f"({expr} {_CLAUSE[words]} {operand})"
    value = eval(expr)  # true division: an inexact quotient would show up as a float
    assert value == int(value), (question, value)
    return int(value)


def eval_step(text: str) -> tuple[int, int]:
    """(what the left side of "a op b = c" computes to, what the step wrote)."""
    lhs, rhs = text.split(" = ")
    return int(eval(lhs)), int(rhs)


# ----------------------------------------------------------------------------------------------
# Problems.


def test_the_stream_is_pinned():
    """Problem 0 of stream ("rl", seed 1) never changes: checkpoints resume on the same data."""
    problem = S.problem_at(CONFIG, 0, seed=1)
    assert problem.question == (
        "Start with 9. Add 3, then subtract 3, then subtract 4. What is the result?"
    )
    assert problem.answer == 5 and problem.id == S.problem_at(CONFIG, 0, seed=1).id


def test_problems_are_deterministic_and_seeds_differ():
    a = [S.problem_at(CONFIG, i, seed=3) for i in range(50)]
    assert a == [S.problem_at(CONFIG, i, seed=3) for i in range(50)]
    b = [S.problem_at(CONFIG, i, seed=4) for i in range(50)]
    assert sum(x == y for x, y in zip(a, b)) < 5


def test_gold_answers_match_an_independent_evaluation():
    problems = [S.problem_at(CONFIG, i, seed=0) for i in range(300)]
    problems += S.held_out_problems(CONFIG, 100)
    for p in problems:
        assert eval_question(p.question) == p.answer
        assert CONFIG.min_steps <= len(p.ops) <= CONFIG.max_steps
        assert 1 <= p.start <= CONFIG.start_max
        assert all(0 <= v <= CONFIG.value_max for v in p.values)
        assert p.to_problem().answer == str(p.answer)


def test_difficulty_knobs_are_respected():
    config = S.ArithConfig(
        min_steps=5, max_steps=6, start_max=20, operand_max=3, mul_max=4, value_max=99,
        ops=(S.Op.ADD, S.Op.SUB, S.Op.MUL, S.Op.DIV),
    )  # fmt: skip
    for i in range(200):
        p = S.problem_at(config, i, seed=0)
        assert eval_question(p.question) == p.answer
        assert 5 <= len(p.ops) <= 6 and all(0 <= v <= 99 for v in p.values)
        for op, operand in p.ops:
            small = op in (S.Op.ADD, S.Op.SUB)
            assert 1 <= operand <= 3 if small else 2 <= operand <= 4
    assert {op for i in range(200) for op, _ in S.problem_at(config, i, seed=0).ops} == {
        S.Op.ADD, S.Op.SUB, S.Op.MUL, S.Op.DIV,
    }  # fmt: skip


@settings(max_examples=25, deadline=None)
@given(
    steps=st.tuples(st.integers(1, 6), st.integers(0, 3)),
    start_max=st.integers(3, 30),  # at least a dozen problems, so the training split has some
    operand_max=st.integers(2, 20),
    mul_max=st.integers(2, 6),
    extra=st.integers(5, 100),
    ops=st.sets(st.sampled_from([S.Op.MUL, S.Op.DIV])).map(lambda s: {S.Op.ADD, S.Op.SUB} | s),
    seed=st.integers(0, 2**32),
)
def test_any_valid_config_gives_valid_problems(
    steps, start_max, operand_max, mul_max, extra, ops, seed
):
    config = S.ArithConfig(
        min_steps=steps[0], max_steps=steps[0] + steps[1], start_max=start_max,
        operand_max=operand_max, mul_max=mul_max, value_max=start_max + extra,
        ops=tuple(sorted(ops, key=lambda o: o.value)),
    )  # fmt: skip
    for i in range(3):
        p = S.problem_at(config, i, seed=seed)
        assert eval_question(p.question) == p.answer
        assert all(0 <= v <= config.value_max for v in p.values)
        solution = S.slipped_solution(p, seed=seed)
        assert not solution.correct and solution.values[-1] >= 0


def test_train_and_held_out_splits_are_disjoint():
    train = {S.problem_at(CONFIG, i, seed=s).question for s in (0, 1) for i in range(1000)}
    held = S.held_out_problems(CONFIG, 300)
    assert len({p.question for p in held}) == 300  # distinct
    assert not train & {p.question for p in held}
    assert all(S.is_held_out(p.question, CONFIG) for p in held)
    assert not any(S.is_held_out(q, CONFIG) for q in train)
    # Membership depends on the question alone: another difficulty keeps it.
    harder = dataclasses.replace(CONFIG, max_steps=6, value_max=200)
    assert all(S.is_held_out(p.question, harder) for p in held)
    # About eval_fraction of all problems are held out.
    drawn = [S._draw_problem(CONFIG, S.Draws("fraction", i)) for i in range(4000)]
    share = sum(S.is_held_out(p.question, CONFIG) for p in drawn) / 4000
    assert abs(share - CONFIG.eval_fraction) < 0.03


def test_held_out_set_too_large_for_the_space_is_an_error():
    tiny = S.ArithConfig(min_steps=1, max_steps=1, start_max=1, operand_max=1)
    with pytest.raises(ValueError, match="widen"):
        S.held_out_problems(tiny, 5)


@pytest.mark.parametrize(
    "kwargs, rule",
    [
        ({"min_steps": 0}, "min_steps"),
        ({"min_steps": 4, "max_steps": 3}, "max_steps"),
        ({"start_max": 60}, "start_max <= value_max"),
        ({"ops": (S.Op.ADD, S.Op.MUL)}, "Op.ADD and Op.SUB"),
        ({"ops": (S.Op.ADD, S.Op.SUB, S.Op.ADD)}, "repeats"),
        ({"mul_max": 1}, "mul_max"),
        ({"eval_fraction": 0.0}, "eval_fraction"),
        ({"slip_fraction": 1.5}, "slip_fraction"),
    ],
)
def test_config_errors_name_the_rule(kwargs, rule):
    with pytest.raises(ValueError, match=re.escape(rule)):
        S.ArithConfig(**kwargs)


# ----------------------------------------------------------------------------------------------
# Solutions.


def test_reference_solutions_parse_and_score_one():
    for i in range(25):
        p = S.problem_at(CONFIG, i, seed=5)
        text = S.reference_solution(p).text
        steps = F.split_steps(text)
        assert len(steps) == len(p.ops)
        assert all(left == written for left, written in map(eval_step, (s.text for s in steps)))
        assert F.extract_answer(text) == str(p.answer)
        assert F.generator_format_score(text) == 1.0
        assert R.outcome_reward(text, str(p.answer)) == 1.0


def test_the_reference_solution_looks_like_this():
    p = S.ArithProblem(7, ((S.Op.ADD, 5), (S.Op.MUL, 3), (S.Op.SUB, 4)))
    assert (
        p.question
        == "Start with 7. Add 5, then multiply by 3, then subtract 4. What is the result?"
    )
    assert S.reference_solution(p).text == (
        "<think>\n<step>7 + 5 = 12</step>\n<step>12 * 3 = 36</step>\n<step>36 - 4 = 32</step>\n"
        "</think>\n<answer>\\boxed{32}</answer>"
    )


def test_slips_are_one_wrong_step_carried_to_a_wrong_answer():
    for i in range(25):
        p = S.problem_at(CONFIG, i, seed=6)
        solution = S.slipped_solution(p, seed=i)
        assert solution == S.slipped_solution(p, seed=i)
        text = solution.text
        assert not solution.correct and F.generator_format_score(text) == 1.0
        checks = [
            left == written for left, written in (eval_step(s.text) for s in F.split_steps(text))
        ]
        assert checks == [k != solution.first_error for k in range(len(p.ops))]
        assert R.outcome_reward(text, str(p.answer)) == 0.0


# ----------------------------------------------------------------------------------------------
# SFT data.


def test_generator_sft_examples():
    examples = L.generator_sft_examples(CONFIG, 400, seed=2)
    assert examples == L.generator_sft_examples(CONFIG, 400, seed=2)
    slips = sum(not e.correct for e in examples)
    assert abs(slips / 400 - CONFIG.slip_fraction) < 0.08  # binomial sd 0.023
    for e in examples[:40]:
        question = e.prompt.rsplit("User: ", 1)[1].removesuffix("\nAssistant:")
        assert e.prompt == T.render_generator_prompt(question)
        assert (F.extract_answer(e.response) == str(eval_question(question))) == e.correct
    none = L.generator_sft_examples(dataclasses.replace(CONFIG, slip_fraction=0.0), 50, seed=2)
    assert all(e.correct for e in none)


@pytest.mark.parametrize("make", [L.generator_sft_examples, L.verifier_sft_examples])
def test_sft_prompts_follow_the_prompt_style(make):
    """SFT prompts must be the prompts RL will use: the same style, the same texts otherwise."""
    full = make(CONFIG, 5, seed=4)
    compact = make(CONFIG, 5, seed=4, style=T.PromptStyle.COMPACT)
    for a, b in zip(full, compact):
        assert (a.response, a.correct, a.problem_id) == (b.response, b.correct, b.problem_id)
        assert len(b.prompt) < len(a.prompt) / 3
    problem = S.problem_at(CONFIG, 0, seed=4, purpose="sft-generator")
    if make is L.generator_sft_examples:
        expected = T.render_generator_prompt(problem.question, style=T.PromptStyle.COMPACT)
        assert compact[0].prompt == expected


def test_verifier_sft_transcripts_carry_the_outcome_label_only():
    examples = L.verifier_sft_examples(CONFIG, 200, seed=3)
    assert abs(sum(e.correct for e in examples) / 200 - CONFIG.verifier_correct_fraction) < 0.12
    for e in examples[:40]:
        solution = e.prompt.split("Assistant's Solution:\n", 1)[1].split("\n\nThe Assistant's")[0]
        k = len(F.split_steps(solution))
        assert e.prompt == T.render_verifier_prompt(
            e.prompt.split("Problem: ", 1)[1].split("\n")[0], solution
        )
        parsed = F.parse_verification(e.response)
        assert parsed.step_judgments == ((1 if e.correct else -1),) * k
        assert parsed.verdict == (F.CORRECT if e.correct else F.INCORRECT)
        gen_format = F.generator_format_score(solution)
        assert (
            F.verifier_format_score(e.response, expected_steps=k, generator_format_score=gen_format)
            == 1.0
        )
        assert R.step_rewards(k, parsed.step_judgments) is not None
        assert "Step 1 Analysis: check the arithmetic." in e.response


# ----------------------------------------------------------------------------------------------
# The RL stream.


def test_stream_is_indexed_by_step_and_resumes_exactly():
    stream = S.SyntheticStream(CONFIG, 4, seed=7)
    first = [stream.next_batch() for _ in range(5)]
    assert stream.position == StreamPosition(seed=7, epoch=0, index=5)
    assert first[2] == stream.batch_at(2)
    assert [p.question for p in first[0]] == [
        S.problem_at(CONFIG, i, seed=7).question for i in range(4)
    ]
    saved = dataclasses.asdict(
        S.SyntheticStream(CONFIG, 4, seed=7, position=StreamPosition(7, 0, 3)).position
    )
    resumed = S.SyntheticStream(CONFIG, 4, seed=7, position=StreamPosition(**saved))
    assert [resumed.next_batch() for _ in range(2)] == first[3:]
    assert all(not S.is_held_out(p.question, CONFIG) for b in first for p in b)


def test_stream_rejects_a_position_of_another_seed():
    with pytest.raises(ValueError, match="seed 7"):
        S.SyntheticStream(CONFIG, 4, seed=7, position=StreamPosition(seed=8))


# ----------------------------------------------------------------------------------------------
# Step-level truth: parsing questions back, first wrong steps, the miniature ProcessBench.


def test_parse_question_inverts_the_question_text():
    for i in range(200):
        problem = S.problem_at(CONFIG, i, seed=5)
        assert L.parse_question(problem.question) == problem
    div = S.ArithProblem(12, ((S.Op.DIV, 3), (S.Op.ADD, 1)))
    assert L.parse_question(div.question) == div
    for text in ("What is 2 + 2?", "Start with 3. Jump 4. What is the result?", ""):
        assert L.parse_question(text) is None


PROBLEM = S.ArithProblem(7, ((S.Op.ADD, 5), (S.Op.MUL, 3), (S.Op.SUB, 4)))  # 12, 36, 32


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        (["7 + 5 = 12", "12 * 3 = 36", "36 - 4 = 32"], -1),
        ([" 7 + 5 = 12 ", "12 * 3 = 36", "36 - 4 = 32"], -1),  # surrounding spaces are fine
        (["7 + 5 = 13", "13 * 3 = 39", "39 - 4 = 35"], 0),  # a slip carried forward correctly
        (["7 + 5 = 12", "12 * 3 = 35", "35 - 4 = 31"], 1),
        (["7 + 5 = 12", "12 * 3 = 36", "36 - 4 = 31"], 2),
        (["7 + 5 = 12", "13 * 3 = 39", "39 - 4 = 35"], 1),  # a wrong input is an error too
        (["7 + 5 = 12", "12 + 3 = 15", "15 - 4 = 11"], 1),  # the wrong operation
        (["7 + 5 = 12", "12 * 2 = 24", "24 - 4 = 20"], 1),  # the wrong operand
        (["7 + 5 = 12", "twelve times three", "36 - 4 = 32"], 1),  # unreadable
        (["7 + 5 = 12", "12 * 3 = 36"], 2),  # a missing step is an error at its position
        (["7 + 5 = 12", "12 * 3 = 36", "36 - 4 = 32", "32 + 0 = 32"], 3),  # an extra step
        ([], 0),
    ],
)
def test_first_error(steps, expected):
    assert L.first_error(PROBLEM, steps) == expected


def test_first_error_agrees_with_the_slips_it_knows():
    for i in range(100):
        problem = S.problem_at(CONFIG, i, seed=6)
        assert L.first_error(problem, S.reference_solution(problem).steps) == -1
        slipped = S.slipped_solution(problem, seed=i)
        assert L.first_error(problem, slipped.steps) == slipped.first_error


def test_process_bench_is_half_correct_held_out_and_pinned():
    items = L.process_bench(CONFIG, 64, seed=1)
    assert items == L.process_bench(CONFIG, 64, seed=1)
    assert len({s.problem.question for s in items}) == 64
    assert all(S.is_held_out(s.problem.question, CONFIG) for s in items)
    labels = [s.first_error for s in items]
    assert sum(y is None for y in labels) == 32
    # every position of a 3-step chain is the first error of some item
    assert {y for y in labels if y is not None} == {0, 1, 2}
    evaluation = L.process_items(CONFIG, 64, seed=1)
    assert [it.label for it in evaluation] == [-1 if y is None else y for y in labels]
    assert [it.solution for it in evaluation] == [s.text for s in items]
    assert all(it.num_steps == 3 for it in evaluation)


def test_random_step_transcripts_carry_no_location():
    """RANDOM_STEP: a wrong solution gets exactly one INCORRECT, at a position independent of
    where its error is (hit rate ~1/3 on 3-step chains); the verdict is the outcome label."""
    config = dataclasses.replace(CONFIG, verifier_sft_labels=S.VerifierLabels.RANDOM_STEP)
    hits = wrong = 0
    for i in range(300):
        problem = S.problem_at(CONFIG, i, seed=8, purpose="sft-verifier")
        for solution in (S.reference_solution(problem), S.slipped_solution(problem, seed=i)):
            parsed = F.parse_verification(L.verification_transcript(solution, config, seed=i))
            if solution.correct:
                assert parsed.step_judgments == (1, 1, 1) and parsed.verdict == F.CORRECT
                continue
            assert sorted(parsed.step_judgments) == [-1, 1, 1]
            assert parsed.verdict == F.INCORRECT
            wrong += 1
            hits += parsed.step_judgments.index(-1) == solution.first_error
    assert abs(hits / wrong - 1 / 3) < 0.1  # binomial sd 0.027


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        (S.VerifierAnalysis.GENERIC, "Step 2 Analysis: check the arithmetic."),
        (S.VerifierAnalysis.RECOMPUTE, "Step 2 Analysis: 12 * 3 = 36."),
        (S.VerifierAnalysis.COMPARE, "Step 2 Analysis: written 35, computed 12 * 3 = 36."),
        (S.VerifierAnalysis.RESTATE, "Step 2 Analysis: 12 * 3 = 35."),
    ],
)
def test_verifier_analyses(kind, expected):
    solution = S.ArithSolution(PROBLEM, (12, 35, 31), first_error=1)
    config = dataclasses.replace(CONFIG, verifier_sft_analysis=kind)
    assert expected in L.verification_transcript(solution, config)


def test_fact_checks_in_the_verifier_sft_are_true_statements_about_other_equations():
    """verifier_sft_facts: that share of the examples become one-equation checks whose label is
    the equation's arithmetic truth (half false); the rest are the usual outcome-only
    transcripts, and no fact equation is read off a verified solution's steps."""
    config = dataclasses.replace(CONFIG, verifier_sft_facts=0.3)
    examples = L.verifier_sft_examples(config, 600, seed=4)
    facts = [e for e in examples if e.prompt.startswith("Is this equation right?")]
    assert abs(len(facts) / len(examples) - 0.3) < 0.06  # binomial sd 0.019
    truths = []
    for e in facts:
        a, symbol, o, v = S.STEP.fullmatch(e.prompt.splitlines()[1]).groups()
        true = S.apply_op(S.OP_OF_SYMBOL[symbol], int(a), int(o)) == int(v)
        assert e.response == ("\\boxed{CORRECT}" if true else "\\boxed{INCORRECT}")
        assert e.correct is true
        truths.append(true)
    assert 0.4 < sum(truths) / len(truths) < 0.6
    transcripts = [e for e in examples if e not in facts]
    assert all(F.parse_verification(e.response).verdict is not None for e in transcripts)
    # the transcripts are those of the fact-free set at the same indices
    plain = L.verifier_sft_examples(CONFIG, 600, seed=4)
    assert all(e in plain for e in transcripts)


def test_one_step_problems_in_the_verifier_sft_carry_their_outcome_label():
    """verifier_sft_one_step: that share of the verifier SFT examples verify a one-step
    solution (right or slipped) in the usual transcript format, whose only step judgment and
    verdict are its outcome label; the other examples are unchanged, and they mix with facts."""
    config = dataclasses.replace(
        CONFIG,
        verifier_sft_one_step=0.4,
        verifier_sft_labels=S.VerifierLabels.RANDOM_STEP,
        verifier_sft_analysis=S.VerifierAnalysis.RECOMPUTE,
    )
    examples = L.verifier_sft_examples(config, 600, seed=5)

    def problem(e):
        return L.parse_question(re.search(r"Start with .*? What is the result\?", e.prompt)[0])

    one = [e for e in examples if len(problem(e).ops) == 1]
    assert abs(len(one) / len(examples) - 0.4) < 0.07  # binomial sd 0.02
    labels = []
    for e in one:
        parsed = F.parse_verification(e.response)
        assert parsed.step_judgments == ((1,) if e.correct else (-1,))
        assert parsed.verdict == (F.CORRECT if e.correct else F.INCORRECT)
        labels.append(e.correct)
    assert 0.35 < sum(labels) / len(labels) < 0.65
    base = dataclasses.replace(config, verifier_sft_one_step=0.0)
    plain = L.verifier_sft_examples(base, 600, seed=5)
    assert all(e in plain for e in examples if e not in one)
    mixed = L.verifier_sft_examples(
        dataclasses.replace(config, verifier_sft_facts=0.3), 600, seed=5
    )
    facts = [e for e in mixed if e.prompt.startswith("Is this equation right?")]
    assert 0.2 < len(facts) / 600 < 0.4
    with pytest.raises(ValueError, match="verifier_sft_facts \\+ verifier_sft_one_step <= 1"):
        dataclasses.replace(config, verifier_sft_facts=0.7)


def test_unlabelled_transcripts_exempt_exactly_the_step_judgments_of_k_step_solutions():
    """UNLABELLED: RANDOM_STEP's text, with no_loss spans on exactly the K step-judgment words
    of a K-step transcript (never the verdict); one-step problems and fact checks keep every
    label, their only judgment being the outcome."""
    base = dataclasses.replace(
        CONFIG,
        verifier_sft_one_step=0.3,
        verifier_sft_facts=0.2,
        verifier_sft_analysis=S.VerifierAnalysis.COMPARE,
        verifier_sft_labels=S.VerifierLabels.RANDOM_STEP,
    )
    random_step = L.verifier_sft_examples(base, 300, seed=7)
    unlabelled = dataclasses.replace(base, verifier_sft_labels=S.VerifierLabels.UNLABELLED)
    examples = L.verifier_sft_examples(unlabelled, 300, seed=7)
    kinds = {"k_step": 0, "short": 0}
    for plain, e in zip(random_step, examples):
        assert (e.prompt, e.response, e.correct) == (plain.prompt, plain.response, plain.correct)
        assert plain.no_loss == ()
        steps = e.response.count("<step>")
        if steps <= 1:  # a one-step problem or a fact check
            assert e.no_loss == ()
            kinds["short"] += 1
            continue
        kinds["k_step"] += 1
        words = [e.response[a:b] for a, b in e.no_loss]
        judgments = F.parse_verification(e.response).step_judgments
        assert words == ["CORRECT" if j == 1 else "INCORRECT" for j in judgments]
        assert len(words) == steps
        verdict_at = e.response.rindex("\\boxed{")
        assert all(b < verdict_at for _, b in e.no_loss)
    assert kinds["k_step"] > 100 and kinds["short"] > 100


def test_unlabelled_wrong_exempts_only_the_step_judgments_of_wrong_k_step_solutions():
    """UNLABELLED_WRONG: UNLABELLED's text; a wrong K-step solution's judgments carry no loss,
    a right one's (all CORRECT: its outcome) keep theirs."""
    base = dataclasses.replace(
        CONFIG, verifier_sft_facts=0.2, verifier_sft_analysis=S.VerifierAnalysis.COMPARE
    )
    unlabelled = L.verifier_sft_examples(
        dataclasses.replace(base, verifier_sft_labels=S.VerifierLabels.UNLABELLED), 300, seed=3
    )
    wrong_only = L.verifier_sft_examples(
        dataclasses.replace(base, verifier_sft_labels=S.VerifierLabels.UNLABELLED_WRONG),
        300,
        seed=3,
    )
    seen = {True: 0, False: 0}
    for u, e in zip(unlabelled, wrong_only):
        assert (e.prompt, e.response, e.correct) == (u.prompt, u.response, u.correct)
        if e.response.count("<step>") <= 1:
            assert e.no_loss == ()
            continue
        seen[e.correct] += 1
        if e.correct:
            assert e.no_loss == ()
            assert F.parse_verification(e.response).step_judgments == (1, 1, 1)
        else:
            assert e.no_loss == u.no_loss and len(e.no_loss) == 3
    assert seen[True] > 50 and seen[False] > 50


def test_fact_checks_write_the_recomputation_before_the_label_with_a_recompute_analysis():
    """With RECOMPUTE transcripts, a fact check's response recomputes the equation's left side
    (its right value, whatever the prompt says) before the label, as a step analysis does."""
    config = dataclasses.replace(
        CONFIG, verifier_sft_facts=1.0, verifier_sft_analysis=S.VerifierAnalysis.RECOMPUTE
    )
    ops = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.floordiv}
    for e in L.verifier_sft_examples(config, 50, seed=6):
        a, symbol, o, v = S.STEP.fullmatch(e.prompt.splitlines()[1]).groups()
        right = ops[symbol](int(a), int(o))
        label = "CORRECT" if right == int(v) else "INCORRECT"
        assert e.response == f"Analysis: {a} {symbol} {o} = {right}. \\boxed{{{label}}}"
