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
import enum
import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

from tango_jax.data import datasets, last_letter, synthetic
from tango_jax.data.datasets import Problem, PromptStream, StreamPosition
from tango_jax.data.last_letter import LetterConfig, LetterStream
from tango_jax.data.synthetic import ArithConfig, SyntheticStream
from tango_jax.tango.template_files import TemplateFiles, load_templates
from tango_jax.tango.templates import (
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
    source: DataSource = DataSource.SYNTHETIC  # synthetic | jsonl | eurus2
    train_path: str = ""  # local file / glob (no hub downloads at run time)
    eval_path: str = ""  # held-out set (synthetic: generated)
    question_field: str = "question"  # jsonl: dotted path of the question
    answer_field: str = "answer"  # jsonl: dotted path of the gold answer
    prompts_per_step: int = 256  # fresh prompts per global step
    eval_size: int = 500  # held-out problems per evaluation (all if the file is smaller)
    seed: int = 1  # data order (official data.seed = 1)
    prompt_style: PromptStyle = PromptStyle.FULL  # full (the paper's) | compact (tiny configs)
    arith: ArithConfig = ArithConfig()  # the synthetic task (data/synthetic.py)
    letters: LetterConfig = LetterConfig()  # the last-letter task (data/last_letter.py)
    # Files with the user's own prompt templates per role and variant (the official ones, say),
    # replacing prompt_style's built-ins; "" = built in (tango/template_files.py, README).
    template_files: TemplateFiles = TemplateFiles()

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
    fields = datasets.Fields(cfg.question_field, cfg.answer_field)
    if cfg.source is DataSource.EURUS2:
        train = datasets.load_eurus2(cfg.train_path)
    else:
        train = datasets.load_problems(cfg.train_path, fields)
    evals = datasets.load_problems(cfg.eval_path, fields)
    tok = tokenizer()
    train = drop_overlong(train, "train", tok, max_prompt_len, cfg.templates, chat_template)
    evals = drop_overlong(evals, "eval", tok, max_prompt_len, cfg.templates, chat_template)
    stream = PromptStream(train, cfg.prompts_per_step, seed=cfg.seed, position=position)
    return stream, evals[: cfg.eval_size]


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
        raise ValueError(
            f"every {split} problem's prompt exceeds generator.max_prompt_len ({limit})."
        )
    return kept
