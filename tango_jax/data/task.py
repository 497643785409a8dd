r"""What a task is: the protocol the loop, the SFT, the evaluation and the step probe read a task
through, so that none of them knows a task by name.

A task gives the run's problems (the endless training stream and the held-out split), the
check of an answer (`reward_kind`), and, where it knows them, its labelled data: the SFT sets of
both roles, the step truth of any written solution, the miniature ProcessBench, the verifier's
step analyses and length buckets. The built-in tasks are the arithmetic chains
(`synthetic_labels.ArithmeticTask`), the last letters (`last_letter_labels.LetterTask`), the
chains answered line by line (`line_chains.LineChainTask`) and a file of one's own
(`file_task.FileTask`); `tasks.task_of` finds a run's task from its config,
including one of your own (`data.source=custom`, `data.task="module:factory"`).

A generated task with step truth subclasses `GeneratedTask`: it says how to draw a problem, a
right or wrong solution and the verifier's transcript of it, and inherits the SFT-example
builders both built-in generated tasks share.
"""

from __future__ import annotations

import abc
import dataclasses
import enum
import re
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from tango_jax.data.datasets import Problem, StreamPosition
from tango_jax.text import formats, templates
from tango_jax.text.answer_check import RewardKind
from tango_jax.text.process_bench import NO_ERROR, ProcessItem


class DataSource(enum.Enum):
    SYNTHETIC = "synthetic"  # tango_jax.data.synthetic arithmetic chains (tiny configs)
    LAST_LETTER = (
        "last_letter"  # tango_jax.data.last_letter concatenation (configs/tiny_letters.py)
    )
    # tango_jax.data.line_chains: the arithmetic chains answered one operation per line, by
    # an instruct model in its own words (configs/smollm2_line_chains.py)
    LINE_CHAINS = "line_chains"
    JSONL = "jsonl"  # local JSONL/parquet with question/answer fields
    EURUS2 = "eurus2"  # local copy of PRIME-RL/Eurus-2-RL-Data (math subset)
    CUSTOM = "custom"  # a task of your own, named by data.task ("module:factory")

    @property
    def generated(self) -> bool:
        """A task generated in code: no files (its problems, SFT sets and step truth, if any,
        come from the task)."""
        return self in (
            DataSource.SYNTHETIC,
            DataSource.LAST_LETTER,
            DataSource.LINE_CHAINS,
            DataSource.CUSTOM,
        )


@dataclasses.dataclass(frozen=True)
class SFTExample:
    """One supervised example: the model sees `prompt` and learns `response`.

    correct: the outcome label of the solution the example is about.
    problem_id: the id of the problem it comes from.
    no_loss: (start, end) character spans of `response` whose tokens carry no SFT loss (the
    step judgments of an outcome-only transcript); the rest of the response is learned.
    """

    prompt: str
    response: str
    correct: bool
    problem_id: str
    no_loss: tuple[tuple[int, int], ...] = ()


class Stream(Protocol):
    """A resumable endless stream of training problems (`datasets.PromptStream`)."""

    position: StreamPosition

    def next_batch(self) -> list[Problem]: ...


class Task(Protocol):
    """What a run reads of its task. `sft_examples`, `process_items`, `process_bench`,
    `first_error` and `step_analyses` may say the task has none (ValueError, [] or None)."""

    source: str  # the `Problem.source` of its problems ("" when they come from files)
    reward_kind: RewardKind  # the outcome check without a reward function of one's own

    def prompts(
        self,
        *,
        prompts_per_step: int,
        eval_size: int,
        seed: int,
        position: StreamPosition | None,
        fit: Any,
    ) -> tuple[Stream, list[Problem]]:
        """(the training stream at `position`, the held-out problems). `fit`
        (`file_task.PromptFit`) keeps the problems whose generator prompt fits its limit: file
        tasks use it; generated ones make prompts that fit."""
        ...

    def sft_examples(
        self, verifier: bool, n: int, *, seed: int, style: templates.Templates
    ) -> list[SFTExample]:
        """`n` SFT examples of the generator (or the verifier); ValueError if it has none."""
        ...

    def process_items(self, n: int, *, seed: int) -> list[ProcessItem]:
        """The miniature ProcessBench of the held-out evaluation ([] without step truth)."""
        ...

    def process_bench(self, n: int, *, seed: int) -> list[Any]:
        """Its solutions (`.problem.question`, `.text`, `.steps`, `.first_error`) for the step
        probe; ValueError without step truth."""
        ...

    def first_error(self, problem: Problem, steps: Sequence[str]) -> int | None:
        """The first wrong step of a written solution (-1: all right), None if unknown."""
        ...

    def step_analyses(self, solution: Any) -> list[str]:
        """Each step's analysis as the verifier's SFT writes it (the step probe's transcript)."""
        ...

    def bucket(self, problem: Problem) -> str | None:
        """The held-out problem's length bucket (accuracy per bucket), None without buckets."""
        ...


# --- what the generated tasks share ----------------------------------------------------------

# A step judgment's label word in a rendered transcript: the boxed label that ends a <step>.
_STEP_JUDGMENT = re.compile(r"\\boxed\{((?:IN)?CORRECT)\}" + re.escape(formats.STEP_CLOSE))


def step_judgment_spans(transcript: str) -> tuple[tuple[int, int], ...]:
    """The character spans of the step judgments' label words (CORRECT / INCORRECT) in a
    transcript from `formats.render_verification` (the verdict's label is not one)."""
    return tuple(m.span(1) for m in _STEP_JUDGMENT.finditer(transcript))


def as_process_items(solutions, text: Callable[[Any], str] | None = None) -> list[ProcessItem]:
    """Solutions of a generated task (`.problem.question`, `.text`, `.steps`, `.first_error`)
    as ProcessBench items; `text(solution)`: the solution as the verifier is shown it (default
    `.text`)."""
    return [
        ProcessItem(
            s.problem.question,
            s.text if text is None else text(s),
            len(s.steps),
            NO_ERROR if s.first_error is None else s.first_error,
        )
        for s in solutions
    ]


def alternating_bench(
    draw: Callable[[int], Any], solve: Callable[[Any, bool], Any], n: int, *, attempts: int
):
    """`n` solutions on the first distinct problems of `draw(0), draw(1), ...` (held-out
    problems with a `.question`): `solve(problem, wrong)`, right and wrong in turn; ValueError
    after 50·n + `attempts` draws."""
    out, seen, index = [], set(), 0
    while len(out) < n:
        problem = draw(index)
        index += 1
        if problem.question in seen:
            if index > 50 * n + attempts:
                raise ValueError(f"only {len(out)} distinct held-out problems for n = {n}.")
            continue
        seen.add(problem.question)
        out.append(solve(problem, len(out) % 2 == 1))
    return out


class GeneratedTask(abc.ABC):
    """A task generated in code with known step truth. A subclass gives its draws (each a pure
    function of (seed, index), so examples never depend on the order they are built in):

    * `sft_problem(i, seed)` and `generator_slip(i, seed)`: generator SFT example i's problem
      and whether its solution carries a slip;
    * `verifier_case(i, seed)`: verifier SFT example i, as (problem, correct) or as a finished
      `SFTExample` (a task's own kind of example, such as arithmetic's fact checks);
    * `solution(problem, correct, seed)`: a right solution, or one with a slip;
    * `verification_transcript(solution, seed)` and `unlabelled(correct)`: the verifier's
      outcome-labelled target, and whether its step judgments carry no loss (K > 1 steps);
    * `held_out_problems`, `stream`, `process_bench`, `parse`, `solution_first_error`,
      `step_analyses`, `bucket`, and, where its replies are not tagged,
      `shown_to_verifier`.
    """

    source: str = ""
    reward_kind: RewardKind = RewardKind.MATH

    # -- the SFT sets: one builder per role for every generated task

    def sft_examples(
        self, verifier: bool, n: int, *, seed: int, style: templates.Templates
    ) -> list[SFTExample]:
        build = self.verifier_sft_examples if verifier else self.generator_sft_examples
        return build(n, seed=seed, style=style)

    def generator_sft_examples(
        self, n: int, *, seed: int, style: templates.Templates = templates.PromptStyle.FULL
    ) -> list[SFTExample]:
        """`n` (generator prompt, solution) pairs; the drawn share of them with a slip."""
        out = []
        for i in range(n):
            problem = self.sft_problem(i, seed)
            solution = self.solution(problem, not self.generator_slip(i, seed), seed)
            prompt = templates.render_generator_prompt(problem.question, style=style)
            out.append(SFTExample(prompt, solution.text, solution.correct, problem.id))
        return out

    def verifier_sft_examples(
        self, n: int, *, seed: int, style: templates.Templates = templates.PromptStyle.FULL
    ) -> list[SFTExample]:
        """`n` (verifier prompt, outcome-labelled transcript) pairs; the step judgments of a
        K > 1 solution carry no loss where `unlabelled` says so."""
        out = []
        for i in range(n):
            case = self.verifier_case(i, seed)
            if isinstance(case, SFTExample):
                out.append(case)
                continue
            problem, correct = case
            solution = self.solution(problem, correct, seed)
            shown = self.shown_to_verifier(solution)
            prompt = templates.render_verifier_prompt(problem.question, shown, style=style)
            transcript = self.verification_transcript(solution, seed)
            many = len(solution.steps) > 1
            no_loss = step_judgment_spans(transcript) if many and self.unlabelled(correct) else ()
            out.append(SFTExample(prompt, transcript, correct, problem.id, no_loss))
        return out

    # -- problems

    def prompts(self, *, prompts_per_step, eval_size, seed, position, fit):
        stream = self.stream(prompts_per_step, seed=seed, position=position)
        held_out = self.held_out_problems(eval_size, seed=seed)
        return stream, [p.to_problem() for p in held_out]

    # -- step truth

    def process_items(self, n: int, *, seed: int) -> list[ProcessItem]:
        return as_process_items(self.process_bench(n, seed=seed), self.shown_to_verifier)

    def shown_to_verifier(self, solution) -> str:
        """A solution as the verifier's prompt shows it (SFT and ProcessBench items): its text,
        which is already tagged in the generator format; a task whose replies are split into
        lines (`data.step_split = "lines"`) shows them as <step> lines instead."""
        return solution.text

    def first_error(self, problem: Problem, steps: Sequence[str]) -> int | None:
        parsed = self.parse(problem.question)
        return None if parsed is None else self.solution_first_error(parsed, steps)

    def bucket(self, problem: Problem) -> str | None:
        return None

    # -- what a subclass gives

    @abc.abstractmethod
    def sft_problem(self, i: int, seed: int): ...

    @abc.abstractmethod
    def generator_slip(self, i: int, seed: int) -> bool: ...

    @abc.abstractmethod
    def verifier_case(self, i: int, seed: int) -> tuple[Any, bool] | SFTExample: ...

    @abc.abstractmethod
    def solution(self, problem, correct: bool, seed: int): ...

    @abc.abstractmethod
    def verification_transcript(self, solution, seed: int) -> str: ...

    @abc.abstractmethod
    def unlabelled(self, correct: bool) -> bool: ...

    @abc.abstractmethod
    def stream(self, batch_size: int, *, seed: int, position: StreamPosition | None) -> Stream: ...

    @abc.abstractmethod
    def held_out_problems(self, n: int, *, seed: int) -> list: ...

    @abc.abstractmethod
    def process_bench(self, n: int, *, seed: int) -> list: ...

    @abc.abstractmethod
    def parse(self, question: str): ...

    @abc.abstractmethod
    def solution_first_error(self, problem, steps: Sequence[str]) -> int: ...

    @abc.abstractmethod
    def step_analyses(self, solution) -> list[str]: ...
