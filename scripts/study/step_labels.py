"""How right a run's step labels were, from its rollout logs (runs made before the metric was
logged; newer runs log it at every step as `generator/feedback/process/step_label_*`).

    python scripts/study/step_labels.py runs/letters4/tango_s1 runs/letters4/tango_s2

For every logged generator rollout of a generated task (arithmetic, last letters), each of the
verifier's step judgments of it is set against the step's truth (`step_truth.first_error`),
as `feedback.step_label_scores` does during training: the share of written steps labelled
right, and the labels' informedness (1 - 2q for labels flipped with probability q, 0 for
labels that ignore the truth). Judgments whose count is not the solution's step count are left
out, as they give no step rewards. The logs hold a sample of each logged step's rollouts
(`rollout_log.max_rows`), so the numbers are estimates: the line says how many judgments.
"""

from __future__ import annotations

import argparse
import sys

from tango_jax.data import step_truth
from tango_jax.data.datasets import Problem
from tango_jax.metrics.rollouts import read_rollouts
from tango_jax.run.feedback import step_label_scores
from tango_jax.text import formats


def labelled(rows: list[dict]) -> list[tuple[int, list[int]]]:
    """(first wrong step, judgments) of every countable verifier judgment of the generator
    rows in `rows` (rows of tasks without step truth are skipped)."""
    out = []
    for r in rows:
        if r.get("phase") != "generator":
            continue
        problem = Problem(r["question"], r["answer"], r["source"], r["id"])
        steps = [s.text for s in formats.split_steps(r["solution"])]
        first = step_truth.first_error(problem, steps)
        if first is None:
            continue
        for v in r.get("verifications") or []:
            if len(v["step_judgments"]) == len(steps):
                out.append((first, v["step_judgments"]))
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("run_dirs", nargs="+")
    args = p.parse_args(argv)
    for run_dir in args.run_dirs:
        pairs = labelled(read_rollouts(run_dir))
        scores = step_label_scores(pairs)
        if not scores:
            print(f"{run_dir}: no judged generator rollouts with step truth in its logs")
            continue
        n = sum(len(j) for _, j in pairs)
        informed = scores.get("process/step_label_informedness", float("nan"))
        print(
            f"{run_dir}: {n} step judgments of {len(pairs)} verifications: labelled right "
            f"{scores['process/step_label_accuracy']:.3f}, informedness {informed:.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
