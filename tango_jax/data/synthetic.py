r"""The synthetic task of the tiny runs: arithmetic chains with known answers, in Tango's formats.

A problem is a start value and K operations, asked in words; its reference solution has one
`<step>` per operation:

    Start with 7. Add 5, then multiply by 3, then subtract 4. What is the result?

    <think>
    <step>7 + 5 = 12</step>
    <step>12 * 3 = 36</step>
    <step>36 - 4 = 32</step>
    </think>
    <answer>\boxed{32}</answer>

Why this task: the gold answer is exact (the outcome reward is meaningful), every step can be
checked on its own (so a verifier's step judgments are right or wrong, and a first wrong step is
defined, as in ProcessBench), and `ArithConfig` turns the difficulty up or down until a 2-layer
model sits in the range where RL has something to do (roughly 20-70% after a short SFT).

Splits. Whether a problem is held out depends only on a hash of its question text
(`ArithConfig.eval_fraction` of all problems), so the training stream and the held-out set are
disjoint for every seed and every difficulty setting; changing the config never moves a problem
from one side to the other.

Determinism. Every random choice comes from BLAKE2b of (purpose, seed, index, attempt, draw
number), not from a library generator, so problem i of a stream is the same on every machine,
Python and NumPy version, and can be computed without the problems before it (the stream is
indexed by step; resuming needs no replay).

The SFT sets and the step-level truth built from these problems (first wrong steps, the
miniature ProcessBench) are in `synthetic_labels.py`.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import re
from collections.abc import Iterator

from tango_jax.data.datasets import Problem, StreamPosition
from tango_jax.text import formats

SOURCE = "synthetic-arith"
MAX_ATTEMPTS = 1000  # draws per problem before the split is declared empty


class VerifierLabels(enum.Enum):
    """Step judgments of a verifier SFT transcript; the verdict is always the outcome label."""

    ALL_STEPS = "all_steps"  # every step judgment = the outcome label
    RANDOM_STEP = "random_step"  # wrong solution: one INCORRECT at a random step, rest CORRECT
    # RANDOM_STEP's text, but the step judgments of a K-step transcript (K > 1) carry no SFT
    # loss: the outcome label says nothing about them, so they are not taught at all (RANDOM_STEP
    # teaches that a wrong solution's INCORRECT sits anywhere). The verdict keeps its label, and
    # so does the one judgment of a one-step problem (its outcome).
    UNLABELLED = "unlabelled"
    # UNLABELLED for a wrong solution; a right one's step judgments keep their label, CORRECT,
    # which is the outcome label copied into every step as ALL_STEPS does (a right synthetic
    # solution has no wrong step). Measured on the tiny models (docs/miniature.md): the SFT
    # verifier then says CORRECT at every step (P(INCORRECT) 0.01 at the slip), and
    # outcome-reward RL cannot find the slip from there; UNLABELLED works better.
    UNLABELLED_WRONG = "unlabelled_wrong"


class VerifierAnalysis(enum.Enum):
    """The text of each step's analysis in a verifier SFT transcript."""

    GENERIC = "generic"  # "Step k Analysis: check the arithmetic."
    RECOMPUTE = "recompute"  # "Step k Analysis: 12 * 3 = 36": the step's operation recomputed
    # "Step k Analysis: written 37, computed 12 * 3 = 36": the step's result as written, then
    # the operation recomputed (the two numbers a careful checker puts side by side)
    COMPARE = "compare"
    # "Step k Analysis: 12 * 3 = 37": the step restated as written (with `verifier_sft_facts`,
    # the judgment after it can reuse a learned "this equation is false" feature)
    RESTATE = "restate"


class Op(enum.Enum):
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"  # exact division only


_SYMBOL = {Op.ADD: "+", Op.SUB: "-", Op.MUL: "*", Op.DIV: "/"}
OP_OF_SYMBOL = {v: k for k, v in _SYMBOL.items()}
# A step as the solutions write it: "a op o = v" (a generated one may be anything).
STEP = re.compile(r"(-?\d+) ([-+*/]) (\d+) = (-?\d+)")
_PHRASE = {
    Op.ADD: "add {}",
    Op.SUB: "subtract {}",
    Op.MUL: "multiply by {}",
    Op.DIV: "divide by {}",
}
# Slips: off by one or two (a counting slip) or by ten (a carry slip). Ops are injective on the
# values they accept, so a slip always changes the final answer.
_SLIP_OFFSETS = (-10, -2, -1, 1, 2, 10)


@dataclasses.dataclass(frozen=True)
class ArithConfig:
    """Difficulty of the arithmetic chains and the mix of the SFT data.

    The defaults are calibrated for tiny-qwen2 (2 layers, width 128, ~0.5M parameters): three
    steps on values up to 20, adding or subtracting 1-5, multiplying by 2 or 3. A generator SFT
    of 300 steps x 64 examples (cosine lr 3e-3) reached 22% greedy accuracy on held-out problems
    (57% of its steps were right, format 100%), inside the 20-70% range where RL has something to
    learn. With value_max 30 and operand_max 5 it reached 16%; with 3-4 steps, value_max 50
    and operand_max 9, 12%. Harder: more steps, larger ranges, Op.DIV; easier: fewer steps.
    """

    min_steps: int = 3  # K, the number of operations, drawn uniformly from [min_steps, max_steps]
    max_steps: int = 3  # (3 or more keeps the generator format score at 1, TANGO_SPEC §4.2)
    start_max: int = 9  # the start value is drawn from [1, start_max]
    operand_max: int = 5  # add / subtract operands are drawn from [1, operand_max]
    mul_max: int = 3  # multiply / divide operands are drawn from [2, mul_max]
    value_max: int = 20  # every intermediate and final value of a problem lies in [0, value_max]
    # Allowed operations; each step picks one of those that keep the value in range. ADD and SUB
    # are required: with both, every value in [0, value_max] has a next step.
    ops: tuple[Op, ...] = (Op.ADD, Op.SUB, Op.MUL)
    eval_fraction: float = 0.1  # share of all problems (by question hash) that is held out
    slip_fraction: float = 0.2  # generator SFT: share of solutions with one arithmetic slip
    verifier_correct_fraction: float = 0.5  # verifier SFT: share of correct solutions
    # Verifier SFT transcripts (both carry the outcome label only; see synthetic_labels.py).
    verifier_sft_labels: VerifierLabels = VerifierLabels.ALL_STEPS
    verifier_sft_analysis: VerifierAnalysis = VerifierAnalysis.GENERIC
    # Verifier SFT: share of examples replaced by arithmetic-fact checks ("Is this equation
    # right?" on one equation, answered \boxed{CORRECT} or \boxed{INCORRECT}, half of them
    # false by a slip offset). The equations are single steps of other training problems, never
    # the steps of a verified solution: arithmetic knowledge (what a pretrained verifier brings),
    # not step labels of the transcripts (docs/miniature.md).
    verifier_sft_facts: float = 0.0
    # Verifier SFT: share of examples about one-step problems ("Start with 12. Multiply by 3."),
    # solved right or with a slip, in the usual transcript format. Still outcome labels only:
    # with a single step, the outcome is that step's truth, so these teach the check of one
    # step (what a pretrained verifier brings) without any step label on a K-step solution.
    # With a RECOMPUTE analysis the 2-layer models learn that check; without an analysis they
    # do not (docs/miniature.md).
    verifier_sft_one_step: float = 0.0

    def __post_init__(self):
        checks = [
            (1 <= self.min_steps <= self.max_steps, "1 <= min_steps <= max_steps"),
            (1 <= self.start_max <= self.value_max, "1 <= start_max <= value_max"),
            (self.operand_max >= 1, "operand_max >= 1"),
            (self.mul_max >= 2 or not {Op.MUL, Op.DIV} & set(self.ops), "mul_max >= 2"),
            (Op.ADD in self.ops and Op.SUB in self.ops, "ops include Op.ADD and Op.SUB"),
            (len(set(self.ops)) == len(self.ops), "ops without repeats"),
            (0.0 < self.eval_fraction < 1.0, "0 < eval_fraction < 1"),
            (0.0 <= self.slip_fraction <= 1.0, "0 <= slip_fraction <= 1"),
            (0.0 <= self.verifier_correct_fraction <= 1.0, "0 <= verifier_correct_fraction <= 1"),
            (0.0 <= self.verifier_sft_facts <= 1.0, "0 <= verifier_sft_facts <= 1"),
            (0.0 <= self.verifier_sft_one_step <= 1.0, "0 <= verifier_sft_one_step <= 1"),
            (
                self.verifier_sft_facts + self.verifier_sft_one_step <= 1.0,
                "verifier_sft_facts + verifier_sft_one_step <= 1",
            ),
        ]
        for ok, rule in checks:
            if not ok:
                raise ValueError(f"ArithConfig needs {rule}; got {self}.")


class Draws:
    """Uniform integers from BLAKE2b of a key and a counter: stable everywhere, forever."""

    def __init__(self, *key: object):
        self._key = repr(key).encode()
        self._count = 0

    def below(self, n: int) -> int:
        """An integer in [0, n); the modulo bias of 64 bits is below 1e-16 for these n."""
        digest = hashlib.blake2b(
            self._key + self._count.to_bytes(8, "little"), digest_size=8
        ).digest()
        self._count += 1
        return int.from_bytes(digest, "little") % n

    def choice(self, options):
        return options[self.below(len(options))]

    def uniform(self) -> float:
        """A float in [0, 1), a multiple of 2**-53 (exact: `chance(p)` is `uniform() < p`)."""
        return self.below(1 << 53) / (1 << 53)

    def chance(self, p: float) -> bool:
        return self.uniform() < p


def apply_op(op: Op, value: int, operand: int) -> int:
    if op is Op.ADD:
        return value + operand
    if op is Op.SUB:
        return value - operand
    if op is Op.MUL:
        return value * operand
    return value // operand


def _operands(config: ArithConfig, op: Op, value: int) -> list[int]:
    """The operands that keep the next value an integer in [0, value_max]."""
    if op in (Op.ADD, Op.SUB):
        candidates = range(1, config.operand_max + 1)
    else:
        candidates = range(2, config.mul_max + 1)
    return [
        o
        for o in candidates
        if (op is not Op.DIV or value % o == 0) and 0 <= apply_op(op, value, o) <= config.value_max
    ]


@dataclasses.dataclass(frozen=True)
class ArithProblem:
    """A start value and K (operation, operand) pairs; the rest is derived."""

    start: int
    ops: tuple[tuple[Op, int], ...]

    @property
    def question(self) -> str:
        phrases = [_PHRASE[op].format(o) for op, o in self.ops]
        chain = ", then ".join(phrases)
        return f"Start with {self.start}. {chain[0].upper()}{chain[1:]}. What is the result?"

    @property
    def values(self) -> tuple[int, ...]:
        """The value after each operation; the last one is the answer."""
        out, v = [], self.start
        for op, o in self.ops:
            v = apply_op(op, v, o)
            out.append(v)
        return tuple(out)

    @property
    def answer(self) -> int:
        return self.values[-1]

    @property
    def id(self) -> str:
        return _digest(self.question).hex()[:16]

    def to_problem(self) -> Problem:
        return Problem(self.question, str(self.answer), SOURCE, self.id)


def _digest(question: str) -> bytes:
    return hashlib.blake2b(question.encode(), digest_size=16, person=b"tango-arith").digest()


def is_held_out(question: str, config: ArithConfig) -> bool:
    """Whether a question belongs to the held-out split: a hash of its text alone decides."""
    return int.from_bytes(_digest(question)[:8], "little") < config.eval_fraction * 2.0**64


def _draw_problem(config: ArithConfig, draws: Draws) -> ArithProblem:
    """One random chain: K uniform, then at each step an operation uniform among those with a
    valid operand, and an operand uniform among those (ADD and SUB guarantee there is one)."""
    num_steps = config.min_steps + draws.below(config.max_steps - config.min_steps + 1)
    start = value = 1 + draws.below(config.start_max)
    ops = []
    for _ in range(num_steps):
        options = [(op, _operands(config, op, value)) for op in config.ops]
        op, operands = draws.choice([(op, operands) for op, operands in options if operands])
        operand = draws.choice(operands)
        ops.append((op, operand))
        value = apply_op(op, value, operand)
    return ArithProblem(start, tuple(ops))


def problem_at(
    config: ArithConfig, index: int, *, seed: int, held_out: bool = False, purpose: str = "rl"
) -> ArithProblem:
    """Problem `index` of the stream (purpose, seed) of one split: random draws are retried
    until one lands in the requested split (1 / eval_fraction tries on average for the held-out
    split). Pure: the same arguments give the same problem.

    purpose: names independent streams over the same split ("rl" prompts, "sft-generator" and
    "sft-verifier" data, "eval"), so the SFT data and the RL prompts are different draws.
    """
    for attempt in range(MAX_ATTEMPTS):
        problem = _draw_problem(config, Draws(purpose, seed, index, attempt))
        if is_held_out(problem.question, config) == held_out:
            return problem
    raise ValueError(
        f"no problem of the {'held-out' if held_out else 'training'} split found in "
        f"{MAX_ATTEMPTS} draws for {config}; widen the ranges or change eval_fraction."
    )


def held_out_problems(config: ArithConfig, n: int, *, seed: int = 0) -> list[ArithProblem]:
    """The first `n` distinct held-out problems of stream ("eval", seed): the evaluation set.

    Use the same seed for every run that should be compared (the default 0 is independent of
    the training seed on purpose). Raises if the held-out space has fewer than n problems.
    """
    seen: dict[str, ArithProblem] = {}
    index = 0
    while len(seen) < n:
        if index >= 50 * n + MAX_ATTEMPTS:
            raise ValueError(
                f"only {len(seen)} distinct held-out problems found for n = {n} with {config}; "
                "ask for fewer or widen the ranges (or raise eval_fraction)."
            )
        problem = problem_at(config, index, seed=seed, held_out=True, purpose="eval")
        seen.setdefault(problem.question, problem)
        index += 1
    return list(seen.values())


# --------------------------------------------------------------------------------------------
# Solutions.


@dataclasses.dataclass(frozen=True)
class ArithSolution:
    """A step-by-step solution: the value written after each step.

    first_error: index of the step whose arithmetic is wrong (later steps apply their operation
    correctly to the wrong value), or None for the reference solution. It is the step-level
    label of a ProcessBench-style check; the SFT data never show it to the verifier.
    """

    problem: ArithProblem
    values: tuple[int, ...]
    first_error: int | None = None

    @property
    def correct(self) -> bool:
        return self.values[-1] == self.problem.answer

    @property
    def steps(self) -> list[str]:
        before = (self.problem.start, *self.values[:-1])
        return [
            f"{a} {_SYMBOL[op]} {o} = {v}"
            for a, (op, o), v in zip(before, self.problem.ops, self.values)
        ]

    @property
    def text(self) -> str:
        """The response in the generator format (formats.render_generator_response)."""
        return formats.render_generator_response(self.steps, str(self.values[-1]))


def reference_solution(problem: ArithProblem) -> ArithSolution:
    return ArithSolution(problem, problem.values)


def _propagate(problem: ArithProblem, step: int, wrong: int) -> tuple[int, ...] | None:
    """Values with step `step` written as `wrong` and the later steps computed from it; None if
    that leaves the integers >= 0 (a negative value or an inexact division)."""
    values = [*problem.values[:step], wrong]
    for op, o in problem.ops[step + 1 :]:
        if op is Op.DIV and values[-1] % o:
            return None
        values.append(apply_op(op, values[-1], o))
    return tuple(values) if min(values) >= 0 else None


def slipped_solution(problem: ArithProblem, *, seed: int) -> ArithSolution:
    """The solution with one slip: a random step's result is off by one of `_SLIP_OFFSETS`, and
    the error carries through to the answer. Steps and offsets that would need a negative number
    or an inexact division are skipped. The choice is a function of (seed, question)."""
    options = [
        (step, values)
        for step, right in enumerate(problem.values)
        for offset in _SLIP_OFFSETS
        if right + offset >= 0 and (values := _propagate(problem, step, right + offset))
    ]
    # Never empty: +1 on the last step is always possible.
    step, values = Draws("slip", seed, problem.question).choice(options)
    return ArithSolution(problem, values, first_error=step)


# --------------------------------------------------------------------------------------------
# The RL prompt stream.


class SyntheticStream:
    """An endless, deterministic stream of training-split problems, `batch_size` per step.

        stream = SyntheticStream(config, batch_size=64, seed=1)
        problems = stream.next_batch()                # list[Problem]
        checkpoint["data"] = dataclasses.asdict(stream.position)
        ...
        stream = SyntheticStream(config, 64, seed=1, position=StreamPosition(**saved))

    Batch b holds problems b·B ... (b+1)·B - 1 of stream ("rl", seed): indexed by step, so
    resuming needs only the position. `position.epoch` is always 0 (the stream never ends).
    """

    def __init__(
        self,
        config: ArithConfig,
        batch_size: int,
        *,
        seed: int,
        position: StreamPosition | None = None,
    ):
        if batch_size < 1:
            raise ValueError(f"batch_size ({batch_size}) must be >= 1.")
        position = StreamPosition(seed) if position is None else position
        if position.seed != seed or position.epoch != 0 or position.index < 0:
            raise ValueError(
                f"position {position} does not belong to a synthetic stream with seed {seed} "
                "(epoch 0, index >= 0); resume with the seed the checkpoint was written with."
            )
        self.config, self.batch_size, self._position = config, batch_size, position

    @property
    def position(self) -> StreamPosition:
        """Where the next batch starts: save it with a checkpoint to resume the exact order."""
        return self._position

    def batch_at(self, index: int) -> list[Problem]:
        seed, size = self._position.seed, self.batch_size
        return [
            problem_at(self.config, i, seed=seed).to_problem()
            for i in range(index * size, (index + 1) * size)
        ]

    def next_batch(self) -> list[Problem]:
        batch = self.batch_at(self._position.index)
        self._position = dataclasses.replace(self._position, index=self._position.index + 1)
        return batch

    def __iter__(self) -> Iterator[list[Problem]]:
        while True:
            yield self.next_batch()
