r"""Labelled data of the synthetic task (`synthetic.py`): the SFT sets and the step-level truth.

SFT data (TANGO_SPEC §5, and the short format SFT of App. D.2 that the tiny runs use for both
models):
  * generator: (prompt, reference solution), where `slip_fraction` of the solutions carry one
    arithmetic slip at a random step, propagated to the answer (the paper's SFT data are
    Llama-70B outputs kept without any correctness filter, so its SFT generator imitates wrong
    solutions too; the slips play that part here);
  * verifier: (verifier prompt, transcript) built from the outcome label only: the verdict is
    the label; the K step judgments are either the label copied into every step (ALL_STEPS) or,
    for a wrong solution, one INCORRECT at a random step and CORRECT elsewhere (RANDOM_STEP),
    or RANDOM_STEP's text with no loss on the step judgments of a K-step transcript (UNLABELLED:
    only the verdict is taught, `SFTExample.no_loss`; UNLABELLED_WRONG: no loss on a wrong
    solution's step judgments, a right solution's all CORRECT as in ALL_STEPS); each step's
    analysis is a generic sentence (GENERIC), the step's operation recomputed (RECOMPUTE) or
    the written and the recomputed value side by side (COMPARE). The outcome label says
    nothing about which step is wrong, and no choice adds step information: RANDOM_STEP's
    position is independent of the error. ALL_STEPS turned out to be an exploration trap (the
    verdict is settled at the first step judgment, so RL cannot move an INCORRECT to a
    location); the tiny config uses UNLABELLED with COMPARE and fact checks
    (docs/miniature.md has the measurements). Step judgments are learned from RL alone
    (TANGO_SPEC §3.4).

Step-level truth (never used in training): `parse_question` reads a question back into its
problem, `first_error` finds the first wrong step of any solution written as "a op o = v" steps
(the label of a rollout's ProcessBench-style check), and `process_bench` is the miniature
ProcessBench of the held-out evaluation.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from typing import Any

from tango_jax.data.synthetic import (
    _SLIP_OFFSETS,
    MAX_ATTEMPTS,
    OP_OF_SYMBOL,
    STEP,
    ArithConfig,
    ArithProblem,
    ArithSolution,
    Draws,
    Op,
    VerifierAnalysis,
    VerifierLabels,
    apply_op,
    problem_at,
    reference_solution,
    slipped_solution,
)
from tango_jax.text import formats, templates
from tango_jax.text.process_bench import NO_ERROR, ProcessItem

_QUESTION = re.compile(r"Start with (\d+)\. (.+)\. What is the result\?")
_OP_OF_PHRASE = {"add": Op.ADD, "subtract": Op.SUB, "multiply by": Op.MUL, "divide by": Op.DIV}


@dataclasses.dataclass(frozen=True)
class SFTExample:
    """One supervised example: the model sees `prompt` and learns `response`.

    correct: the outcome label of the solution the example is about.
    problem_id: the `ArithProblem.id` it comes from.
    no_loss: (start, end) character spans of `response` whose tokens carry no SFT loss (the
    step judgments of an UNLABELLED transcript, or of a wrong solution's UNLABELLED_WRONG
    transcript); the rest of the response is learned.
    """

    prompt: str
    response: str
    correct: bool
    problem_id: str
    no_loss: tuple[tuple[int, int], ...] = ()


# A step judgment's label word in a rendered transcript: the boxed label that ends a <step>.
_STEP_JUDGMENT = re.compile(r"\\boxed\{((?:IN)?CORRECT)\}" + re.escape(formats.STEP_CLOSE))


def step_judgment_spans(transcript: str) -> tuple[tuple[int, int], ...]:
    """The character spans of the step judgments' label words (CORRECT / INCORRECT) in a
    transcript from `formats.render_verification` (the verdict's label is not one)."""
    return tuple(m.span(1) for m in _STEP_JUDGMENT.finditer(transcript))


def _analysis(step: str, kind: VerifierAnalysis) -> str:
    """The verifier's check of a step "a op o = v" (SFT solutions are well-formed)."""
    m = STEP.fullmatch(step.strip())
    assert m, step
    a, symbol, o = int(m.group(1)), m.group(2), int(m.group(3))
    recomputed = f"{a} {symbol} {o} = {apply_op(OP_OF_SYMBOL[symbol], a, o)}"
    if kind is VerifierAnalysis.COMPARE:
        return f"written {m.group(4)}, computed {recomputed}"
    if kind is VerifierAnalysis.RESTATE:
        return step.strip()
    return recomputed


def verification_transcript(
    solution: ArithSolution,
    config: ArithConfig = ArithConfig(),  # noqa: B008  (frozen: a shared default is safe)
    *,
    seed: int = 0,
) -> str:
    """The verifier SFT target for `solution`, from its outcome label only.

    Labels (`config.verifier_sft_labels`): ALL_STEPS copies the label into all K judgments;
    RANDOM_STEP (and UNLABELLED and UNLABELLED_WRONG, whose judgments `verifier_sft_examples`
    then exempts from the loss, all or a wrong solution's) marks a correct solution's steps
    all CORRECT and, for a wrong one, one step INCORRECT at a position drawn at random (seeded
    by (seed, question)), independent of where the error is. Analyses
    (`config.verifier_sft_analysis`): GENERIC is the same sentence for every step; RECOMPUTE
    writes the step's operation with its right result; COMPARE the written value and the
    recomputation. The verdict is the outcome label. See the module docstring for why.
    """
    num_steps = len(solution.problem.ops)
    label = formats.CORRECT if solution.correct else formats.INCORRECT
    if solution.correct:
        judgments = [1] * num_steps
    elif config.verifier_sft_labels is VerifierLabels.ALL_STEPS:
        judgments = [-1] * num_steps
    else:
        wrong = Draws("sft-verifier-location", seed, solution.problem.question).below(num_steps)
        judgments = [-1 if i == wrong else 1 for i in range(num_steps)]
    if config.verifier_sft_analysis is not VerifierAnalysis.GENERIC:
        analyses = [
            f"Step {i + 1} Analysis: {_analysis(step, config.verifier_sft_analysis)}."
            for i, step in enumerate(solution.steps)
        ]
    else:
        analyses = [f"Step {i + 1} Analysis: check the arithmetic." for i in range(num_steps)]
    return formats.render_verification(judgments, label, analyses)


def generator_sft_examples(
    config: ArithConfig,
    n: int,
    *,
    seed: int,
    style: templates.Templates = templates.PromptStyle.FULL,
) -> list[SFTExample]:
    """`n` (generator prompt, solution) pairs from the training split; `slip_fraction` of the
    solutions have one slip. `style`: the prompt template, the one the RL prompts use."""
    out = []
    for i in range(n):
        problem = problem_at(config, i, seed=seed, purpose="sft-generator")
        slip = Draws("sft-generator-slip", seed, i).chance(config.slip_fraction)
        solution = slipped_solution(problem, seed=seed) if slip else reference_solution(problem)
        prompt = templates.render_generator_prompt(problem.question, style=style)
        out.append(SFTExample(prompt, solution.text, solution.correct, problem.id))
    return out


def verifier_sft_examples(
    config: ArithConfig,
    n: int,
    *,
    seed: int,
    style: templates.Templates = templates.PromptStyle.FULL,
) -> list[SFTExample]:
    """`n` (verifier prompt, outcome-only transcript) pairs from the training split;
    `verifier_correct_fraction` of the verified solutions are correct, the rest have one slip.
    `verifier_sft_facts` of them are one-equation fact checks instead and `verifier_sft_one_step`
    are about one-step problems (one draw per example decides which). `style`: the prompt
    template, the one the RL prompts use."""
    # one-step problems from every value a later step can start from, not only the start values
    one_step = dataclasses.replace(config, min_steps=1, max_steps=1, start_max=config.value_max)
    out = []
    for i in range(n):
        kind = Draws("sft-verifier-fact", seed, i).uniform()
        if kind < config.verifier_sft_facts:
            out.append(fact_example(config, i, seed=seed))
            continue
        if kind < config.verifier_sft_facts + config.verifier_sft_one_step:
            problem = problem_at(one_step, i, seed=seed, purpose="sft-verifier-one-step")
        else:
            problem = problem_at(config, i, seed=seed, purpose="sft-verifier")
        correct = Draws("sft-verifier-slip", seed, i).chance(config.verifier_correct_fraction)
        solution = reference_solution(problem) if correct else slipped_solution(problem, seed=seed)
        prompt = templates.render_verifier_prompt(problem.question, solution.text, style=style)
        transcript = verification_transcript(solution, config, seed=seed)
        unlabelled = config.verifier_sft_labels is VerifierLabels.UNLABELLED or (
            config.verifier_sft_labels is VerifierLabels.UNLABELLED_WRONG and not correct
        )
        no_loss = step_judgment_spans(transcript) if unlabelled and len(problem.ops) > 1 else ()
        out.append(SFTExample(prompt, transcript, correct, problem.id, no_loss))
    return out


FACT_PROMPT = "Is this equation right?\n{equation}\n"


def fact_example(config: ArithConfig, i: int, *, seed: int) -> SFTExample:
    """Arithmetic-fact check `i`: one step "a op o = v" of a training problem (stream
    "sft-facts", not a verified solution), right or (half the time) off by a slip offset, and
    its truth as the verifier's label token."""
    problem = problem_at(config, i, seed=seed, purpose="sft-facts")
    draws = Draws("sft-fact", seed, i)
    step = draws.below(len(problem.ops))
    right = reference_solution(problem).steps[step]
    a_op_o, value = right.rsplit(" = ", 1)
    wrong = [int(value) + d for d in _SLIP_OFFSETS if int(value) + d >= 0]
    true = draws.chance(0.5)
    equation = right if true else f"{a_op_o} = {draws.choice(wrong)}"
    label = "CORRECT" if true else "INCORRECT"
    response = f"\\boxed{{{label}}}"
    if config.verifier_sft_analysis in (VerifierAnalysis.RECOMPUTE, VerifierAnalysis.COMPARE):
        # the check written out before the label, as in the transcripts: without it the tiny
        # models do not learn to judge an equation at all (docs/miniature.md)
        response = f"Analysis: {_analysis(equation, config.verifier_sft_analysis)}. {response}"
    return SFTExample(FACT_PROMPT.format(equation=equation), response, true, problem.id)


# --------------------------------------------------------------------------------------------
# Step-level truth: the miniature ProcessBench and the first wrong step of any solution.


def parse_question(question: str) -> ArithProblem | None:
    """The problem a question text describes (the inverse of `ArithProblem.question`), or None
    for text that is not an arithmetic-chain question."""
    m = _QUESTION.fullmatch(question.strip())
    if m is None:
        return None
    ops = []
    for clause in m.group(2).split(", then "):
        words, _, operand = clause.lower().rpartition(" ")
        if words not in _OP_OF_PHRASE or not operand.isdigit():
            return None
        ops.append((_OP_OF_PHRASE[words], int(operand)))
    return ArithProblem(int(m.group(1)), tuple(ops))


def first_error(problem: ArithProblem, steps: Sequence[str]) -> int:
    """The 0-based index of the first wrong step of a solution written as `steps` ("a op o = v"
    texts), or -1 if every step is right and there are exactly K of them.

    Step k is right when it reads "a op o = v" with the problem's k-th operation and operand,
    `a` equal to the value the previous step wrote (the start value for k = 0), and v = a op o.
    So, as in ProcessBench, a step that carries an earlier mistake forward correctly is not an
    error; the first mistake is. A missing step is an error at its position; an extra step
    after K right ones is an error too.
    """
    value = problem.start
    for k, text in enumerate(steps):
        m = STEP.fullmatch(text.strip())
        if k >= len(problem.ops) or m is None:
            return k
        a, symbol, o, v = int(m.group(1)), m.group(2), int(m.group(3)), int(m.group(4))
        op, operand = problem.ops[k]
        if a != value or OP_OF_SYMBOL[symbol] is not op or o != operand or v != apply_op(op, a, o):
            return k
        value = v
    return -1 if len(steps) == len(problem.ops) else len(steps)


def process_items(config: ArithConfig, n: int, *, seed: int = 0) -> list[ProcessItem]:
    """`process_bench` as the evaluation's ProcessBench items (question, solution text, K,
    first wrong step or -1)."""
    return as_process_items(process_bench(config, n, seed=seed))


def as_process_items(solutions) -> list[ProcessItem]:
    """Solutions of a synthetic task (`.problem.question`, `.text`, `.steps`, `.first_error`)
    as ProcessBench items."""
    return [
        ProcessItem(
            s.problem.question,
            s.text,
            len(s.steps),
            NO_ERROR if s.first_error is None else s.first_error,
        )
        for s in solutions
    ]


def alternating_bench(draw: Callable[[int], Any], solve: Callable[[Any, bool], Any], n: int):
    """`n` solutions on the first distinct problems of `draw(0), draw(1), ...` (held-out
    problems with a `.question`): `solve(problem, wrong)`, right and wrong in turn."""
    out, seen, index = [], set(), 0
    while len(out) < n:
        problem = draw(index)
        index += 1
        if problem.question in seen:
            if index > 50 * n + MAX_ATTEMPTS:
                raise ValueError(f"only {len(out)} distinct held-out problems for n = {n}.")
            continue
        seen.add(problem.question)
        out.append(solve(problem, len(out) % 2 == 1))
    return out


def process_bench(config: ArithConfig, n: int, *, seed: int = 0) -> list[ArithSolution]:
    """`n` held-out solutions with a known first wrong step, the miniature ProcessBench: half
    reference solutions (label -1), half with one slip at a random step (label = that step),
    on the first distinct held-out problems of stream ("process-bench", seed).

    The same seed gives the same items on every run, so runs are compared on one set.
    """
    return alternating_bench(
        lambda i: problem_at(config, i, seed=seed, held_out=True, purpose="process-bench"),
        lambda p, wrong: slipped_solution(p, seed=seed) if wrong else reference_solution(p),
        n,
    )
