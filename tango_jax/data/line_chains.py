r"""Arithmetic chains answered one operation per line: the claim-2 task of a real instruct model.

    task = LineChainTask(ArithConfig(min_steps=2, max_steps=4))
    problem = task.held_out_problems(1, seed=0)[0]              # a ChainQuestion
    problem.question   # "Start with 7. Add 5, then multiply by 2. What is the result? ..."
    task.solution_first_error(problem.chain, ["7 + 5 = 12", "12 * 2 = 25"])      # 1
    final_number_reward("7 + 5 = 12\n12 * 2 = 24", "24", problem.question)       # 1.0

The chains of `synthetic.py` (a start value and K operations, the same draws, the same
hash-decided held-out split), asked in `WORDING` as the user turn of the model's chat template
and answered in the model's own words, without <step> tags: each non-blank line of a reply is a
step (`data.step_split = "lines"`). The reward is the reply's last integer against the answer
(`final_number_reward`). configs/smollm2_line_chains.py trains on it; docs/claim2_real.md has
the measurements that chose the wording, the chain lengths and the generator's format SFT.

Line truth (`first_error`; the oracle arm's step labels, never a learned model's reward). A
line is read for its equations "a op b = c" (`read_line`: `*`, `x`, `×`, `·` multiply, `-`,
`−`, `–` subtract, markdown bold, LaTeX delimiters and list markers ignored; chained
"7 + 5 = 12 * 2 = 24" is two equations). Walking the lines in order, with `v` the previous
equation's result (the start value before the first) and k the operations done:

  * each equation is right when it applies operation k of the problem to `v` (either order for
    + and *) and its result is the arithmetic's; it then moves `v` to its result. So, as in
    ProcessBench, a line that carries an earlier mistake forward correctly is not an error;
    the first mistake is;
  * a line with an `=` that holds no equation, or a longer expression ("(7 + 5) * 2 = 24",
    "7 + 5 + 3 = 15"), is wrong: the task asks for one calculation per line;
  * an equation after the K-th is wrong (an extra operation);
  * lines without `=` are not judged (prose, "Start with 7."); an operation written in words
    is not read, so its error shows at the next equation that uses it;
  * after the last line: fewer than K equations is a missing step (first error = the number of
    lines: the oracle marks the last line wrong, run/oracle_feedback.py); K right equations
    with a last integer that is not the answer ("The result is 25.") is wrong at the line of
    that integer.

So a reply's lines are all right (first error -1) exactly when its K equations are right in
order and its last integer is the answer: every reply with first error -1 has reward 1.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from tango_jax.data import synthetic
from tango_jax.data.addition import last_integer
from tango_jax.data.datasets import Problem, StreamPosition
from tango_jax.data.synthetic import (
    MAX_ATTEMPTS,
    OP_OF_SYMBOL,
    ArithConfig,
    ArithProblem,
    ArithSolution,
    Draws,
    Op,
    apply_op,
    problem_at,
    reference_solution,
    slipped_solution,
)
from tango_jax.data.synthetic_labels import parse_question, verification_transcript
from tango_jax.data.task import GeneratedTask, alternating_bench
from tango_jax.text import formats
from tango_jax.text.answer_check import RewardKind

SOURCE = "line-chains"
# The question as the model is asked it ("{chain}": the synthetic question, "Start with 7. Add
# 5, then multiply by 2. What is the result?"). Measured zero-shot with
# scripts/bench/smollm2_chain_probe.py (docs/claim2_real.md): none reaches the band (0.03-0.08
# sampled), so the configs use the wording that asks for the format their SFT teaches.
WORDINGS = {
    "plain": "{chain}",
    "lines": '{chain} Write one calculation per line, like "7 + 5 = 12".',
    "example": (
        "Solve it with one calculation per line.\n"
        "Example: Start with 4. Add 3, then multiply by 2.\n"
        "4 + 3 = 7\n7 * 2 = 14\n\n"
        "{chain}"
    ),
}
WORDING = WORDINGS["lines"]
_CHAIN = re.compile(r"Start with \d+\. .+?\. What is the result\?")

# --- reading a line ---------------------------------------------------------------------------

_SYMBOLS = (("\\times", "*"), ("×", "*"), ("·", "*"), ("⋅", "*"), ("\\cdot", "*"))
_SYMBOLS += (("÷", "/"), ("\\div", "/"), ("−", "-"), ("–", "-"), ("—", "-"))
_MARKUP = re.compile(r"\*\*|__|[$`]|\\[()\[\]]")  # bold, LaTeX and code delimiters
_LIST_MARKER = re.compile(r"^\s*(?:[-*•]|\d+[.)]|step \d+\s*[:.)])\s+", re.IGNORECASE)
_X_TIMES = re.compile(r"(?<=\d)\s*[xX]\s*(?=\d)")
# "a op b = c" at every position (overlapping, so that "7 + 5 = 12 * 2 = 24" gives both), not
# inside a longer number; c may be negative, a decimal is not an integer.
_EQUATION = re.compile(r"(?<![\d.])(?=(-?\d+)\s*([-+*/])\s*(\d+)\s*=\s*(-?\d+)(?!\.?\d))")
_COMPOUND_BEFORE = re.compile(r"[-+*/()]\s*$")  # "7 + 5 + 3 = 15", "(7 + 5) * 2 = 24"
_COMMUTES = (Op.ADD, Op.MUL)


@dataclasses.dataclass(frozen=True)
class Equation:
    """One "a op b = c" as written."""

    a: int
    op: Op
    b: int
    c: int


@dataclasses.dataclass(frozen=True)
class LineRead:
    """What a line states: its equations in order, and whether it has a calculation that is
    not one (an `=` without an equation, or an equation inside a longer expression)."""

    equations: tuple[Equation, ...]
    unreadable: bool


def normalize(line: str) -> str:
    """The line with the usual variants of the symbols made plain: markup and a leading list
    marker removed, multiplication as `*`, subtraction as `-`, division as `/`."""
    text = _MARKUP.sub("", line)
    for variant, plain in _SYMBOLS:
        text = text.replace(variant, plain)
    text = _LIST_MARKER.sub("", text)
    return _X_TIMES.sub(" * ", text)


def read_line(line: str) -> LineRead:
    """The equations a line states ("a op b = c", in order; chained ones each), and whether it
    holds a calculation that is not such an equation."""
    text = normalize(line)
    equations, unreadable = [], False
    for m in _EQUATION.finditer(text):
        if _COMPOUND_BEFORE.search(text[: m.start()]):
            unreadable = True
            continue
        a, symbol, b, c = m.groups()
        equations.append(Equation(int(a), OP_OF_SYMBOL[symbol], int(b), int(c)))
    unreadable |= "=" in text and not equations
    return LineRead(tuple(equations), unreadable)


def equation_right(eq: Equation, value: int, op: Op, operand: int) -> bool:
    """`eq` applies (op, operand) to `value` (either order for + and *) and gets its result."""
    operands = (eq.a, eq.b) == (value, operand)
    swapped = op in _COMMUTES and (eq.a, eq.b) == (operand, value)
    return eq.op is op and (operands or swapped) and eq.c == apply_op(op, value, operand)


def first_error(problem: ArithProblem, lines: Sequence[str]) -> int:
    """The 0-based index of the first wrong line of a reply (its non-blank lines), -1 when all
    are right, len(lines) when a step is missing (the module docstring has the rules)."""
    value, done = problem.start, 0
    for k, line in enumerate(lines):
        read = read_line(line)
        if read.unreadable:
            return k
        for eq in read.equations:
            if done == len(problem.ops) or not equation_right(eq, value, *problem.ops[done]):
                return k
            value, done = eq.c, done + 1
    if done < len(problem.ops):
        return len(lines)
    if last_integer("\n".join(lines)) != str(problem.answer):
        return max(k for k, line in enumerate(lines) if last_integer(line) is not None)
    return -1


def final_number_reward(completion: str, answer: str, question: str) -> float:
    """1.0 when the reply's last integer is the answer, else 0.0 (`data.reward`)."""
    del question  # the gold answer says all
    return float(last_integer(completion) == answer.strip())


# --- problems and solutions -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ChainQuestion:
    """A chain asked in a wording (`WORDINGS`); split and id are the chain's own."""

    chain: ArithProblem
    wording: str = WORDING

    @property
    def question(self) -> str:
        return self.wording.format(chain=self.chain.question)

    @property
    def answer(self) -> int:
        return self.chain.answer

    @property
    def id(self) -> str:
        return self.chain.id

    def to_problem(self) -> Problem:
        return Problem(self.question, str(self.answer), SOURCE, self.id)


def parse_chain(question: str) -> ArithProblem | None:
    """The chain a question asks (the last one it states: an example comes first), or None."""
    found = _CHAIN.findall(question)
    return parse_question(found[-1]) if found else None


@dataclasses.dataclass(frozen=True)
class LineSolution:
    """A solution written one operation per line ("7 + 5 = 12"), right or with one slip."""

    problem: ChainQuestion
    arith: ArithSolution

    @property
    def steps(self) -> list[str]:
        return self.arith.steps

    @property
    def text(self) -> str:
        return "\n".join(self.steps)

    @property
    def correct(self) -> bool:
        return self.arith.correct

    @property
    def first_error(self) -> int | None:
        return self.arith.first_error


class LineChainStream(synthetic.SyntheticStream):
    """The synthetic stream's chains (same draws, same positions), asked in `wording`."""

    def __init__(self, config, batch_size, *, seed, position=None, wording: str = WORDING):
        super().__init__(config, batch_size, seed=seed, position=position)
        self.wording = wording

    def batch_at(self, index: int) -> list[Problem]:
        seed, size = self.position.seed, self.batch_size
        return [
            ChainQuestion(problem_at(self.config, i, seed=seed), self.wording).to_problem()
            for i in range(index * size, (index + 1) * size)
        ]


# --- the task (data/task.py) ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LineChainTask(GeneratedTask):
    """The line chains with their SFT sets and line truth. `config`: the chains' difficulty
    and SFT mix (`data.arith`); `wording`: how a chain is asked."""

    config: ArithConfig = ArithConfig()
    wording: str = WORDING
    source = SOURCE
    reward_kind = RewardKind.MATH  # without data.reward; the configs use final_number_reward

    def ask(self, chain: ArithProblem) -> ChainQuestion:
        return ChainQuestion(chain, self.wording)

    def sft_problem(self, i: int, seed: int) -> ChainQuestion:
        return self.ask(problem_at(self.config, i, seed=seed, purpose="sft-generator"))

    def generator_slip(self, i: int, seed: int) -> bool:
        return Draws("sft-generator-slip", seed, i).chance(self.config.slip_fraction)

    def verifier_case(self, i: int, seed: int) -> tuple[ChainQuestion, bool]:
        chain = problem_at(self.config, i, seed=seed, purpose="sft-verifier")
        right = Draws("sft-verifier-slip", seed, i).chance(self.config.verifier_correct_fraction)
        return self.ask(chain), right

    def solution(self, problem: ChainQuestion, correct: bool, seed: int) -> LineSolution:
        chain = problem.chain
        arith = reference_solution(chain) if correct else slipped_solution(chain, seed=seed)
        return LineSolution(problem, arith)

    def verification_transcript(self, solution: LineSolution, seed: int) -> str:
        """The arithmetic chains' transcript of the same steps (`data.arith`'s labels and
        analyses; the verdict is the outcome)."""
        return verification_transcript(solution.arith, self.config, seed=seed)

    def unlabelled(self, correct: bool) -> bool:
        labels = self.config.verifier_sft_labels
        return labels is synthetic.VerifierLabels.UNLABELLED or (
            labels is synthetic.VerifierLabels.UNLABELLED_WRONG and not correct
        )

    def shown_to_verifier(self, solution: LineSolution) -> str:
        """One <step> per line, as the verifier sees a reply under `step_split = "lines"`."""
        return formats.tagged_solution(solution.text, formats.StepSplit.LINES)

    def stream(self, batch_size: int, *, seed: int, position: StreamPosition | None):
        return LineChainStream(
            self.config, batch_size, seed=seed, position=position, wording=self.wording
        )

    def held_out_problems(self, n: int, *, seed: int) -> list[ChainQuestion]:
        return [self.ask(c) for c in synthetic.held_out_problems(self.config, n, seed=seed)]

    def process_bench(self, n: int, *, seed: int) -> list[LineSolution]:
        """`n` held-out solutions, right and with one slip in turn (the miniature ProcessBench)."""
        return alternating_bench(
            lambda i: self.ask(
                problem_at(self.config, i, seed=seed, held_out=True, purpose="process-bench")
            ),
            lambda p, wrong: self.solution(p, not wrong, seed),
            n,
            attempts=MAX_ATTEMPTS,
        )

    def parse(self, question: str) -> ArithProblem | None:
        return parse_chain(question)

    def solution_first_error(self, problem: ArithProblem, steps: Sequence[str]) -> int:
        return first_error(problem, steps)

    def step_analyses(self, solution: LineSolution) -> list[str]:
        """Each line's operation recomputed ("Step 2 Analysis: 12 * 2 = 24.")."""
        out = []
        for i, step in enumerate(solution.steps):
            eq = read_line(step).equations[0]
            value = apply_op(eq.op, eq.a, eq.b)
            out.append(f"Step {i + 1} Analysis: {step.rsplit(' = ', 1)[0]} = {value}.")
        return out

    def bucket(self, problem: Problem) -> str | None:
        """The held-out accuracy per chain length: "k_ops"."""
        chain = parse_chain(problem.question)
        return None if chain is None else f"{len(chain.ops)}_ops"
