"""Benchmark evaluation as the paper does it (TANGO_SPEC §7), resumable problem by problem.

    log = ResultLog(out_dir / "generator" / "MATH500.jsonl")
    settings = BenchmarkSettings.of("MATH500", style=templates, timeout_s=10.0, batch_size=64)
    run_generator_benchmark(generator, "MATH500", problems, log, scorer=scorer, settings=settings)
    run_process_bench(verifier, rows, ResultLog(out_dir / "verifier" / "gsm8k.jsonl"), ...)

Generator: greedy, zero-shot, one sample (pass@1) in the evaluation template
(`evaluation.generator_prompts`), scored by the benchmark's answer check. Verifier: greedy
verification of every ProcessBench item; the predicted error location is the first INCORRECT
step judgment (`process_bench.predicted_error_step`), scored with ProcessBench's F1 by
`eval_report`. Both go through the functions the held-out evaluation of training uses
(`evaluation.generator_prompts`, `feedback.score_solutions`, `evaluation.verify_process_items`).

Each finished problem is one JSON line appended to its benchmark's log after every chunk of
`batch_size` problems, so a killed evaluation continues where it stopped: problems whose id is
in the log are skipped (a last line cut off by the kill is dropped).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tango_jax.data.benchmarks import BENCHMARKS, Domain, ProcessRow
from tango_jax.data.datasets import Problem
from tango_jax.metrics.writer import Progress
from tango_jax.run import feedback
from tango_jax.run.evaluation import generator_prompts, verify_process_items
from tango_jax.run.roles import Role
from tango_jax.text import formats, templates
from tango_jax.text.answer_check import RewardKind
from tango_jax.text.scoring_pool import OutcomeScorer

log = logging.getLogger(__name__)


class ResultLog:
    """Per-problem records of one benchmark, one JSON object per line, keyed by "id".

    Opening an existing log reads its records; a last line that does not parse (the process
    was killed while writing it) is removed from the file. A bad line anywhere else is an
    error: the file is not what this class wrote.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.records: dict[str, dict[str, Any]] = {}
        if not self.path.exists():
            return
        lines = self.path.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            try:
                record = json.loads(line)
                self.records[record["id"]] = record
            except (json.JSONDecodeError, KeyError, TypeError):
                if i < len(lines) - 1:
                    raise ValueError(
                        f"{self.path}:{i + 1}: not a result record; delete the file to "
                        "evaluate this benchmark again."
                    ) from None
                log.warning("%s: dropping a partly written last line", self.path)
                self.path.write_text("".join(x + "\n" for x in lines[:-1]), encoding="utf-8")

    def done(self, ids: Sequence[str]) -> set[str]:
        return {i for i in ids if i in self.records}

    def append(self, records: Sequence[dict[str, Any]]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            for r in records:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
                self.records[r["id"]] = r
            f.flush()
            os.fsync(f.fileno())

    def select(self, ids: Sequence[str]) -> list[dict[str, Any]]:
        """The records of `ids` that are done, in the order of `ids`."""
        return [self.records[i] for i in ids if i in self.records]


def _chunks(items: Sequence, size: int):
    if size < 1:
        raise ValueError(f"batch_size ({size}) must be >= 1.")
    for start in range(0, len(items), size):
        yield items[start : start + size]


def fits_prompt(
    generator: Role,
    problems: Sequence[Problem],
    style: templates.Templates,
    variant: templates.Variant = templates.Variant.EVAL,
):
    """(problems whose evaluation prompt fits generator.max_prompt_len, ids of the others):
    the official loader drops overlong prompts (`filter_overlong_prompts`), evaluation sets
    included."""
    texts = [
        generator.model_text(
            templates.render_generator_prompt(p.question, variant=variant, style=style)
        )
        for p in problems
    ]
    lengths = [len(x) for x in generator.tokenizer(texts, add_special_tokens=False)["input_ids"]]
    limit = generator.config.max_prompt_len
    kept = [p for p, n in zip(problems, lengths) if n <= limit]
    dropped = [p.id for p, n in zip(problems, lengths) if n > limit]
    return kept, dropped


@dataclasses.dataclass(frozen=True)
class BenchmarkSettings:
    """How one benchmark's problems are prompted and scored (`of`: from its spec)."""

    kind: RewardKind  # the benchmark's answer check
    style: templates.Templates  # the prompt templates
    timeout_s: float  # the answer check's limit per completion
    batch_size: int  # problems per generate call (and per line batch of the log)
    variant: templates.Variant = templates.Variant.EVAL  # OOD for an out-of-domain benchmark

    @classmethod
    def of(
        cls, name: str, *, style: templates.Templates, timeout_s: float, batch_size: int
    ) -> BenchmarkSettings:
        """Benchmark `name`'s settings: its own answer check, and the OOD template for an
        out-of-domain benchmark (the eval one otherwise)."""
        spec = BENCHMARKS[name]
        variant = templates.Variant.OOD if spec.domain is Domain.OOD else templates.Variant.EVAL
        return cls(spec.kind, style, timeout_s, batch_size, variant)


def run_generator_benchmark(
    generator: Role,
    name: str,
    problems: Sequence[Problem],
    results: ResultLog,
    *,
    scorer: OutcomeScorer,
    settings: BenchmarkSettings,
) -> list[dict[str, Any]]:
    """Greedy pass@1 of every problem not yet in `results` in the settings' template variant;
    returns the records of all `problems` (in order)."""
    s = settings
    ids = [p.id for p in problems]
    todo = [p for p in problems if p.id not in results.done(ids)]
    with Progress(f"{name}", total=len(todo)) as bar:
        for chunk in _chunks(todo, s.batch_size):
            outs = generator.generate(
                generator_prompts(generator, chunk, s.style, s.variant), generator.eval_params()
            )
            solutions, _ = feedback.score_solutions(
                scorer, chunk, outs, timeout_s=s.timeout_s, kind=s.kind
            )
            results.append([_solution_record(name, s) for s in solutions])
            bar.update(len(chunk))
    return results.select(ids)


def _solution_record(benchmark: str, s: feedback.Solution) -> dict[str, Any]:
    c = s.completion
    return {
        "id": s.problem.id,
        "benchmark": benchmark,
        "correct": s.correct,
        "gold": s.problem.answer,
        "predicted": formats.last_boxed(c.text),
        "format_score": s.format_score,
        "num_steps": len(s.steps),
        "response_tokens": len(c.token_ids),
        "finish_reason": c.finish_reason.value,
        "response": c.text,
    }


def run_process_bench(
    verifier: Role,
    split: str,
    rows: Sequence[ProcessRow],
    results: ResultLog,
    *,
    style: templates.Templates,
    batch_size: int,
) -> list[dict[str, Any]]:
    """The verifier's greedy verification of every item not yet in `results`; returns the
    records of all `rows` (in order)."""
    ids = [r.id for r in rows]
    todo = [r for r in rows if r.id not in results.done(ids)]
    with Progress(f"ProcessBench {split}", total=len(todo)) as bar:
        for chunk in _chunks(todo, batch_size):
            verified = verify_process_items(verifier, [r.item for r in chunk], style=style)
            results.append(
                [
                    {
                        "id": r.id,
                        "split": split,
                        "label": r.item.label,
                        "prediction": v.prediction,
                        "num_steps": r.item.num_steps,
                        "num_judgments": len(v.verification.step_judgments),
                        "verdict": v.verification.verdict,
                        "response": v.completion.text,
                    }
                    for r, v in zip(chunk, verified)
                ]
            )
            bar.update(len(chunk))
    return results.select(ids)
