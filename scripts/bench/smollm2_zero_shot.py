"""Zero-shot SmolLM2-135M-Instruct on the synthetic arithmetic chains, under its chat template.

    python scripts/bench/smollm2_zero_shot.py                  # 32 held-out problems per setting
    python scripts/bench/smollm2_zero_shot.py --n 64 --max-tokens 256 \
        --out runs/smollm2_zero_shot.json

For each difficulty (ArithConfig) and prompt (the Tango generator template, or the bare
question with a one-line answer instruction), as the user turn of the chat template, greedy
decoding with the embedded JAX sampler, it reports:
  strict_acc   the Tango outcome reward (Math-Verify on the whole response against the gold
               answer; it takes the last number when nothing is boxed);
  lenient_acc  the last integer of the response equals the gold answer (any format);
  format       mean generator format score (1 = <think>, >= 3 <step> blocks, boxed <answer>);
  format_ok    share of responses with format score 1;
  boxed        share with a `\\boxed{}` anywhere; mean_tokens: response length.
Needs models/SmolLM2-135M-Instruct (scripts/setup.sh writes it).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MODEL = ROOT / "models" / "SmolLM2-135M-Instruct"

# Difficulty settings, easiest first. "tiny" is the tiny configs' default (3 steps, <= 20).
SETTINGS = {
    "1-step": dict(min_steps=1, max_steps=1, eval_fraction=0.5),  # 1-step space is small
    "2-step": dict(min_steps=2, max_steps=2),
    "tiny": dict(),
}
PLAIN_SUFFIX = "\nGive the final answer as \\boxed{number}."


def prompt_text(question: str, style: str) -> str:
    from tango_jax.text import formats

    if style == "tango":
        return formats.render_generator_prompt(question)
    return question + PLAIN_SUFFIX


def last_integer(text: str) -> str | None:
    numbers = re.findall(r"-?\d+", text.replace(",", ""))
    return numbers[-1] if numbers else None


def score(responses, problems) -> dict[str, float]:
    from tango_jax.text import formats
    from tango_jax.text.answer_check import outcome_reward

    gold = [str(p.answer) for p in problems]
    fmt = [formats.generator_format_score(c.text) for c in responses]
    return {
        "strict_acc": float(np.mean([outcome_reward(c.text, g) for c, g in zip(responses, gold)])),
        "lenient_acc": float(np.mean([last_integer(c.text) == g for c, g in zip(responses, gold)])),
        "format": float(np.mean(fmt)),
        "format_ok": float(np.mean([f == 1.0 for f in fmt])),
        "boxed": float(np.mean(["\\boxed{" in c.text for c in responses])),
        "mean_tokens": float(np.mean([len(c.token_ids) for c in responses])),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--n", type=int, default=32, help="held-out problems per setting")
    parser.add_argument("--max-tokens", type=int, default=192)
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--styles", default="tango,plain")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON")
    parser.add_argument("--show", type=int, default=1, help="print this many responses each")
    args = parser.parse_args(argv)
    if not (args.model / "model.safetensors").exists():
        print(f"{args.model}: no checkpoint; run scripts/assets/fetch_smollm2.py", file=sys.stderr)
        return 1

    import jax
    import transformers

    from tango_jax.data.synthetic import ArithConfig, held_out_problems
    from tango_jax.models import from_pretrained
    from tango_jax.parallel.mesh import MeshConfig, make_mesh
    from tango_jax.rollout.base import Prompt, SamplingParams
    from tango_jax.rollout.jax_sampler import JaxSampler

    mesh = make_mesh(MeshConfig(1, 1, 1), jax.devices()[:1])
    tokenizer = transformers.AutoTokenizer.from_pretrained(args.model)
    model = from_pretrained(args.model, mesh=mesh)
    sampler = JaxSampler(model, tokenizer, mesh=mesh, max_rows=32, prompt_bucket=64)
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
    results = []
    for name in args.settings.split(","):
        arith = ArithConfig(**SETTINGS[name])
        problems = held_out_problems(arith, args.n)
        for style in args.styles.split(","):
            prompts = []
            for p in problems:
                ids = tokenizer.apply_chat_template(
                    [{"role": "user", "content": prompt_text(p.question, style)}],
                    add_generation_prompt=True,
                    tokenize=True,
                )["input_ids"]
                prompts.append(Prompt(tuple(ids)))
            t0 = time.perf_counter()
            responses = [g[0] for g in sampler.generate(prompts, params)]
            row = {
                "setting": name,
                "arith": {k: str(v) for k, v in dataclasses.asdict(arith).items()},
                "style": style,
                "n": len(problems),
                "prompt_tokens": float(np.mean([len(p.token_ids) for p in prompts])),
                **score(responses, problems),
                "seconds": time.perf_counter() - t0,
            }
            results.append(row)
            print(
                f"{name:7s} {style:6s} strict {row['strict_acc']:.3f} lenient "
                f"{row['lenient_acc']:.3f} format {row['format']:.3f} ok {row['format_ok']:.3f} "
                f"boxed {row['boxed']:.3f} tokens {row['mean_tokens']:.0f} "
                f"({row['seconds']:.0f} s)",
                flush=True,
            )
            for p, c in list(zip(problems, responses))[: args.show]:
                print(f"  Q: {p.question} (gold {p.answer})\n  A: {c.text[:400]!r}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
