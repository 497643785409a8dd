"""Scores and markdown tables from per-problem evaluation records, laid out like the paper's
Table 1 (generator: five math benchmarks and their average, four OOD tasks and theirs) and
Table 3 (verifier: ProcessBench F1 per split and the average). Pure functions over the
records `benchmark_eval` writes; percentages with one decimal, as the paper prints them.

Averages are unweighted means over the benchmarks (splits) evaluated, as in the paper; a
table with only some of them says so under it. The paper's own TANGO row is printed below
ours for reference (TANGO_SPEC §8).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from tango_jax.text.process_bench import ProcessScores, process_scores

# Column order and headers of the paper's tables.
TABLE1_MATH = (
    ("MATH500", "MATH500"),
    ("AIME2024", "AIME24"),
    ("AIME2025", "AIME25"),
    ("AMC2023", "AMC23"),
    ("OlympiadBench", "OlyB"),
)
TABLE1_OOD = (
    ("BGQA", "BGQA"),
    ("CRUXEval", "CRUX"),
    ("StrategyQA", "StratQA"),
    ("TableBench", "TableB"),
)
TABLE3 = (
    ("gsm8k", "GSM8K"),
    ("math", "MATH"),
    ("olympiadbench", "OlympiadBench"),
    ("omnimath", "Omni-MATH"),
)
# TANGO-Qwen-7B, 300 generator steps (paper Table 2) and its verifier (Table 3).
PAPER_TABLE1 = {
    "MATH500": 82.4, "AIME2024": 26.7, "AIME2025": 23.3, "AMC2023": 70.0, "OlympiadBench": 45.3,
    "math_avg": 49.5, "BGQA": 62.3, "CRUXEval": 54.0, "StrategyQA": 91.4, "TableBench": 43.6,
    "ood_avg": 62.8,
}  # fmt: skip
PAPER_TABLE3 = {"gsm8k": 53.1, "math": 48.2, "olympiadbench": 37.8, "omnimath": 36.3, "avg": 43.9}


@dataclasses.dataclass(frozen=True)
class Accuracy:
    correct: int
    total: int

    @property
    def value(self) -> float:
        return self.correct / self.total if self.total else 0.0


def accuracy(records: Sequence[Mapping[str, Any]]) -> Accuracy:
    """pass@1 of one benchmark's records (one greedy sample per problem)."""
    return Accuracy(sum(bool(r["correct"]) for r in records), len(records))


def split_scores(records: Sequence[Mapping[str, Any]]) -> ProcessScores:
    """ProcessBench scores of one split's records (label, prediction)."""
    return process_scores([r["label"] for r in records], [r["prediction"] for r in records])


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def _kept(previous: Mapping[str, Any] | None, columns) -> dict[str, Any]:
    """The per-benchmark entries of an earlier summary of the same output directory."""
    return {n: previous[n] for n, _ in columns if previous and isinstance(previous.get(n), dict)}


def generator_summary(
    results: Mapping[str, Sequence[Mapping[str, Any]]], previous: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """benchmark -> records  ->  {benchmark: {accuracy, correct, total}, math_avg, ood_avg}.

    `previous`: an earlier summary of the same evaluation; its benchmarks that `results` does
    not hold are kept, so evaluating benchmarks one call at a time fills one table."""
    out = _kept(previous, (*TABLE1_MATH, *TABLE1_OOD))
    for name, recs in results.items():
        a = accuracy(recs)
        out[name] = {"accuracy": a.value, "correct": a.correct, "total": a.total}
    for key, columns in (("math_avg", TABLE1_MATH), ("ood_avg", TABLE1_OOD)):
        out[key] = _mean([out[n]["accuracy"] for n, _ in columns if n in out])
    return out


def verifier_summary(
    results: Mapping[str, Sequence[Mapping[str, Any]]], previous: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """split -> records  ->  {split: {f1, acc_erroneous, acc_correct, ...}, avg_f1};
    `previous` as in `generator_summary`."""
    out = _kept(previous, TABLE3)
    for split, recs in results.items():
        out[split] = dataclasses.asdict(split_scores(recs))
    out["avg_f1"] = _mean([out[s]["f1"] for s, _ in TABLE3 if s in out])
    return out


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def table1(model: str, summary: Mapping[str, Any], *, reference: bool = True) -> str:
    """Markdown Table 1 for one model (a `generator_summary`)."""
    cols = [*TABLE1_MATH, ("math_avg", "Avg"), *TABLE1_OOD, ("ood_avg", "Avg")]
    lines = [_row(["Model", *(h for _, h in cols)]), _row(["---"] * (len(cols) + 1))]

    def cell(key: str) -> float | None:
        v = summary.get(key)
        return v["accuracy"] if isinstance(v, Mapping) else v

    lines.append(_row([model, *(_pct(cell(k)) for k, _ in cols)]))
    if reference:
        ref = ["TANGO-Qwen-7B (paper)", *(f"{PAPER_TABLE1[k]:.1f}" for k, _ in cols)]
        lines.append(_row(ref))
    for group, what in ((TABLE1_MATH, "math"), (TABLE1_OOD, "OOD")):
        have = [h for n, h in group if n in summary]
        if have and len(have) < len(group):
            lines.append(f"\n{what} Avg over the {len(have)} evaluated: {', '.join(have)}.")
    return "\n".join(lines) + "\n"


def table3(model: str, summary: Mapping[str, Any], *, reference: bool = True) -> str:
    """Markdown Table 3 (F1) for one verifier (a `verifier_summary`), then the two accuracies
    whose harmonic mean each F1 is."""
    cols = [*TABLE3, ("avg", "Avg")]
    header = [_row(["Model", *(h for _, h in cols)]), _row(["---"] * (len(cols) + 1))]

    def f1(key: str) -> float | None:
        return summary.get("avg_f1") if key == "avg" else summary.get(key, {}).get("f1")

    lines = [*header, _row([model, *(_pct(f1(k)) for k, _ in cols)])]
    if reference:
        ref = ["TANGO-Qwen-7B verifier (paper)", *(f"{PAPER_TABLE3[k]:.1f}" for k, _ in cols)]
        lines.append(_row(ref))
    detail = [
        "",
        "| Split | items (erroneous / correct) | acc. erroneous | acc. correct | F1 | unreadable |",
        "|---|---|---|---|---|---|",
    ]
    for key, head in TABLE3:
        if key in summary:
            s = summary[key]
            detail.append(
                _row(
                    [
                        head,
                        f"{s['num_erroneous']} / {s['num_correct']}",
                        _pct(s["acc_erroneous"]),
                        _pct(s["acc_correct"]),
                        _pct(s["f1"]),
                        _pct(s["unreadable"]),
                    ]
                )
            )
    have = [h for k, h in TABLE3 if k in summary]
    if have and len(have) < len(TABLE3):
        detail.append(f"\nAvg over the {len(have)} evaluated splits: {', '.join(have)}.")
    return "\n".join(lines + detail) + "\n"
