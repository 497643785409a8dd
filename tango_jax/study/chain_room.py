"""How much room a generator checkpoint leaves RL on an arithmetic config: held-out accuracy,
greedy and sampled at the training temperature, per chain length, and where its sampled
solutions first go wrong.

    python -m tango_jax.study.chain_room --config configs/tiny_chains.py:grpo \\
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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np


def judged_rows(cfg, task, tokenizer, problems, outs) -> list[dict[str, Any]]:
    """One row per completion (problem-major): the problem's step count `k`, whether the
    answer is right under the run's check, and the 0-based first wrong step (-1: all right,
    None: no step truth)."""
    from tango_jax.data import step_truth
    from tango_jax.text import formats
    from tango_jax.text.answer_check import score_item

    rows = []
    for problem, completions in zip(problems, outs, strict=True):
        for c in completions:
            text = tokenizer.decode(c.token_ids, skip_special_tokens=True)
            steps = [s.text for s in formats.split_steps(text)]
            right = score_item(cfg.data.reward_kind, text, problem.answer, 5.0).score > 0.5
            first = step_truth.first_error(problem, steps)
            k = len(task.parse(problem.question).ops)
            rows.append(dict(k=k, right=bool(right), first=first))
    return rows


def room(greedy: Sequence[dict], sampled: Sequence[dict], sampled_n: int) -> dict[str, Any]:
    """The numbers of the module docstring from the judged rows of the greedy pass (one per
    problem) and the sampled one (`sampled_n` per problem, problem-major)."""
    hist: collections.Counter = collections.Counter()
    for r in sampled:
        if not r["right"]:
            hist["other" if r["first"] in (None, -1) else str(r["first"] + 1)] += 1
    groups = [sampled[i : i + sampled_n] for i in range(0, len(sampled), sampled_n)]
    return {
        "greedy_accuracy": float(np.mean([r["right"] for r in greedy])),
        "sampled_accuracy": float(np.mean([r["right"] for r in sampled])),
        "by_steps": {
            k: {
                "greedy": float(np.mean([r["right"] for r in greedy if r["k"] == k])),
                "sampled": float(np.mean([r["right"] for r in sampled if r["k"] == k])),
                "sampled_answers": sum(r["k"] == k for r in sampled),
            }
            for k in sorted({r["k"] for r in sampled})
        },
        "all_wrong_groups": float(np.mean([not any(r["right"] for r in g) for g in groups])),
        "first_error_histogram": dict(
            sorted(hist.items(), key=lambda kv: (kv[0] == "other", kv[0].zfill(3)))
        ),
        "wrong_sampled": sum(hist.values()),
    }


def measure(config: str, generator: str) -> dict[str, Any]:
    """Generator checkpoint `generator` on the held-out problems of config `config`
    (FILE:VARIANT): greedy, then `eval.sampled_n` samples each at the training temperature."""
    from tango_jax.config.files import config_from_spec
    from tango_jax.config.run import load_run_config
    from tango_jax.data.prompts import load_prompts
    from tango_jax.data.tasks import task_of
    from tango_jax.parallel.mesh import make_mesh
    from tango_jax.run.evaluation import generator_prompts
    from tango_jax.run.roles import build_role
    from tango_jax.tango.kind import Kind

    cfg = load_run_config(config_from_spec(config))
    mesh = make_mesh(cfg.mesh)
    role = build_role(Kind.GENERATOR, cfg.generator, Path(generator), mesh, with_trainer=False)
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
    g, s = (judged_rows(cfg, task, role.tokenizer, problems, o) for o in (greedy, sampled))
    head = {"config": config, "generator": generator, "problems": len(problems)}
    return head | {"sampled_n": cfg.eval.sampled_n} | room(g, s, cfg.eval.sampled_n)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tango_jax.study.chain_room",
        description=__doc__,
        formatter_class=argparse.RawTextHelpFormatter,
    )
    p.add_argument("--config", required=True, help="CONFIG.py:VARIANT (an arithmetic config)")
    p.add_argument("--generator", required=True, help="the checkpoint directory to measure")
    p.add_argument("--out", help="write the numbers as JSON here too")
    args = p.parse_args(argv)
    result = measure(args.config, args.generator)
    print(json.dumps(result, indent=1))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
