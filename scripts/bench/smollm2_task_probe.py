"""Which short task has room to learn for SmolLM2-135M-Instruct: zero-shot reward at the training
temperature, per candidate.

    python scripts/bench/smollm2_task_probe.py                       # every candidate, T = 1
    python scripts/bench/smollm2_task_probe.py --candidates add_2d1d --temperature 0.7 \
        --out runs/task_probe.json

For each candidate (a question format over a pool of operands, and a reward), `--problems`
problems drawn from the pool (seeded) are sampled `--samples` times each, the question as the
user turn of the chat template, with `transformers.generate` (what TRL's GRPOTrainer samples
with) at `--temperature`, top-p 1, no top-k, up to `--max-tokens` new tokens. It prints the mean
reward, the share of groups whose rewards differ (the groups GRPO learns from), the share of
replies that end (EOS) within the budget and the mean reply length. The issue's rule for the
real-model task: mean reward in [0.05, 0.5] over >= 256 answers, replies within 64 tokens.
Needs models/SmolLM2-135M-Instruct (scripts/setup.sh writes it).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MODEL = ROOT / "models" / "SmolLM2-135M-Instruct"
JUST = "Answer with just the number."


def _words(a: int, b: int) -> str:
    return f"Sam has {a} apples and buys {b} more. How many apples does Sam have now? {JUST}"


def _reply_is_answer(completion: str, answer: str, question: str) -> float:
    """Strict: the whole reply (stripped, a final full stop allowed) is the answer."""
    return float(completion.strip().rstrip(".") == answer)


def candidates():
    """name -> (question(a, b), answer(a, b), operand pool, reward)."""
    from tango_jax.data.addition import QUESTION, last_integer_reward

    def add(a, b):
        return QUESTION.format(a=a, b=b)

    def total(a, b):
        return str(a + b)

    one = [(a, b) for a in range(2, 10) for b in range(2, 10)]
    two_one = [(a, b) for a in range(10, 100) for b in range(2, 10)]
    two_two = [(a, b) for a in range(10, 50) for b in range(10, 50)]
    return {
        "add_1d": (add, total, one, last_integer_reward),
        "add_1d_strict": (add, total, one, _reply_is_answer),
        "add_2d1d": (add, total, two_one, last_integer_reward),
        "add_2d2d": (add, total, two_two, last_integer_reward),
        "words_2d1d": (_words, total, [(a, b) for a in range(10, 30) for b in range(2, 10)],
                       last_integer_reward),
    }  # fmt: skip


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--candidates", default="", help="comma-separated; default all")
    parser.add_argument("--problems", type=int, default=64)
    parser.add_argument("--samples", type=int, default=4, help="answers per problem")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--batch", type=int, default=64, help="rows per generate call")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON")
    parser.add_argument("--show", type=int, default=3, help="print this many replies each")
    args = parser.parse_args(argv)
    if not (args.model / "model.safetensors").exists():
        print(f"{args.model}: no checkpoint; run scripts/assets/fetch_smollm2.py", file=sys.stderr)
        return 1

    import torch
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(args.model, padding_side="left")
    model = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    model.eval()
    table = candidates()
    names = args.candidates.split(",") if args.candidates else list(table)
    results = []
    for name in names:
        question, answer, pool, reward = table[name]
        rng = np.random.default_rng(args.seed)
        picks = [pool[i] for i in rng.choice(len(pool), args.problems, replace=False)]
        rows = [(question(a, b), answer(a, b)) for a, b in picks for _ in range(args.samples)]
        torch.manual_seed(args.seed)
        t0 = time.perf_counter()
        texts, lengths, ended = [], [], []
        for start in range(0, len(rows), args.batch):
            chunk = rows[start : start + args.batch]
            enc = tokenizer.apply_chat_template(
                [[{"role": "user", "content": q}] for q, _ in chunk],
                add_generation_prompt=True,
                tokenize=True,
                padding=True,
                return_dict=True,
                return_tensors="pt",
            )
            with torch.no_grad():
                out = model.generate(
                    **enc,
                    do_sample=True,
                    temperature=args.temperature,
                    top_p=1.0,
                    top_k=0,
                    max_new_tokens=args.max_tokens,
                    pad_token_id=tokenizer.pad_token_id,
                )
            for ids in out[:, enc["input_ids"].shape[1] :].tolist():
                stop = ids.index(tokenizer.eos_token_id) + 1 if tokenizer.eos_token_id in ids else 0
                ended.append(stop > 0)
                lengths.append(stop or len(ids))
                texts.append(tokenizer.decode(ids[: stop or len(ids)], skip_special_tokens=True))
        rewards = np.array([reward(t, a, q) for t, (q, a) in zip(texts, rows)])
        groups = rewards.reshape(args.problems, args.samples)
        row = {
            "candidate": name,
            "example": rows[0][0],
            "temperature": args.temperature,
            "answers": len(rows),
            "mean_reward": float(rewards.mean()),
            "stderr": float(rewards.std(ddof=1) / np.sqrt(len(rewards))),
            "groups_with_signal": float((groups.std(axis=1) > 0).mean()),
            "ended_within_budget": float(np.mean(ended)),
            "mean_tokens": float(np.mean(lengths)),
            "seconds": time.perf_counter() - t0,
        }
        results.append(row)
        print(
            f"{name:14s} reward {row['mean_reward']:.3f} ± {row['stderr']:.3f}  groups with "
            f"signal {row['groups_with_signal']:.2f}  ended {row['ended_within_budget']:.2f}  "
            f"tokens {row['mean_tokens']:.1f}  ({row['seconds']:.0f} s)",
            flush=True,
        )
        for (q, a), t, r in list(zip(rows, texts, rewards))[: args.show]:
            print(f"  Q: {q} (gold {a}) -> {r:.0f}: {t[:160]!r}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
