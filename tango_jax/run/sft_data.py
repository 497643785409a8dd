"""SFT data from a teacher model (TANGO_SPEC §5): the teacher solves training problems in the
generator's `<step>` format; the solutions whose final answer is correct are kept.

    records, stats = generate_sft_records(teacher, problems, scorer, TeacherSettings(...))

The official pipeline samples Llama-3.1-70B-Instruct (its chat template around the generator
prompt; T = 0.1, top-p 0.5, one sample, prompts of at most 1024 tokens, responses of at most
3072) and keeps every response. Here only correct ones are kept by default (`keep_all=False`),
judged by the same Math-Verify check as the outcome reward; `keep_all=True` is the official
behaviour. Records are `{"id", "question", "answer", "response"}`: the JSONL that
`sft.generator.data_path` reads (the question is wrapped in the generator template there).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from tango_jax.data.datasets import Problem
from tango_jax.metrics.writer import Progress
from tango_jax.rollout.base import SamplingParams
from tango_jax.run import feedback
from tango_jax.run.roles import Role
from tango_jax.text import templates
from tango_jax.text.scoring_pool import OutcomeScorer


def teacher_text(prompt: str, tokenizer: Any, chat_template: bool) -> str:
    """The teacher's input: the generator prompt as the user turn of the teacher's chat
    template (with the assistant cue), or the plain prompt."""
    if not chat_template:
        return prompt
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            "the teacher's tokenizer has no chat template; pass --chat_template off to sample "
            "from the plain prompt."
        )
    messages = [{"role": "user", "content": prompt}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


@dataclasses.dataclass(frozen=True)
class Yield:
    problems: int  # problems given
    too_long: int  # left out: the prompt exceeds the teacher's max_prompt_len
    sampled: int  # responses generated
    correct: int  # with a correct final answer
    well_formatted: int  # with the generator format score 1.0
    kept: int  # written

    @property
    def rate(self) -> float:
        """Share of the sampled responses that were kept."""
        return self.kept / self.sampled if self.sampled else 0.0

    def line(self) -> str:
        return (
            f"kept {self.kept} of {self.sampled} responses ({100 * self.rate:.1f}%); correct "
            f"{self.correct}, well formatted {self.well_formatted}; {self.too_long} of "
            f"{self.problems} problems left out for a prompt over the teacher's budget"
        )


@dataclasses.dataclass(frozen=True)
class TeacherSettings:
    """How the teacher is prompted and sampled, and which of its responses are kept."""

    params: SamplingParams  # `params.n` samples per problem
    chat_template: bool  # the prompt as the user turn of its chat template (`teacher_text`)
    style: templates.Templates  # the generator prompt's templates
    batch_size: int  # problems per generate call
    timeout_s: float  # the answer check's limit per response
    keep_all: bool = False  # every response (the official pipeline), not only correct ones


def generate_sft_records(
    teacher: Role,
    problems: Sequence[Problem],
    scorer: OutcomeScorer,
    settings: TeacherSettings,
    *,
    on_records=None,
) -> tuple[list[dict[str, Any]], Yield]:
    """`params.n` teacher samples per problem, scored against the gold answers; the correct
    ones (all with `keep_all`) as SFT records, in problem order. `on_records(chunk)` is called
    with each batch's records as they are made (to write them as it goes)."""
    s = settings
    texts = [
        teacher_text(
            templates.render_generator_prompt(p.question, style=s.style),
            teacher.tokenizer,
            s.chat_template,
        )
        for p in problems
    ]
    lengths = [len(x) for x in teacher.tokenizer(texts, add_special_tokens=False)["input_ids"]]
    fits = [
        (p, t) for p, t, n in zip(problems, texts, lengths) if n <= teacher.config.max_prompt_len
    ]
    out: list[dict[str, Any]] = []
    sampled = correct = formatted = 0
    with Progress("teacher", total=len(fits)) as bar:
        for start in range(0, len(fits), s.batch_size):
            chunk = fits[start : start + s.batch_size]
            outs = teacher.generate([teacher.encode(t) for _, t in chunk], s.params)
            chunk_problems = [p for p, _ in chunk]
            solutions, _ = feedback.score_solutions(
                scorer,
                chunk_problems,
                outs,
                timeout_s=s.timeout_s,
                kind=feedback.task_reward_kind(chunk_problems),
            )
            records = [
                {
                    "id": sol.problem.id,
                    "question": sol.problem.question,
                    "answer": sol.problem.answer,
                    "response": sol.completion.text,  # as sampled: SFT trains on these tokens
                }
                for sol in solutions
                if s.keep_all or sol.correct
            ]
            sampled += len(solutions)
            correct += sum(sol.correct for sol in solutions)
            formatted += sum(sol.format_score == 1.0 for sol in solutions)
            out += records
            if on_records is not None:
                on_records(records)
            bar.update(len(chunk))
    stats = Yield(len(problems), len(problems) - len(fits), sampled, correct, formatted, len(out))
    return out, stats
