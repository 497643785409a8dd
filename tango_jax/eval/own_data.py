"""A generator evaluated on a held-out file of one's own, scored by one's own reward
(`python -m tango_jax.evaluate --data FILE [--reward module:function]`).

The same evaluation as a run's held-out one (run/evaluation.py): the generator's evaluation
prompt around each question, greedy pass@1 and, with `sampled_n`, the mean over that many
samples per problem at the training temperature; a completion counts as right when its reward
is above 0.5 (as in training). With the run's own eval file, seed and sample count it gives the
numbers the run logged at the same weights.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from tango_jax.data import datasets
from tango_jax.data.datasets import Problem
from tango_jax.data.prompts import drop_overlong, missing_field
from tango_jax.metrics.writer import PhaseTimer
from tango_jax.run.evaluation import EvalSettings, evaluate
from tango_jax.run.roles import Role
from tango_jax.schema import ConfigError
from tango_jax.text import reward_function
from tango_jax.text.answer_check import RewardKind
from tango_jax.text.formats import StepSplit
from tango_jax.text.scoring_pool import OutcomeScorer
from tango_jax.text.templates import Templates


@dataclasses.dataclass(frozen=True)
class OwnData:
    """What to evaluate on: the file, where its records keep question and answer, the reward."""

    path: Path
    fields: datasets.Fields
    reward: str = ""  # "module:function"; "" = the check `kind` names
    kind: RewardKind = RewardKind.MATH  # the check without a reward function of one's own

    @property
    def reward_kind(self) -> RewardKind:
        return RewardKind.CUSTOM if self.reward else self.kind

    @property
    def reward_name(self) -> str:
        return (
            self.reward
            or {RewardKind.MATH: "Math-Verify", RewardKind.EXACT: "exact match"}[self.kind]
        )


def load(data: OwnData, *, limit: int = 0) -> list[Problem]:
    """The file's problems (the first `limit`; 0: all), its reward function imported: every
    error is one line naming evaluate's flag, before any model loads."""
    if data.reward:
        reward_function.load(data.reward, flag="--reward")
    if not data.path.exists() and not any(data.path.parent.glob(data.path.name)):
        raise FileNotFoundError(f"--data {data.path}: no such file.")
    try:
        problems = datasets.load_problems(data.path, data.fields)
    except datasets.MissingFieldError as e:
        raise missing_field(e, data.fields, "--{}", "--{} {}") from None
    if not problems:
        raise ConfigError(f"--data {data.path}: the file holds no records.")
    return problems[:limit] if limit else problems


def run(
    generator: Role,
    problems: list[Problem],
    data: OwnData,
    *,
    templates: Templates,
    sampled_n: int,
    seed: int,
    scorer_workers: int,
    timeout_s: float,
) -> dict[str, Any]:
    """The summary of one evaluation: file, reward, problems (those whose prompt fits
    generator.max_prompt_len, as in training), greedy and sampled pass@1, format score and
    mean response length."""
    kept = drop_overlong(
        problems,
        "eval",
        generator.tokenizer,
        generator.config.max_prompt_len,
        templates,
        generator.config.chat_template,  # measured as the generator sees them
    )
    with OutcomeScorer(
        num_workers=scorer_workers, timeout_s=timeout_s, reward_function=data.reward
    ) as scorer:
        settings = EvalSettings(
            kind=data.reward_kind,
            split=StepSplit.TAGS,  # (only the reported step counts read it: none here)
            style=templates,
            timeout_s=timeout_s,
            sampled_seed=seed if sampled_n else None,
            sampled_n=max(sampled_n, 1),
        )
        m = evaluate(generator, None, kept, scorer, settings, timer=PhaseTimer())
    out = {
        "file": str(data.path),
        "reward": data.reward_name,
        "problems": len(kept),
        "dropped_overlong": len(problems) - len(kept),
        "greedy_pass@1": m["eval/generator/accuracy"],
        "format_score": m["eval/generator/format_score"],
        "response_len": m["eval/generator/response_len"],
    }
    if sampled_n:
        out |= {"sampled_pass@1": m["eval/generator/sampled_accuracy"], "samples": sampled_n}
    out |= {k.removeprefix("eval/generator/"): v for k, v in m.items() if "/reward/" in k}
    return out


def table(model: str, summary: dict[str, Any]) -> str:
    """The summary as a small markdown table (data.md beside results.json)."""
    rows = [
        ("model", model),
        ("file", summary["file"]),
        ("reward", summary["reward"]),
        ("problems", summary["problems"]),
        ("greedy pass@1", f"{summary['greedy_pass@1']:.3f}"),
    ]
    if "sampled_pass@1" in summary:
        label = f"sampled pass@1 ({summary['samples']} per problem)"
        rows.append((label, f"{summary['sampled_pass@1']:.3f}"))
    rows += [("format score", f"{summary['format_score']:.3f}")]
    rows += [("response tokens", f"{summary['response_len']:.1f}")]
    return "| | |\n|---|---|\n" + "".join(f"| {k} | {v} |\n" for k, v in rows)
