"""Room to learn on the line chains (tango_jax/data/line_chains.py): SmolLM2-135M-Instruct, or a
checkpoint made from it, sampled at the training temperature by the project's JAX sampler.

    python scripts/bench/smollm2_chain_probe.py                        # every candidate
    python scripts/bench/smollm2_chain_probe.py --candidates lines_2to4 \
        --model runs/line_chains_sft/sft/generator --out runs/chain_probe/sft.json

For each candidate (a wording of `line_chains.WORDINGS` and a chain length), the first
`--problems` held-out chains (the run's held-out set, seed 0) are sampled `--samples` times
each, the question as the user turn of the chat template (as `Role.encode` makes it), T = 1,
top-p 1, no top-k, up to `--max-tokens` new tokens. It prints and writes: accuracy (the
config's reward, the reply's last integer) with its standard error, accuracy per chain length,
greedy accuracy (one greedy reply per problem), the share of groups of `--samples` with
differing rewards and with none right, non-blank lines per reply, the share of replies with an
equation, tokens per reply, and the histogram of the first wrong line
(`line_chains.first_error`: -1 all right, "missing" a step missing after right lines). The
range the claim-2 design asks for (docs/claim2_real.md): accuracy 0.1-0.4 and at least 2.5
lines per reply, over >= 256 answers.
Needs models/SmolLM2-135M-Instruct (scripts/setup.sh writes it).
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MODEL = ROOT / "models" / "SmolLM2-135M-Instruct"
# name -> (wording, fewest and most operations); the other ranges are data.arith's defaults
# (start 1..9, add / subtract 1..5, multiply by 2..3, values within 0..20).
CANDIDATES = {
    "plain_2": ("plain", 2, 2),
    "lines_2": ("lines", 2, 2),
    "example_2": ("example", 2, 2),
    "lines_2to4": ("lines", 2, 4),
    "example_2to4": ("example", 2, 4),
    "lines_3to5": ("lines", 3, 5),
}


def histogram(errors: list[int], lines: list[int]) -> dict[str, int]:
    """{"-1": all right, "0", "1", ...: first wrong line, "missing": a step missing}."""
    names = ["missing" if e == n and e >= 0 else str(e) for e, n in zip(errors, lines)]
    counts = collections.Counter(names)
    order = sorted((k for k in counts if k != "missing"), key=int) + ["missing"] * (
        "missing" in counts
    )
    return {k: counts[k] for k in order}


def measure(sampler, tokenizer, task, args) -> tuple[dict, list[dict]]:
    from tango_jax.data import line_chains
    from tango_jax.rollout.base import Prompt, SamplingParams
    from tango_jax.text import formats
    from tango_jax.text.templates import chat_prompt

    problems = task.held_out_problems(args.problems, seed=0)
    prompts = []
    for p in problems:
        text = chat_prompt(p.question, tokenizer)
        prompts.append(Prompt(tuple(tokenizer(text, add_special_tokens=False)["input_ids"]), text))
    params = SamplingParams(
        n=args.samples, temperature=1.0, max_tokens=args.max_tokens, seed=args.seed
    )
    t0 = time.perf_counter()
    out = sampler.generate(prompts, params)
    seconds = time.perf_counter() - t0
    greedy = sampler.generate(prompts, SamplingParams(temperature=0.0, max_tokens=args.max_tokens))
    greedy_right = [
        line_chains.final_number_reward(
            tokenizer.decode(list(g[0].token_ids), skip_special_tokens=True), str(p.answer), ""
        )
        for p, g in zip(problems, greedy)
    ]
    rows = []
    for p, group in zip(problems, out):
        for c in group:
            text = tokenizer.decode(list(c.token_ids), skip_special_tokens=True)
            lines = [s.text for s in formats.split_lines(text)]
            rows.append(
                {
                    "question": p.question,
                    "answer": p.answer,
                    "ops": len(p.chain.ops),
                    "reply": text,
                    "tokens": len(c.token_ids),
                    "ended": c.finish_reason.value == "stop",
                    "lines": len(lines),
                    "equation": any(line_chains.read_line(x).equations for x in lines),
                    "reward": line_chains.final_number_reward(text, str(p.answer), p.question),
                    "first_error": line_chains.first_error(p.chain, lines),
                }
            )
    rewards = np.array([r["reward"] for r in rows])
    groups = rewards.reshape(len(problems), args.samples)
    by_ops = collections.defaultdict(list)
    for r in rows:
        by_ops[r["ops"]].append(r["reward"])
    summary = {
        "answers": len(rows),
        "accuracy": float(rewards.mean()),
        "stderr": float(rewards.std(ddof=1) / np.sqrt(len(rewards))),
        "accuracy_by_ops": {k: float(np.mean(v)) for k, v in sorted(by_ops.items())},
        "greedy_accuracy": float(np.mean(greedy_right)),
        "groups_with_signal": float((groups.std(axis=1) > 0).mean()),
        "groups_all_wrong": float((groups.max(axis=1) == 0).mean()),
        "lines_per_reply": float(np.mean([r["lines"] for r in rows])),
        "with_equation": float(np.mean([r["equation"] for r in rows])),
        "tokens": float(np.mean([r["tokens"] for r in rows])),
        "ended": float(np.mean([r["ended"] for r in rows])),
        "first_error": histogram([r["first_error"] for r in rows], [r["lines"] for r in rows]),
        "seconds": seconds,
    }
    return summary, rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--candidates", default=",".join(CANDIDATES))
    parser.add_argument("--problems", type=int, default=64)
    parser.add_argument("--samples", type=int, default=4, help="answers per problem")
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="JSON: summaries and replies")
    parser.add_argument("--show", type=int, default=2, help="print this many replies each")
    args = parser.parse_args(argv)
    if not (args.model / "model.safetensors").exists():
        print(f"{args.model}: no checkpoint; run scripts/assets/fetch_smollm2.py", file=sys.stderr)
        return 1

    import jax

    from tango_jax.data.line_chains import WORDINGS, LineChainTask
    from tango_jax.data.synthetic import ArithConfig
    from tango_jax.models import from_pretrained
    from tango_jax.models.tokenizer import load_tokenizer
    from tango_jax.parallel.mesh import MeshConfig, make_mesh
    from tango_jax.rollout.jax_sampler import JaxSampler

    mesh = make_mesh(MeshConfig(1, 1, 1), jax.devices()[:1])
    tokenizer = load_tokenizer(args.model)
    model = from_pretrained(args.model, mesh=mesh)
    sampler = JaxSampler(model, tokenizer, mesh=mesh, max_rows=64, prompt_bucket=32)
    results = []
    for name in args.candidates.split(","):
        wording, lo, hi = CANDIDATES[name]
        task = LineChainTask(ArithConfig(min_steps=lo, max_steps=hi), WORDINGS[wording])
        summary, rows = measure(sampler, tokenizer, task, args)
        summary = {"candidate": name, "model": str(args.model), **summary}
        results.append({**summary, "replies": rows})
        print(
            f"{name:13s} accuracy {summary['accuracy']:.3f} ± {summary['stderr']:.3f} "
            f"{summary['accuracy_by_ops']}  greedy {summary['greedy_accuracy']:.3f}  "
            f"lines {summary['lines_per_reply']:.2f}  equation "
            f"{summary['with_equation']:.2f}  signal {summary['groups_with_signal']:.2f}  "
            f"all wrong {summary['groups_all_wrong']:.2f}  tokens {summary['tokens']:.0f}  "
            f"ended {summary['ended']:.2f}  first error {summary['first_error']}  "
            f"({summary['seconds']:.0f} s)",
            flush=True,
        )
        for r in rows[: args.show]:
            print(f"  Q: {r['question']} (gold {r['answer']}) -> {r['reward']:.0f}: {r['reply']!r}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
