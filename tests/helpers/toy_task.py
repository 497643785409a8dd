"""A task of one's own in one file, as a user would write it (data/tasks.py): counting up by
one. "Start with 4. Add 1, then add 1. What is the result?" is solved in steps "4 + 1 = 5",
"5 + 1 = 6". Run it with --config.data.source=custom --config.data.task=toy_task:make (this
folder on PYTHONPATH). Its words are the arithmetic task's, so the tiny tokenizer reads it."""

from __future__ import annotations

import dataclasses
import random

from tango_jax.data.datasets import Problem, PromptStream
from tango_jax.data.task import GeneratedTask
from tango_jax.text import formats

SOURCE = "toy-count"


@dataclasses.dataclass(frozen=True)
class Count:
    start: int
    steps: int

    @property
    def question(self) -> str:
        then = ", then add 1" * (self.steps - 1)
        return f"Start with {self.start}. Add 1{then}. What is the result?"

    @property
    def id(self) -> str:
        return f"{self.start}+{self.steps}"

    def to_problem(self) -> Problem:
        return Problem(self.question, str(self.start + self.steps), SOURCE, self.id)


@dataclasses.dataclass(frozen=True)
class Solution:
    problem: Count
    values: tuple[int, ...]  # the value written after each step
    first_error: int | None = None

    @property
    def correct(self) -> bool:
        return self.values[-1] == self.problem.start + self.problem.steps

    @property
    def steps(self) -> list[str]:
        before = (self.problem.start, *self.values[:-1])
        return [f"{a} + 1 = {v}" for a, v in zip(before, self.values)]

    @property
    def text(self) -> str:
        return formats.render_generator_response(self.steps, str(self.values[-1]))


def _count(seed: int, i: int, held_out: bool) -> Count:
    rng = random.Random(f"{seed}/{i}/{held_out}")
    return Count(rng.randint(1, 9) + (10 if held_out else 0), rng.randint(1, 3))


class CountTask(GeneratedTask):
    source = SOURCE

    def sft_problem(self, i, seed):
        return _count(seed, i, False)

    def generator_slip(self, i, seed):
        return i % 4 == 3

    def verifier_case(self, i, seed):
        return _count(seed, 10_000 + i, False), i % 2 == 0

    def solution(self, problem, correct, seed):
        right = tuple(problem.start + k + 1 for k in range(problem.steps))
        if correct:
            return Solution(problem, right)
        k = problem.steps - 1  # the last step adds 2
        return Solution(problem, (*right[:k], right[k] + 1), first_error=k)

    def verification_transcript(self, solution, seed):
        k = solution.first_error
        judgments = [-1 if i == k else 1 for i in range(len(solution.steps))]
        return formats.render_verification(judgments, int(solution.correct))

    def unlabelled(self, correct):
        return True

    def stream(self, batch_size, *, seed, position):
        problems = [_count(seed, i, False).to_problem() for i in range(64)]
        return PromptStream(problems, batch_size, seed=seed, position=position)

    def held_out_problems(self, n, *, seed):
        return [_count(seed, i, True) for i in range(n)]

    def process_bench(self, n, *, seed):
        return [
            self.solution(p, i % 2 == 0, seed)
            for i, p in enumerate(self.held_out_problems(n, seed=seed))
        ]

    def parse(self, question):
        if not question.startswith("Start with "):
            return None
        start = int(question.split(".")[0].removeprefix("Start with "))
        return Count(start, question.count("dd 1"))

    def solution_first_error(self, problem, steps):
        value = problem.start
        for k, text in enumerate(steps):
            if k >= problem.steps or text.strip() != f"{value} + 1 = {value + 1}":
                return k
            value += 1
        return -1 if len(steps) == problem.steps else len(steps)

    def step_analyses(self, solution):
        return [f"Step {i + 1} Analysis: {s}" for i, s in enumerate(solution.steps)]


def make(data) -> CountTask:
    """The factory data.task names: the run's DataConfig in, the task out."""
    return CountTask()
