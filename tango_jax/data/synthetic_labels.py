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
from collections.abc import Sequence

from tango_jax.data import synthetic
from tango_jax.data.datasets import StreamPosition
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
from tango_jax.data.task import (
    GeneratedTask,
    SFTExample,
    alternating_bench,
    as_process_items,
    step_judgment_spans,
)
from tango_jax.text import formats, templates
from tango_jax.text.process_bench import ProcessItem

__all__ = ["ArithmeticTask", "SFTExample", "as_process_items", "step_judgment_spans"]

_QUESTION = re.compile(r"Start with (\d+)\. (.+)\. What is the result\?")
_OP_OF_PHRASE = {"add": Op.ADD, "subtract": Op.SUB, "multiply by": Op.MUL, "divide by": Op.DIV}


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
    return ArithmeticTask(config).generator_sft_examples(n, seed=seed, style=style)


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
    return ArithmeticTask(config).verifier_sft_examples(n, seed=seed, style=style)


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
        attempts=MAX_ATTEMPTS,
    )


# --------------------------------------------------------------------------------------------
# The task (data/task.py): what the loop, the SFT, the evaluation and the step probe read.


@dataclasses.dataclass(frozen=True)
class ArithmeticTask(GeneratedTask):
    """The arithmetic chains (`synthetic.py`) with the labelled data above."""

    config: ArithConfig = ArithConfig()
    source = synthetic.SOURCE

    def sft_problem(self, i: int, seed: int) -> ArithProblem:
        return problem_at(self.config, i, seed=seed, purpose="sft-generator")

    def generator_slip(self, i: int, seed: int) -> bool:
        return Draws("sft-generator-slip", seed, i).chance(self.config.slip_fraction)

    def verifier_case(self, i: int, seed: int) -> tuple[ArithProblem, bool] | SFTExample:
        """A fact check (`verifier_sft_facts` of them), or a one-step problem
        (`verifier_sft_one_step`, from every value a later step can start from), or a training
        problem; right with chance `verifier_correct_fraction`. One draw decides the kind."""
        c = self.config
        kind = Draws("sft-verifier-fact", seed, i).uniform()
        if kind < c.verifier_sft_facts:
            return fact_example(c, i, seed=seed)
        if kind < c.verifier_sft_facts + c.verifier_sft_one_step:
            one_step = dataclasses.replace(c, min_steps=1, max_steps=1, start_max=c.value_max)
            problem = problem_at(one_step, i, seed=seed, purpose="sft-verifier-one-step")
        else:
            problem = problem_at(c, i, seed=seed, purpose="sft-verifier")
        return problem, Draws("sft-verifier-slip", seed, i).chance(c.verifier_correct_fraction)

    def solution(self, problem: ArithProblem, correct: bool, seed: int) -> ArithSolution:
        return reference_solution(problem) if correct else slipped_solution(problem, seed=seed)

    def verification_transcript(self, solution: ArithSolution, seed: int) -> str:
        return verification_transcript(solution, self.config, seed=seed)

    def unlabelled(self, correct: bool) -> bool:
        labels = self.config.verifier_sft_labels
        return labels is VerifierLabels.UNLABELLED or (
            labels is VerifierLabels.UNLABELLED_WRONG and not correct
        )

    def stream(self, batch_size: int, *, seed: int, position: StreamPosition | None):
        return synthetic.SyntheticStream(self.config, batch_size, seed=seed, position=position)

    def held_out_problems(self, n: int, *, seed: int) -> list[ArithProblem]:
        return synthetic.held_out_problems(self.config, n, seed=seed)

    def process_bench(self, n: int, *, seed: int) -> list[ArithSolution]:
        return process_bench(self.config, n, seed=seed)

    def parse(self, question: str) -> ArithProblem | None:
        return parse_question(question)

    def solution_first_error(self, problem: ArithProblem, steps: Sequence[str]) -> int:
        return first_error(problem, steps)

    def step_analyses(self, solution: ArithSolution) -> list[str]:
        kind = self.config.verifier_sft_analysis
        return [
            f"Step {i + 1} Analysis: {_analysis(step, kind)}."
            for i, step in enumerate(solution.steps)
        ]
