"""What a verifier's step labels have to beat on a run's logged rollouts: the informedness
(Youden's J, `feedback.step_label_scores`) of labels that know only each reply's outcome.

    python -m tango_jax.study.label_ceiling docs/claim2_real/runs/tango_s0_set1

For every step of the record's rollouts (`rollouts/step_*.jsonl`) that has step truth (the
generated tasks), three sets of line labels against the line truth (`step_truth.first_error`):

- `logged`: the verifier's own labels as logged (those `step_rewards` accepted: one per line);
  the same number as the step's `generator/feedback/process/step_label_informedness`.
- `outcome_copied`: each reply's true outcome written on every one of its lines (CORRECT on
  every line of a right reply, INCORRECT on every line of a wrong one): a perfect verdict
  carrying no step information. Its informedness is the share of a wrong reply's lines that
  are wrong, in effect: a high bar on chains whose first error comes late.
- `verdict_copied`: each verification's own verdict written on every line: what the verifier's
  labels would score if they only repeated its verdict.

A gate on line-label informedness (docs/claim2_real.md asks 0.3) reads against these: labels
below `outcome_copied` carry less about the lines than a perfect verdict would.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tango_jax.data import step_truth
from tango_jax.data.datasets import Problem
from tango_jax.run.feedback import step_label_scores
from tango_jax.text import formats

KEY = "process/step_label_informedness"


def _first_error(row: dict[str, Any], split: formats.StepSplit) -> tuple[int, int] | None:
    """(first wrong line, -1 for none; the reply's line count), or None without step truth."""
    problem = Problem(row["question"], str(row["answer"]), row["source"], str(row["id"]))
    steps = [s.text for s in formats.response_steps(row["solution"], split)]
    first = step_truth.first_error(problem, steps)
    return None if first is None else (first, len(steps))


def label_sets(rows: Iterable[dict[str, Any]], split: formats.StepSplit) -> dict[str, list]:
    """The (first wrong line, one ±1 label per line) pairs of each label set over `rows` (the
    logged rollouts of one step)."""
    out: dict[str, list] = {"logged": [], "outcome_copied": [], "verdict_copied": []}
    for row in rows:
        truth = _first_error(row, split)
        if truth is None:
            continue
        first, k = truth
        out["outcome_copied"].append((first, [1 if row["correct"] else -1] * k))
        for v in row.get("verifications", []):
            labels = v.get("step_judgments") or []
            if len(labels) == k + bool(v.get("closing")):  # what `step_rewards` accepts
                out["logged"].append((first, labels[:k]))
            if v.get("verdict") is not None:
                out["verdict_copied"].append((first, [1 if v["verdict"] else -1] * k))
    return out


def ceiling(rows: Sequence[dict[str, Any]], split: formats.StepSplit) -> dict[str, Any]:
    """The informedness of each label set on one step's rows (None where it is undefined:
    no labels, or only one kind of line), with the count of replies that have step truth."""
    sets = label_sets(rows, split)
    out: dict[str, Any] = {"replies": len(sets["outcome_copied"])}
    for name, pairs in sets.items():
        out[name] = step_label_scores(pairs).get(KEY)
    return out


def record_split(record: Path) -> formats.StepSplit:
    """The record's `data.step_split` (config.json), tags when it does not say."""
    config = record / "config.json"
    data = json.loads(config.read_text()).get("data", {}) if config.exists() else {}
    return formats.StepSplit(data.get("step_split", formats.StepSplit.TAGS.value))


def measure(record: Path, phase: str | None = "generator") -> list[dict[str, Any]]:
    """One row per logged step of `record` (of `phase`, every phase for None)."""
    split, table = record_split(record), []
    for path in sorted((record / "rollouts").glob("step_*.jsonl")):
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        rows = [r for r in rows if phase is None or r.get("phase") == phase]
        if rows:
            table.append(
                {"step": rows[0]["step"], "phase": rows[0]["phase"]} | ceiling(rows, split)
            )
    return table


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tango_jax.study.label_ceiling",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("record", type=Path, help="a run directory or record with rollouts/")
    p.add_argument("--phase", default="generator", help="generator, verifier or all")
    args = p.parse_args(argv)
    if not (args.record / "rollouts").is_dir():
        p.error(
            f"record={str(args.record)!r} has no rollouts/: pass a run directory that logged them"
        )
    phase = None if args.phase == "all" else args.phase
    for row in measure(args.record, phase):
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
