"""How much room a generator checkpoint leaves RL on an arithmetic config: held-out accuracy,
greedy and sampled at the training temperature, per chain length, and where its sampled
solutions first go wrong.

    python scripts/study/chain_room.py --config configs/tiny_chains.py:grpo \\
        --generator runs/tiny_chains_sft/phase1/sft/generator --out docs/chains/room.json

The held-out problems, prompts and sampling are the run's evaluation's (the config's
`data.eval_size` problems, `eval.sampled_n` samples each at `generator.rollout` temperature,
seed `config.seed`); each sampled solution's first wrong step comes from the task's step truth
(`step_truth.first_error`: 0-based, -1 when every step is right and the count is the problem's).
The histogram counts the wrong solutions by the position of their first wrong step (1-based),
and apart those whose steps are all right but whose count or answer is not ("other": a missing
or extra step, an unreadable answer).
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

import numpy as np


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--config", required=True, help="CONFIG.py:VARIANT (an arithmetic config)")
    p.add_argument("--generator", required=True, help="the checkpoint directory to measure")
    p.add_argument("--out", help="write the numbers as JSON here too")
    args = p.parse_args(argv)

    import importlib.util

    from tango_jax.config.run import load_run_config
    from tango_jax.data import step_truth
    from tango_jax.data.prompts import load_prompts
    from tango_jax.data.tasks import task_of
    from tango_jax.parallel.mesh import make_mesh
    from tango_jax.run.evaluation import generator_prompts
    from tango_jax.run.roles import build_role
    from tango_jax.tango.kind import Kind
    from tango_jax.text import formats
    from tango_jax.text.answer_check import score_item

    path, _, variant = args.config.partition(":")
    spec = importlib.util.spec_from_file_location("chain_room_config", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cfg = load_run_config(module.get_config(*([variant] if variant else [])))
    mesh = make_mesh(cfg.mesh)
    role = build_role(Kind.GENERATOR, cfg.generator, Path(args.generator), mesh, with_trainer=False)
    task = task_of(cfg.data)
    _, problems = load_prompts(
        cfg.data,
        max_prompt_len=cfg.generator.max_prompt_len,
        position=None,
        tokenizer=lambda: role.tokenizer,
    )
    prompts = generator_prompts(role, problems, cfg.data.templates)
    greedy = role.generate(prompts, role.eval_params())
    sampled = role.generate(prompts, role.train_params(cfg.seed, n=cfg.eval.sampled_n))

    def judged(outs):
        rows = []
        for problem, completions in zip(problems, outs, strict=True):
            for c in completions:
                text = role.tokenizer.decode(c.token_ids, skip_special_tokens=True)
                steps = [s.text for s in formats.split_steps(text)]
                right = score_item(cfg.data.reward_kind, text, problem.answer, 5.0).score > 0.5
                first = step_truth.first_error(problem, steps)
                k = len(task.parse(problem.question).ops)
                rows.append(dict(k=k, right=bool(right), first=first))
        return rows

    g, s = judged(greedy), judged(sampled)
    by_k = sorted({r["k"] for r in s})
    hist: collections.Counter = collections.Counter()
    for r in s:
        if not r["right"]:
            hist["other" if r["first"] in (None, -1) else str(r["first"] + 1)] += 1
    wrong = sum(hist.values())
    result = {
        "config": args.config,
        "generator": args.generator,
        "problems": len(problems),
        "sampled_n": cfg.eval.sampled_n,
        "greedy_accuracy": float(np.mean([r["right"] for r in g])),
        "sampled_accuracy": float(np.mean([r["right"] for r in s])),
        "by_steps": {
            k: {
                "greedy": float(np.mean([r["right"] for r in g if r["k"] == k])),
                "sampled": float(np.mean([r["right"] for r in s if r["k"] == k])),
                "sampled_answers": sum(r["k"] == k for r in s),
            }
            for k in by_k
        },
        "all_wrong_groups": float(
            np.mean(
                [
                    not any(r["right"] for r in s[i : i + cfg.eval.sampled_n])
                    for i in range(0, len(s), cfg.eval.sampled_n)
                ]
            )
        ),
        "first_error_histogram": dict(
            sorted(hist.items(), key=lambda kv: (kv[0] == "other", kv[0].zfill(3)))
        ),
        "wrong_sampled": wrong,
    }
    print(json.dumps(result, indent=1))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
