"""What a verifier checkpoint knows about where the error is, measured without sampling
(`tango_jax.eval.step_probe` reads the step scores).

    python scripts/study/probe_verifier.py runs/tiny_arith/sft/verifier
    python scripts/study/probe_verifier.py runs/tiny_arith/hf/verifier --items 256

On miniature-ProcessBench solutions (half correct, half with one slip at a known step), the
verifier is fed the ideal transcript (every earlier judgment CORRECT; the step analyses of
`--analysis`, by default each step recomputed as RECOMPUTE does) with PyTorch/transformers,
independently of tango_jax's model code, and the script reports:

1. P(INCORRECT) at each step judgment, split by the step's role: the slip itself, steps before
   it, steps after it, steps of correct solutions. A verifier that checks steps has a high value
   at the slip and low ones elsewhere; one that has learned only the class prior has the same
   value everywhere.
2. P(INCORRECT) of the verdict after all-CORRECT step judgments (a verifier whose verdict follows
   its step judgments gives ~0 for both kinds of solution).
3. Linear decodability of "this step is the slip" from each layer's hidden state at the
   judgment position (a class-balanced logistic regression fitted on half the steps, scored on
   the other half; 0.5 = not decodable). If the slip is not decodable anywhere, outcome-reward
   RL has no feature to strengthen.

docs/miniature.md reports what it showed for the tiny models.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from tango_jax.data import synthetic, synthetic_labels
from tango_jax.eval.step_probe import probe


def fit_balanced_logistic(x_train, y_train, x_test) -> np.ndarray:
    """Predictions of an L2-regularised logistic regression with the positive class reweighted
    to balance (LBFGS in PyTorch; no scikit-learn in the stack)."""
    mu, sd = x_train.mean(0), x_train.std(0) + 1e-6
    a = torch.tensor((x_train - mu) / sd, dtype=torch.float32)
    t = torch.tensor(y_train, dtype=torch.float32)
    w = torch.zeros(a.shape[1], requires_grad=True)
    b = torch.zeros(1, requires_grad=True)
    pos_weight = torch.tensor((1 - y_train.mean()) / max(y_train.mean(), 1e-6))
    opt = torch.optim.LBFGS([w, b], max_iter=500)

    def closure():
        opt.zero_grad()
        loss = (
            torch.nn.functional.binary_cross_entropy_with_logits(
                a @ w + b, t, pos_weight=pos_weight
            )
            + 1e-3 * (w * w).sum()
        )
        loss.backward()
        return loss

    opt.step(closure)
    test = torch.tensor((x_test - mu) / sd, dtype=torch.float32)
    return ((test @ w + b) > 0).numpy().astype(int)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("checkpoint", help="an HF checkpoint directory of a verifier")
    p.add_argument("--items", type=int, default=128, help="ProcessBench items per seed (2 seeds)")
    p.add_argument("--style", default="compact", help="the verifier prompt style of the run")
    p.add_argument(
        "--analysis",
        default="recompute",
        choices=[a.value for a in synthetic.VerifierAnalysis],
        help="the ideal transcript's step analyses (the run's data.arith.verifier_sft_analysis)",
    )
    p.add_argument(
        "--steps",
        type=int,
        default=3,
        help="steps per ProcessBench problem (1: the one-step checks of verifier_sft_one_step)",
    )
    args = p.parse_args()

    config = synthetic.ArithConfig(
        verifier_sft_analysis=synthetic.VerifierAnalysis(args.analysis),
        min_steps=args.steps,
        max_steps=args.steps,
    )
    solutions = [
        s for seed in (0, 1) for s in synthetic_labels.process_bench(config, args.items, seed=seed)
    ]
    try:
        task = synthetic_labels.ArithmeticTask(config)
        pr = probe(args.checkpoint, solutions, task, style=args.style, features=True)
    except ValueError as e:  # a tokenizer that splits the judgment words
        raise SystemExit(str(e)) from None
    p_inc: dict[str, list[float]] = {"slip": [], "before": [], "after": [], "correct": []}
    features, is_slip = [], []
    for ps, fe, fs in zip(pr.p_incorrect, pr.first_error, pr.features):
        for k, (v, f) in enumerate(zip(ps, fs)):
            role = (
                "correct" if fe < 0 else ("slip" if k == fe else ("before" if k < fe else "after"))
            )
            p_inc[role].append(v)
            features.append(f)
            is_slip.append(int(fe == k))

    print(f"{args.checkpoint}: P(INCORRECT) at a step judgment (ideal transcript)")
    for role, v in p_inc.items():
        print(
            f"  {role:8s} steps: mean {np.mean(v):.3f}, > 0.5 for {np.mean(np.array(v) > 0.5):.3f}"
        )
    for kind, wrong in (("wrong", True), ("right", False)):
        v = [p for p, fe in zip(pr.verdict, pr.first_error) if (fe >= 0) == wrong]
        print(f"  verdict after all-CORRECT judgments, {kind} solutions: {np.mean(v):.3f}")
    r = pr.ranking()
    print(
        f"ranking of the steps by P(INCORRECT) (process_bench.step_ranking): AUROC {r.auroc:.3f}, "
        f"first error ranked first {r.top1:.3f} (chance {1 / args.steps:.3f}), gap {r.gap:.3f}"
    )
    y = np.array(is_slip)
    half = len(y) // 2
    print("linear decodability of 'this step is the slip' (balanced accuracy, held-out half)")
    for layer in range(len(features[0])):
        x = np.stack([f[layer] for f in features])
        pred, t = fit_balanced_logistic(x[:half], y[:half], x[half:]), y[half:]
        tpr, tnr = (pred[t == 1] == 1).mean(), (pred[t == 0] == 0).mean()
        print(f"  layer {layer}: {(tpr + tnr) / 2:.3f} (slip found {tpr:.2f}, others {tnr:.2f})")


if __name__ == "__main__":
    main()
