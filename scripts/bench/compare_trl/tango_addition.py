"""Tango against GRPO on SmolLM2-135M-Instruct's small additions, paired by seed.

    TRAINERS=tango bash scripts/bench/compare_trl/run_seeds.sh 1 2 3   # the Tango runs, in turn
    python scripts/bench/compare_trl/tango_addition.py --seeds 1,2,3

Reads each seed's Tango record (configs/smollm2_addition.py:tango; --tango) and GRPO record (the
same config's :grpo runs of the TRL comparison; --grpo), both RUN/metrics.jsonl, and Tango's
rollout log (RUN/rollouts/, every generator rollout with the verifier's judgments), and writes
--out/tango_summary.json and prints:
  - held-out accuracy (sampled at T = 1 and greedy) at each evaluation, by generator updates
    (Tango's evaluations fall between its verifier updates), both arms, and Tango - GRPO paired
    by seed with its 95% t-interval; and the area under each seed's sampled-accuracy curve;
  - the verifier's greedy verdicts on the held-out solutions at each evaluation and, where the
    run judges the balanced probe of held-out replies (configs/smollm2_verifier.py), its balanced
    accuracy, CORRECT share and answer-label informedness there, with the change from the first
    evaluation to the last paired by seed; and the verifier updates on which the collapse guard
    tripped;
  - its step labels on the rollouts of each window of generator updates (and a seed's mean over
    its windows, with the mean over seeds and its 95% t-interval): the share of
    verifications whose judgments match the reply's lines (the ones that become step rewards),
    and, of those, the label of the answer step (the line that holds the reply's last integer,
    which the reward reads) against whether the reply is right: informedness = the share of
    right answers labelled CORRECT + of wrong ones labelled INCORRECT - 1 (0: labels that
    ignore the truth, 1: labels that are the truth).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_trl import ROOT, load

RUNS = {
    "tango": "docs/compare_trl/runs/tango_s{seed}",
    "grpo": "docs/compare_trl/runs/tango_jax_s{seed}",
}
EVALS = ("eval/generator/sampled_accuracy", "eval/generator/accuracy")
VERDICTS = ("eval/verifier/verdict_accuracy", "eval/verifier/f1_incorrect")
PROBE = (  # the balanced probe of held-out replies, where the run judges it
    "eval/probe/balanced_accuracy",
    "eval/probe/predicted_correct",
    "eval/probe/answer_label_informedness",
)
GUARD = "verifier/collapse_guard/tripped"
UPDATES = "schedule/generator_updates"


def by_updates(rows: list[dict], name: str) -> dict[int, float]:
    """generator updates done -> `name`, on the rows that have it (an evaluation before the
    first update, which has no counter yet, is at 0)."""
    return {int(r.get(UPDATES, 0)): r[name] for r in rows if r.get(name) is not None}


def accuracy(tango: dict[int, list[dict]], grpo: dict[int, list[dict]], name: str) -> dict:
    """Per evaluation (generator updates): each arm's mean over seeds, and Tango - GRPO paired
    by seed; the same for the area under the curve (paired_study.area_under_curve). Empty when
    no evaluation has `name` in every run."""
    from tango_jax.eval.paired_study import area_under_curve, paired

    a = {seed: by_updates(rows, name) for seed, rows in tango.items()}
    b = {seed: by_updates(rows, name) for seed, rows in grpo.items()}
    steps = sorted(set.intersection(*(set(s) for s in [*a.values(), *b.values()])))
    if not steps:
        return {}
    rows = []
    for t in steps:
        c = paired(f"{name}@{t}", {s: v[t] for s, v in a.items()}, {s: v[t] for s, v in b.items()})
        rows.append({
            "updates": t,
            "tango": float(np.mean([v[t] for v in a.values()])),
            "grpo": float(np.mean([v[t] for v in b.values()])),
            "difference": c.mean, "half": c.half, "p": c.p, "per_seed": list(c.diffs),
        })  # fmt: skip

    def auc(curves):
        return {s: area_under_curve([(t, v[t]) for t in steps]) for s, v in curves.items()}

    c = paired(f"{name} AUC", auc(a), auc(b))
    return {"evaluations": rows, "auc": {"difference": c.mean, "half": c.half, "p": c.p,
                                         "per_seed": list(c.diffs)}}  # fmt: skip


def probe_change(tango: dict[int, list[dict]]) -> dict:
    """Per probe metric that every run logs: the first and the last evaluation's value per seed,
    and last - first paired by seed (mean, 95% t-half-width, p)."""
    from tango_jax.eval.paired_study import paired

    out = {}
    for name in PROBE:
        curves = {seed: by_updates(rows, name) for seed, rows in tango.items()}
        if not curves or not all(curves.values()):
            continue
        first = {s: c[min(c)] for s, c in curves.items()}
        last = {s: c[max(c)] for s, c in curves.items()}
        c = paired(name, last, first)
        out[name] = {"first": first, "last": last, "difference": c.mean, "half": c.half,
                     "p": c.p}  # fmt: skip
    return out


def answer_step(solution: str) -> int | None:
    """The index of the line step that holds the reply's last integer (None: no integer)."""
    from tango_jax.data.addition import last_integer
    from tango_jax.text import formats

    lines = formats.split_lines(solution)
    holding = [i for i, s in enumerate(lines) if last_integer(s.text) is not None]
    return holding[-1] if holding else None


def label_scores(rows: list[dict]) -> dict[str, float]:
    """Of the verifications of these rollouts: the share whose judgments match the reply's
    lines, and the answer step's label against the reply's truth (see the module docstring),
    scored by the run's own `feedback.step_label_scores` as a one-step solution each."""
    from tango_jax.run.feedback import step_label_scores

    judged, labelled = 0, []
    for r in rows:
        k = answer_step(r["solution"])
        for v in r["verifications"]:
            judged += 1
            if v["step_rewards"] is not None and k is not None:
                labelled.append((-1 if r["correct"] else 0, [v["step_judgments"][k]]))
    out = {"verifications": judged, "aligned": len(labelled) / max(judged, 1)}
    if labelled:
        scores = step_label_scores(labelled)
        out["answer_step_accuracy"] = scores["process/step_label_accuracy"]
        out["right_share"] = float(np.mean([first == -1 for first, _ in labelled]))
        if "process/step_label_informedness" in scores:
            out["informedness"] = scores["process/step_label_informedness"]
    return out


def rollout_labels(run: Path, window: int) -> list[dict]:
    """label_scores of the generator rollouts per window of `window` generator updates."""
    from tango_jax.metrics.rollouts import read_rollouts

    rows = [r for r in read_rollouts(run) if r["phase"] == "generator"]
    steps = sorted({r["step"] for r in rows})
    update_of = {s: i for i, s in enumerate(steps)}  # the i-th generator step: update i + 1
    out = []
    for lo in range(0, len(steps), window):
        part = [r for r in rows if lo <= update_of[r["step"]] < lo + window]
        out.append({"updates": [lo + 1, min(lo + window, len(steps))]} | label_scores(part))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--tango", default=RUNS["tango"], help="run dir, {seed} filled")
    parser.add_argument("--grpo", default=RUNS["grpo"], help="run dir, {seed} filled")
    parser.add_argument("--window", type=int, default=5, help="generator updates per window")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "compare_trl")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    tango, grpo = load(args.tango, seeds), load(args.grpo, seeds)
    summary = {"seeds": seeds} | {name: accuracy(tango, grpo, name) for name in EVALS}
    summary["verifier_eval"] = {
        name: {seed: by_updates(rows, name) for seed, rows in tango.items()} for name in VERDICTS
    }
    summary["verifier_eval"] |= {
        name: {seed: by_updates(rows, name) for seed, rows in tango.items()}
        for name in PROBE
        if any(name in r for rows in tango.values() for r in rows)
    }
    summary["probe_change"] = probe_change(tango)
    summary["guard_trips"] = {  # the steps on which the collapse guard tripped, per seed
        seed: [r["step"] for r in rows if r.get(GUARD)] for seed, rows in tango.items()
    }
    labels = {s: rollout_labels(ROOT / args.tango.format(seed=s), args.window) for s in seeds}
    summary["rollout_labels"] = labels
    # a seed's informedness: the mean over its windows, not one score of all its rollouts, which
    # would credit labels that follow the share of right replies as it rises over the run
    informed = {
        s: float(np.mean(js))
        for s, windows in labels.items()
        if (js := [w["informedness"] for w in windows if "informedness" in w])
    }
    if informed:
        from tango_jax.eval.paired_study import paired

        c = paired("informedness", informed, dict.fromkeys(informed, 0.0))
        summary["rollout_informedness"] = {"per_seed": informed, "mean": c.mean, "half": c.half,
                                           "p": c.p}  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tango_summary.json").write_text(json.dumps(summary, indent=2) + "\n")

    print(f"seeds {seeds}; held-out accuracy by generator updates, Tango - GRPO paired by seed")
    for name in (n for n in EVALS if summary[n]):
        print(f"\n{name}:\n| updates | Tango | GRPO | difference (95% CI) |\n|---|---|---|---|")
        for r in summary[name]["evaluations"]:
            print(f"| {r['updates']} | {r['tango']:.3f} | {r['grpo']:.3f} | "
                  f"{r['difference']:+.3f} ± {r['half']:.3f} |")  # fmt: skip
        a = summary[name]["auc"]
        print(f"area under the curve: {a['difference']:+.3f} ± {a['half']:.3f} (p {a['p']:.2f})")
    print("\nthe verifier's greedy verdict accuracy on the held-out solutions, per seed:")
    for seed, curve in summary["verifier_eval"][VERDICTS[0]].items():
        print(f"  seed {seed}: " + ", ".join(f"{t}: {v:.3f}" for t, v in curve.items()))
    for name in (n for n in PROBE if n in summary["verifier_eval"]):
        print(f"\n{name}, per seed:")
        for seed, curve in summary["verifier_eval"][name].items():
            print(f"  seed {seed}: " + ", ".join(f"{t}: {v:.3f}" for t, v in curve.items()))
        if name in summary["probe_change"]:
            c = summary["probe_change"][name]
            print(f"  last - first: {c['difference']:+.3f} ± {c['half']:.3f} (p {c['p']:.2f})")
    trips = {s: t for s, t in summary["guard_trips"].items() if t}
    print(f"\ncollapse guard tripped: {trips or 'never'}")
    print("\nstep labels on the rollouts (answer step against the reply's truth), per seed:")
    for seed, windows in labels.items():
        for w in windows:
            j = w.get("informedness")
            print(f"  seed {seed}, updates {w['updates'][0]}-{w['updates'][1]}: aligned "
                  f"{w['aligned']:.2f}, right share {w.get('right_share', float('nan')):.2f}, "
                  f"informedness {'-' if j is None else f'{j:.2f}'}")  # fmt: skip
    if "rollout_informedness" in summary:
        c = summary["rollout_informedness"]
        print("  informedness, mean of a seed's windows: "
              + ", ".join(f"seed {s} {v:+.2f}" for s, v in c["per_seed"].items())
              + f"; over seeds {c['mean']:+.3f} ± {c['half']:.3f} (p {c['p']:.2f})")  # fmt: skip
    print(f"wrote {args.out}/tango_summary.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
