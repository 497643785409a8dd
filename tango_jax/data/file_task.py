"""The task of a file of one's own (`data.source` jsonl or eurus2): problems read from the
training and held-out files, each record's question and answer where `data.question_field` and
`data.answer_field` say. It has no built-in SFT set and no step truth.

File data loses the problems whose generator prompt exceeds the generator's `max_prompt_len`,
as the official loader does (`filter_overlong_prompts`, TANGO_SPEC §4.1), and says how many.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

from tango_jax.data import datasets
from tango_jax.data.datasets import Problem, PromptStream, StreamPosition
from tango_jax.data.task import DataSource, SFTExample
from tango_jax.schema import ConfigError
from tango_jax.text.answer_check import RewardKind
from tango_jax.text.process_bench import ProcessItem
from tango_jax.text.templates import Templates, chat_prompt, render_generator_prompt

log = logging.getLogger("tango_jax.data.prompts")


@dataclasses.dataclass(frozen=True)
class PromptFit:
    """What decides whether a generator prompt fits: the generator's tokenizer (`tokenizer()`,
    called once, when a file task first needs it), its `max_prompt_len`, the run's templates
    and whether prompts sit inside the chat template."""

    tokenizer: Callable[[], Any]
    max_prompt_len: int
    templates: Templates
    chat_template: bool = False

    @functools.cached_property
    def _tokenizer(self) -> Any:
        return self.tokenizer()

    def keep(self, problems: Sequence[Problem], split: str) -> list[Problem]:
        """`drop_overlong` with these settings."""
        return drop_overlong(
            problems,
            split,
            self._tokenizer,
            self.max_prompt_len,
            self.templates,
            self.chat_template,
        )


@dataclasses.dataclass(frozen=True)
class FileTask:
    """Problems from the run's files. `data`: the run's DataConfig."""

    data: Any
    source = ""  # each problem's source is its file's name
    reward_kind = RewardKind.MATH

    def prompts(
        self,
        *,
        prompts_per_step: int,
        eval_size: int,
        seed: int,
        position: StreamPosition | None,
        fit: PromptFit,
    ) -> tuple[PromptStream, list[Problem]]:
        train, evals = read_problems(self.data, "train"), read_problems(self.data, "eval")
        total = len(train)
        train = fit.keep(train, "train")
        if len(train) < prompts_per_step:  # the record count itself was checked before the run
            raise ConfigError(
                f"config.data.prompts_per_step ({prompts_per_step}) is more than the "
                f"{len(train)} training problems whose prompt fits "
                f"config.generator.max_prompt_len ({fit.max_prompt_len}; {total - len(train)} "
                f"of {total} are longer); lower it (--config.data.prompts_per_step="
                f"{len(train)}), raise generator.max_prompt_len or add records."
            )
        evals = fit.keep(evals, "eval")
        stream = PromptStream(train, prompts_per_step, seed=seed, position=position)
        return stream, evals[:eval_size]

    def sft_examples(self, verifier: bool, n: int, *, seed: int, style) -> list[SFTExample]:
        role = "verifier" if verifier else "generator"
        raise ValueError(
            f"sft.{role}.enable needs SFT data: set sft.{role}.data_path to a JSONL of "
            "{question, response} records (the built-in SFT sets exist for the generated tasks "
            "only)."
        )

    def process_items(self, n: int, *, seed: int) -> list[ProcessItem]:
        return []  # no step truth

    def process_bench(self, n: int, *, seed: int) -> list:
        raise ValueError(
            f"data.source={self.data.source.value!r} has no known step truth to probe against: "
            "the step probe runs on the generated tasks (synthetic, last_letter)."
        )

    def first_error(self, problem: Problem, steps: Sequence[str]) -> int | None:
        return None

    def step_analyses(self, solution) -> list[str]:
        raise ValueError("a file task has no verifier SFT transcripts to analyse steps by.")

    def bucket(self, problem: Problem) -> str | None:
        return None


# The names files commonly give their questions and answers (the fix suggested for a wrong one).
_USUAL_NAMES = {
    "question_field": ("problem", "question", "prompt", "query", "input", "instruction"),
    "answer_field": ("answer", "final_answer", "ground_truth", "gold", "target", "solution"),
}


def read_problems(cfg: Any, split: str) -> list[Problem]:
    """Every problem of the `split` ("train" | "eval") file of a file source, read and checked
    (the run's pre-run checks call this before anything is written). A record without the
    configured question or answer field is a ConfigError naming the flag that fixes it."""
    path = cfg.train_path if split == "train" else cfg.eval_path
    if split == "train" and cfg.source is DataSource.EURUS2:
        try:
            return datasets.load_eurus2(path)
        except datasets.MissingFieldError as e:
            raise ConfigError(
                f"config.data.train_path ({path!r}): {e.file} is not in the Eurus-2-RL-Data "
                f"layout (no field {e.field!r}; its fields: {e.available}); for a file of "
                "your own use --config.data.source=jsonl with --config.data.question_field=... "
                "and --config.data.answer_field=..."
            ) from None
    fields = datasets.Fields(cfg.question_field, cfg.answer_field)
    try:
        return datasets.load_problems(path, fields)
    except datasets.MissingFieldError as e:
        raise missing_field(e, fields, "config.data.{}", "--config.data.{}={}") from None


def missing_field(
    e: datasets.MissingFieldError, fields: datasets.Fields, name: str, fix: str
) -> ConfigError:
    """The one-line error for a record without a configured field: `name` and `fix` are format
    strings for the setting ("question_field" / "answer_field") and for setting it to a value
    (the config's flags for training, `evaluate`'s own flags for its --data file)."""
    flag = "question_field" if e.field == fields.question else "answer_field"
    usual = [n for n in _USUAL_NAMES[flag] if n in e.available]
    close = usual or difflib.get_close_matches(e.field, e.available, n=1)
    example = close[0] if close else "NAME"
    where = "a record" if e.row is None else f"record {e.row}"
    return ConfigError(
        f"{name.format(flag)} ({e.field!r}): {where} of {e.file} has no such field (its "
        f"fields: {e.available}); pass the file's own name, e.g. {fix.format(flag, example)} "
        "(a dotted path for nested fields: 'a.b', 'a.0.b')."
    )


def drop_overlong(
    problems: Sequence[Problem],
    split: str,
    tokenizer: Any,
    limit: int,
    style: Templates,
    chat_template: bool = False,
) -> list[Problem]:
    """The problems whose generator prompt (inside the chat template with `chat_template`) has
    at most `limit` tokens, in order; says how many were dropped and fails if none is left."""
    texts = [render_generator_prompt(p.question, style=style) for p in problems]
    if chat_template:
        texts = [chat_prompt(t, tokenizer) for t in texts]
    lengths = [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
    kept = [p for p, n in zip(problems, lengths) if n <= limit]
    if len(kept) < len(problems):
        log.info(
            "%s data: dropped %d of %d problems whose prompt exceeds generator.max_prompt_len (%d)",
            split,
            len(problems) - len(kept),
            len(problems),
            limit,
        )
    if not kept:
        raise ConfigError(
            f"config.generator.max_prompt_len ({limit}): every {split} problem's prompt is "
            f"longer (tokens, template included); raise it (--config.generator.max_prompt_len="
            f"{max(lengths)} keeps them all) or use shorter questions."
        )
    return kept
