"""A run's problems: the endless training stream and the held-out set, from `DataConfig`.

    stream, held_out = load_prompts(cfg.data, max_prompt_len=2048, position=None,
                                    tokenizer=lambda: load_tokenizer(generator_dir))
    problems = stream.next_batch()                    # data.prompts_per_step problems

File data (JSONL / parquet, Eurus-2) loses the problems whose generator prompt exceeds the
generator's `max_prompt_len`, as the official loader does (`filter_overlong_prompts`,
TANGO_SPEC §4.1), and says how many; the synthetic task's prompts are short by construction.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

from tango_jax.data import datasets, last_letter, synthetic
from tango_jax.data.datasets import Problem, PromptStream, StreamPosition
from tango_jax.data.last_letter import LetterConfig, LetterStream
from tango_jax.data.synthetic import ArithConfig, SyntheticStream
from tango_jax.schema import ConfigError
from tango_jax.text.answer_check import RewardKind
from tango_jax.text.template_files import TemplateFiles, load_templates
from tango_jax.text.templates import (
    PromptStyle,
    PromptTemplates,
    Templates,
    chat_prompt,
    render_generator_prompt,
)

log = logging.getLogger(__name__)


class DataSource(enum.Enum):
    SYNTHETIC = "synthetic"  # tango_jax.data.synthetic arithmetic chains (tiny configs)
    LAST_LETTER = (
        "last_letter"  # tango_jax.data.last_letter concatenation (configs/tiny_letters.py)
    )
    JSONL = "jsonl"  # local JSONL/parquet with question/answer fields
    EURUS2 = "eurus2"  # local copy of PRIME-RL/Eurus-2-RL-Data (math subset)

    @property
    def generated(self) -> bool:
        """A task generated in code: no files, built-in SFT sets, known step truth."""
        return self in (DataSource.SYNTHETIC, DataSource.LAST_LETTER)


@dataclasses.dataclass(frozen=True)
class DataConfig:
    # synthetic (generated arithmetic; no files) | last_letter (generated last-letter lists,
    # docs/last_letter.md) | jsonl (your own JSONL / JSON / parquet file) | eurus2. Never
    # inferred: a train_path, eval_path or field name set while the source is a generated one
    # is an error naming --config.data.source=jsonl (docs/data.md).
    source: DataSource = DataSource.SYNTHETIC
    train_path: str = ""  # jsonl / eurus2: local file or glob (no hub downloads at run time)
    eval_path: str = ""  # jsonl / eurus2: the held-out file (synthetic: generated)
    question_field: str = "question"  # jsonl: the question's field (dotted path: 'a.b', 'a.0.b')
    answer_field: str = "answer"  # jsonl: the gold answer's field (text or number)
    prompts_per_step: int = 256  # fresh prompts per global step
    eval_size: int = 500  # held-out problems per evaluation (all if the file is smaller)
    seed: int = 1  # data order (official data.seed = 1)
    prompt_style: PromptStyle = PromptStyle.FULL  # full (the paper's) | compact (tiny configs)
    arith: ArithConfig = ArithConfig()  # the synthetic task (data/synthetic.py)
    letters: LetterConfig = LetterConfig()  # the last-letter task (data/last_letter.py)
    # Files with the user's own prompt templates per role and variant (the official ones, say),
    # replacing prompt_style's built-ins; "" = built in (text/template_files.py, docs/config.md).
    template_files: TemplateFiles = TemplateFiles()
    # The outcome reward: "" = Math-Verify against the gold answer (the paper's); or a function
    # of your own, "module:function" called as f(completion, answer, question) -> [0, 1]
    # (text/reward_function.py, docs/reward.md).
    reward: str = ""

    @property
    def reward_kind(self) -> RewardKind:
        """Which check scores the outcome reward of this data (training and held-out): the
        run's own function, else exact match for last letters (a symbolic checker would accept
        a permutation), else Math-Verify."""
        if self.reward:
            return RewardKind.CUSTOM
        return RewardKind.EXACT if self.source is DataSource.LAST_LETTER else RewardKind.MATH

    @functools.cached_property
    def templates(self) -> PromptTemplates:
        """The run's prompt templates (read and checked once; preflight checked them first)."""
        return load_templates(self.prompt_style, self.template_files)


def load_prompts(
    cfg: DataConfig,
    *,
    max_prompt_len: int,
    position: StreamPosition | None,
    tokenizer: Callable[[], Any],
    chat_template: bool = False,
) -> tuple[PromptStream | SyntheticStream, list[Problem]]:
    """(training stream at `position`, held-out problems). `tokenizer()` gives the generator's
    tokenizer (only file data needs it, to measure prompts; `chat_template`: measured as the
    generator sees them, inside its chat template)."""
    if cfg.source is DataSource.SYNTHETIC:
        stream = SyntheticStream(cfg.arith, cfg.prompts_per_step, seed=cfg.seed, position=position)
        held_out = synthetic.held_out_problems(cfg.arith, cfg.eval_size, seed=cfg.seed)
        return stream, [p.to_problem() for p in held_out]
    if cfg.source is DataSource.LAST_LETTER:
        stream = LetterStream(cfg.letters, cfg.prompts_per_step, seed=cfg.seed, position=position)
        held_out = last_letter.held_out_problems(cfg.letters, cfg.eval_size, seed=cfg.seed)
        return stream, [p.to_problem() for p in held_out]
    train, evals = read_problems(cfg, "train"), read_problems(cfg, "eval")
    tok = tokenizer()
    total = len(train)
    train = drop_overlong(train, "train", tok, max_prompt_len, cfg.templates, chat_template)
    if len(train) < cfg.prompts_per_step:  # the record count itself was checked before the run
        raise ConfigError(
            f"config.data.prompts_per_step ({cfg.prompts_per_step}) is more than the "
            f"{len(train)} training problems whose prompt fits config.generator.max_prompt_len "
            f"({max_prompt_len}; {total - len(train)} of {total} are longer); lower it "
            f"(--config.data.prompts_per_step={len(train)}), raise generator.max_prompt_len or "
            "add records."
        )
    evals = drop_overlong(evals, "eval", tok, max_prompt_len, cfg.templates, chat_template)
    stream = PromptStream(train, cfg.prompts_per_step, seed=cfg.seed, position=position)
    return stream, evals[: cfg.eval_size]


# The names files commonly give their questions and answers (the fix suggested for a wrong one).
_USUAL_NAMES = {
    "question_field": ("problem", "question", "prompt", "query", "input", "instruction"),
    "answer_field": ("answer", "final_answer", "ground_truth", "gold", "target", "solution"),
}


def read_problems(cfg: DataConfig, split: str) -> list[Problem]:
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
