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
import functools
from collections.abc import Callable
from typing import Any

from tango_jax.data.datasets import Problem, StreamPosition
from tango_jax.data.file_task import PromptFit, drop_overlong, missing_field, read_problems
from tango_jax.data.last_letter import LetterConfig
from tango_jax.data.synthetic import ArithConfig
from tango_jax.data.task import DataSource, Stream
from tango_jax.data.tasks import task_of
from tango_jax.text.answer_check import RewardKind
from tango_jax.text.formats import StepSplit
from tango_jax.text.template_files import TemplateFiles, load_templates
from tango_jax.text.templates import PromptStyle, PromptTemplates

# Re-exported: what callers import from here.
__all__ = ["DataConfig", "DataSource", "drop_overlong", "load_prompts", "missing_field"]
__all__ += ["read_problems"]


@dataclasses.dataclass(frozen=True)
class DataConfig:
    # synthetic (generated arithmetic; no files) | last_letter (generated last-letter lists,
    # docs/last_letter.md) | line_chains (the arithmetic chains of data.arith answered one
    # operation per line, docs/claim2_real.md) | jsonl (your own JSONL / JSON / parquet file)
    # | eurus2 | custom (a task of your own, data.task; data/tasks.py). Never inferred: a
    # train_path, eval_path or field name set while the source is a generated one is an error
    # naming --config.data.source=jsonl (docs/data.md).
    source: DataSource = DataSource.SYNTHETIC
    train_path: str = ""  # jsonl / eurus2: local file or glob (no hub downloads at run time)
    eval_path: str = ""  # jsonl / eurus2: the held-out file (synthetic: generated)
    question_field: str = "question"  # jsonl: the question's field (dotted path: 'a.b', 'a.0.b')
    answer_field: str = "answer"  # jsonl: the gold answer's field (text or number)
    prompts_per_step: int = 256  # fresh prompts per global step
    eval_size: int = 500  # held-out problems per evaluation (all if the file is smaller)
    seed: int = 1  # data order (official data.seed = 1)
    # False: the verifier's updates (its warm-up included) take their prompts from the one
    # stream the generator's updates take theirs from, as the paper's code does. True: from a
    # stream of their own (the same task keyed by seed + 7919: for file data, the same problems
    # in another order), so that a Tango run's generator updates take exactly the batches of a
    # GRPO run with the same seed (paired studies; run/prompt_streams.py).
    verifier_stream: bool = False
    # The verifier steps' batch (one solution per prompt, warm-up included), drawn from their own
    # stream: 0 = data.prompts_per_step. Needs data.verifier_stream=True, since a shared
    # stream's batches are the generator's. E.g. the paper's verifier recipe on a CPU-sized
    # Tango run: 32 solutions a verifier update while the generator keeps a GRPO run's 8 prompts
    # (configs/smollm2_verifier.py:tango).
    verifier_prompts_per_step: int = 0
    prompt_style: PromptStyle = PromptStyle.FULL  # full (the paper's) | compact (tiny configs)
    arith: ArithConfig = ArithConfig()  # the synthetic and line_chains tasks (data/synthetic.py)
    letters: LetterConfig = LetterConfig()  # the last-letter task (data/last_letter.py)
    # Files with the user's own prompt templates per role and variant (the official ones, say),
    # replacing prompt_style's built-ins; "" = built in (text/template_files.py, docs/config.md).
    template_files: TemplateFiles = TemplateFiles()
    # The outcome reward: "" = Math-Verify against the gold answer (the paper's); or a function
    # of your own, "module:function" called as f(completion, answer, question) -> [0, 1]
    # (text/reward_function.py, docs/reward.md).
    reward: str = ""

    # Where a generator response's steps are, for the verifier's step judgments and the step
    # rewards: tags (its <step>...</step> spans, the paper's format) | lines (each non-blank
    # line, shown to the verifier as one <step> per line; TRL's PRMTrainer step_separator="\n",
    # PRM800K's steps): for a model that answers in its own words (text/formats.py).
    step_split: StepSplit = StepSplit.TAGS

    # data.source=custom: the task of your own, "module:factory" with factory(data) -> the task
    # (data/tasks.py; a task.GeneratedTask subclass, or any object of the task.Task protocol).
    task: str = ""

    @property
    def verifier_batch(self) -> int:
        """Prompts in a verifier step's batch (`verifier_prompts_per_step`, else the shared
        `prompts_per_step`)."""
        return self.verifier_prompts_per_step or self.prompts_per_step

    @property
    def reward_kind(self) -> RewardKind:
        """Which check scores the outcome reward of this data (training and held-out): the
        run's own function, else its task's (exact match for last letters, whose symbolic check
        would accept a permutation; Math-Verify for the others)."""
        return RewardKind.CUSTOM if self.reward else task_of(self).reward_kind

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
) -> tuple[Stream, list[Problem]]:
    """(training stream at `position`, held-out problems) of the run's task (`tasks.task_of`).
    `tokenizer()` gives the generator's tokenizer (only file data needs it, to measure prompts;
    `chat_template`: measured as the generator sees them, inside its chat template)."""
    fit = PromptFit(tokenizer, max_prompt_len, cfg.templates, chat_template)
    return task_of(cfg).prompts(
        prompts_per_step=cfg.prompts_per_step,
        eval_size=cfg.eval_size,
        seed=cfg.seed,
        position=position,
        fit=fit,
    )
