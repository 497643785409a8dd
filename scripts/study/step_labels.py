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

On last letters a second line reads the verifier's analyses ("Step 2 Analysis: kaz: p, z p",
`last_letter_labels.step_analyses`): how often it restates the step's word (the problem's) and
the letter the step wrote, writes the last letter of the word it restated, and whether its
judgment follows its own comparison (CORRECT exactly when the two letters it set side by side
are equal).
"""

from __future__ import annotations

import argparse
import re
import sys

from tango_jax.data import last_letter, step_truth
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


# one analysed step of a last-letter verification: word, letter, last letter, letter, label
_ANALYSIS = re.compile(
    r"Step (\d+) Analysis: (\S*): (\S?), (\S?) (\S?) \\boxed\{(CORRECT|INCORRECT)\}"
)


def letter_analyses(rows: list[dict]) -> dict[str, float]:
    """Shares, over the analysed steps of every verification of the last-letter generator rows
    in `rows`: `word` restated as the problem has it, `letter` the step's letter restated,
    `last` the restated word's last letter written, `follows` the judgment CORRECT exactly when
    the two letters compared are equal; and `n`, the analysed steps. Empty without any."""
    hits = {"word": 0, "letter": 0, "last": 0, "follows": 0}
    n = 0
    for r in rows:
        problem = (
            last_letter.parse_question(r["question"]) if r.get("phase") == "generator" else None
        )
        if problem is None:
            continue
        steps = [last_letter.STEP.match(s.text.strip()) for s in formats.split_steps(r["solution"])]
        written = [m.group(2) if m else None for m in steps]  # the letter each step wrote
        for v in r.get("verifications") or []:
            for m in _ANALYSIS.finditer(v.get("text", "")):
                i = int(m.group(1)) - 1
                if i >= min(len(problem.words), len(written)):
                    continue
                word, letter, last, other, label = m.groups()[1:]
                n += 1
                hits["word"] += word == problem.words[i]
                hits["letter"] += letter == written[i]
                hits["last"] += bool(word) and last == word[-1]
                hits["follows"] += (label == "CORRECT") == (last == other)
    return {k: v / n for k, v in hits.items()} | {"n": n} if n else {}


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
        if a := letter_analyses(read_rollouts(run_dir)):
            print(
                f"  its analyses of {a['n']} steps: the word restated {a['word']:.3f}, the "
                f"step's letter {a['letter']:.3f}, that word's last letter {a['last']:.3f}; "
                f"the judgment follows its own comparison {a['follows']:.3f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
