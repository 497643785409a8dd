"""Claim 1 on SmolLM2: the verifier's change from its SFT start to after RL, paired by seed.

    python -m tango_jax.study.claim1_real --records docs/claim1_real/runs --seeds 1 2 3

Reads the records of `configs/smollm2_verifier.py:rl` runs, one per seed, in
`RECORDS/rl_s{seed}/metrics.jsonl` (a run directory, or its committed record), and prints the
study's table (docs/verifier.md): for each seed the balanced probe's numbers before RL (the
evaluation at step 0, right after the SFT) and after the run's last update, then the paired
change after − before over the seeds, mean ± 95% t-interval (tango_jax/eval/paired_study.py).

The control, the frozen SFT verifier, needs no run: the probe is a fixed set of replies judged
greedily, so the frozen verifier's change is exactly 0 on every seed, and the paired change
against it is the change printed here.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tango_jax.eval import paired_study as ps
from tango_jax.run.verifier_probe import ONE_SIDED

# (metric, what the table calls it)
MEASURES = (
    ("eval/probe/balanced_accuracy", "balanced verdict accuracy"),
    ("eval/probe/answer_label_informedness", "answer-line label informedness"),
    ("eval/probe/predicted_correct", "verdicts CORRECT"),
)
CORRECT_SHARE = MEASURES[2][0]
GUARD = "verifier/collapse_guard/tripped"


def probe_rows(metrics: Path) -> list[dict]:
    """The metrics.jsonl rows that hold the probe's numbers, in step order (a resumed run's
    repeated step keeps its last row)."""
    by_step = {}
    for line in metrics.read_text().splitlines():
        row = json.loads(line)
        if MEASURES[0][0] in row:
            by_step[row["step"]] = row
    return [by_step[s] for s in sorted(by_step)]


def before_after(record: Path) -> tuple[dict, dict]:
    """The probe rows at step 0 and at the run's last step; a one-line error when the record
    has no probe, no step-0 evaluation, or has not reached its last step."""
    metrics = record / "metrics.jsonl"
    if not metrics.is_file():
        raise ValueError(f"{metrics}: no such file; run the seed first (docs/verifier.md).")
    total = json.loads((record / "config.json").read_text())["schedule"]["total_steps"]
    rows = probe_rows(metrics)
    if not rows or rows[0]["step"] != 0:
        raise ValueError(
            f"{metrics}: no probe evaluation at step 0; the run needs "
            "eval.verifier_probe_size > 0 (configs/smollm2_verifier.py sets it)."
        )
    if rows[-1]["step"] != total:
        raise ValueError(
            f"{metrics}: the last probe evaluation is at step {rows[-1]['step']} of {total}; "
            "resume the run with its own command to finish it."
        )
    return rows[0], rows[-1]


def guard_trips(record: Path) -> list[int]:
    """The steps at which the run's collapse guard was tripped (`verifier.collapse_guard`)."""
    rows = [json.loads(line) for line in (record / "metrics.jsonl").read_text().splitlines()]
    return sorted({r["step"] for r in rows if r.get(GUARD, 0) > 0})


def health(records: Path, runs: dict[int, tuple[dict, dict]]) -> list[str]:
    """One line per seed whose SFT start calls more than `ONE_SIDED` of the probe one class,
    or whose collapse guard tripped; one line saying neither happened otherwise."""
    lines = []
    for s, (before, _) in runs.items():
        share = before[CORRECT_SHARE]
        if max(share, 1 - share) > ONE_SIDED:
            lines.append(f"seed {s}: its start is one-sided (CORRECT on {share:.3f} of the probe)")
        trips = guard_trips(records / f"rl_s{s}")
        if trips:
            lines.append(f"seed {s}: the collapse guard tripped at steps {trips}")
    return lines or [
        f"No seed starts one-sided (CORRECT on more than {ONE_SIDED:.0%} or less than "
        f"{1 - ONE_SIDED:.0%} of the probe) and no seed trips the collapse guard."
    ]


def summary(records: Path, seeds: list[int]) -> str:
    """The study's markdown table: per seed before → after, then the paired change and its
    p-value; then the seeds whose start is one-sided or whose guard tripped."""
    runs = {s: before_after(records / f"rl_s{s}") for s in seeds}
    head = "| seed | " + " | ".join(name for _, name in MEASURES) + " |"
    lines = [head, "|---" * (len(MEASURES) + 1) + "|"]
    for s, (before, after) in runs.items():
        cells = [f"{before[k]:.3f} → {after[k]:.3f}" for k, _ in MEASURES]
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    changes = [
        ps.paired(
            k, {s: a[k] for s, (_, a) in runs.items()}, {s: b[k] for s, (b, _) in runs.items()}
        )
        for k, _ in MEASURES
    ]
    cells = [f"{c.mean:+.3f} ± {c.half:.3f}" for c in changes]
    lines.append(f"| after − before ({len(seeds)} seeds) | " + " | ".join(cells) + " |")
    lines.append("| p (paired t-test) | " + " | ".join(f"{c.p:.3f}" for c in changes) + " |")
    return "\n".join([*lines, "", *health(records, runs)])


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tango_jax.study.claim1_real",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--records", default="docs/claim1_real/runs")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    args = p.parse_args(argv)
    try:
        print(summary(Path(args.records), args.seeds))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
