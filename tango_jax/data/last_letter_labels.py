r"""Labelled data of the last-letter task (`last_letter.py`): SFT sets and the miniature
ProcessBench.

SFT (App. D.2: a short format SFT of both models on short word lists):
  * generator: (prompt, solution) on `min_words`..`sft_max_words` words; `slip_fraction` of the
    solutions carry one wrong letter (the paper's SFT data are not filtered for correctness);
  * verifier: (verifier prompt, transcript) labelled by the outcome only. The verdict is the
    label; each step's analysis restates the step and sets the word's last letter beside the
    letter the step wrote ("kaz: p, z p"); the K step judgments of a K > 1 solution carry no
    loss (their text is the outcome label, with one INCORRECT at a random step of a wrong
    solution, but nothing is taught about them). A share `verifier_one_word` of the examples
    are one-word problems, whose single step judgment is the outcome and so is labelled: the
    check of one step, what a pretrained verifier brings (docs/miniature.md found the same
    design best on arithmetic). No step label of a K > 1 solution is used anywhere.

ProcessBench: `process_bench` gives held-out solutions with a known first wrong step, half
right, half with one wrong letter, in the RL range of word counts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from tango_jax.data import last_letter
from tango_jax.data.datasets import Problem, StreamPosition
from tango_jax.data.last_letter import (
    LetterConfig,
    LetterProblem,
    LetterSolution,
    problem_at,
    reference_solution,
    slipped_solution,
)
from tango_jax.data.synthetic import MAX_ATTEMPTS, Draws
from tango_jax.data.task import GeneratedTask, SFTExample, alternating_bench, as_process_items
from tango_jax.text import formats, templates
from tango_jax.text.answer_check import RewardKind
from tango_jax.text.process_bench import ProcessItem


def verification_transcript(solution: LetterSolution, *, seed: int) -> str:
    """The verifier SFT target for `solution` from its outcome label: all CORRECT for a right
    solution; for a wrong one, one INCORRECT at a step drawn at random (seeded by (seed,
    question)), independent of where the error is. Each analysis restates the step's word and
    letter, then sets the word's last letter beside the step's ("kaz: p, z p"): the two letters
    a judgment compares, side by side, which the 2-layer model learns to compare (it did not
    when they were apart; docs/last_letter.md)."""
    words = solution.problem.words
    if solution.correct:
        judgments = [1] * len(words)
    else:
        wrong = Draws("letter-verifier-location", seed, solution.problem.question).below(len(words))
        judgments = [-1 if i == wrong else 1 for i in range(len(words))]
    label = formats.CORRECT if solution.correct else formats.INCORRECT
    return formats.render_verification(judgments, label, step_analyses(solution))


def step_analyses(solution: LetterSolution) -> list[str]:
    """Each step's analysis as the verifier SFT writes it: the step's word and letter, then the
    word's last letter beside the step's ("Step 2 Analysis: kaz: p, z p")."""
    letters = solution.letters
    return [
        f"Step {i + 1} Analysis: {w}: {letters[i]}, {w[-1]} {letters[i]}"
        for i, w in enumerate(solution.problem.words)
    ]


def _solution(config: LetterConfig, problem, correct: bool, seed: int) -> LetterSolution:
    if correct:
        return reference_solution(problem)
    return slipped_solution(problem, seed=seed, alphabet=config.alphabet)


def generator_sft_examples(
    config: LetterConfig,
    n: int,
    *,
    seed: int,
    style: templates.Templates = templates.PromptStyle.FULL,
) -> list[SFTExample]:
    """`n` (generator prompt, solution) pairs of the training split on
    min_words..sft_max_words words; `slip_fraction` of them with one wrong letter."""
    return LetterTask(config).generator_sft_examples(n, seed=seed, style=style)


def verifier_sft_examples(
    config: LetterConfig,
    n: int,
    *,
    seed: int,
    style: templates.Templates = templates.PromptStyle.FULL,
) -> list[SFTExample]:
    """`n` (verifier prompt, outcome-only transcript) pairs of the training split (see the
    module doc); `verifier_correct_fraction` of the verified solutions are right,
    `verifier_one_word` of the problems have one word."""
    return LetterTask(config).verifier_sft_examples(n, seed=seed, style=style)


def process_bench(config: LetterConfig, n: int, *, seed: int = 0) -> list[LetterSolution]:
    """`n` held-out solutions with a known first wrong step in the RL range of word counts:
    alternately the reference solution (label -1) and one with a wrong letter at a random
    step (label = that step), on the first distinct problems of stream ("process-bench", seed)."""
    return alternating_bench(
        lambda i: problem_at(config, i, seed=seed, held_out=True, purpose="process-bench"),
        lambda p, wrong: _solution(config, p, not wrong, seed),
        n,
        attempts=MAX_ATTEMPTS,
    )


def process_items(config: LetterConfig, n: int, *, seed: int = 0) -> list[ProcessItem]:
    """`process_bench` as the evaluation's ProcessBench items."""
    return as_process_items(process_bench(config, n, seed=seed))


@dataclasses.dataclass(frozen=True)
class LetterTask(GeneratedTask):
    """The last-letter task (`last_letter.py`) with the labelled data above; answers checked by
    exact match (a symbolic checker would accept a permutation); accuracy per length bucket."""

    config: LetterConfig = LetterConfig()
    source = last_letter.SOURCE
    reward_kind = RewardKind.EXACT

    def sft_problem(self, i: int, seed: int) -> LetterProblem:
        span = (self.config.min_words, self.config.sft_max_words)
        return problem_at(self.config, i, seed=seed, purpose="sft-generator", words=span)

    def generator_slip(self, i: int, seed: int) -> bool:
        return Draws("letter-sft-generator-slip", seed, i).chance(self.config.slip_fraction)

    def verifier_case(self, i: int, seed: int) -> tuple[LetterProblem, bool]:
        """A one-word problem (`verifier_one_word` of them) or one on min_words..sft_max_words
        words; right with chance `verifier_correct_fraction`."""
        c = self.config
        single = Draws("letter-sft-verifier-kind", seed, i).chance(c.verifier_one_word)
        span = (1, 1) if single else (c.min_words, c.sft_max_words)
        purpose = "sft-verifier-one-word" if single else "sft-verifier"
        problem = problem_at(c, i, seed=seed, purpose=purpose, words=span)
        correct = Draws("letter-sft-verifier-slip", seed, i).chance(c.verifier_correct_fraction)
        return problem, correct

    def solution(self, problem: LetterProblem, correct: bool, seed: int) -> LetterSolution:
        return _solution(self.config, problem, correct, seed)

    def verification_transcript(self, solution: LetterSolution, seed: int) -> str:
        return verification_transcript(solution, seed=seed)

    def unlabelled(self, correct: bool) -> bool:
        return True  # outcome labels only: a K > 1 solution's step judgments are never taught

    def stream(self, batch_size: int, *, seed: int, position: StreamPosition | None):
        return last_letter.LetterStream(self.config, batch_size, seed=seed, position=position)

    def held_out_problems(self, n: int, *, seed: int) -> list[LetterProblem]:
        return last_letter.held_out_problems(self.config, n, seed=seed)

    def process_bench(self, n: int, *, seed: int) -> list[LetterSolution]:
        return process_bench(self.config, n, seed=seed)

    def parse(self, question: str) -> LetterProblem | None:
        return last_letter.parse_question(question)

    def solution_first_error(self, problem: LetterProblem, steps: Sequence[str]) -> int:
        return last_letter.first_error(problem, steps)

    def step_analyses(self, solution: LetterSolution) -> list[str]:
        return step_analyses(solution)

    def bucket(self, problem: Problem) -> str | None:
        """'in' for the RL range of word counts, 'unseen' beyond it."""
        parsed = last_letter.parse_question(problem.question)
        return None if parsed is None else self.config.bucket(len(parsed.words))
