"""The real prompts of one Tango step of configs/smollm2_addition.py:tango, rebuilt from a run
record's rollout log through the project's own template code, for the sampler benchmarks.

    gen, ver = tango_step_prompts("docs/compare_trl/runs/tango_s1", step=5)

`gen`: the generator's distinct prompts of that step (8 questions in the chat template; the
step samples each `generator.rollout.n` times). `ver`: the verifier's judging prompts, one per
logged solution (64), exactly as the generator step builds them (`feedback.verifier_prompts`:
the solution's lines as <step>s in the compact verifier template, the chat template around it,
right-truncated at `verifier.max_prompt_len`).
"""

from __future__ import annotations

import json
from pathlib import Path

from tango_jax.config.files import load_config_file
from tango_jax.config.run import load_run_config
from tango_jax.models.tokenizer import load_tokenizer
from tango_jax.rollout.base import Prompt
from tango_jax.run.roles import Role
from tango_jax.tango.kind import Kind
from tango_jax.text import formats, templates

CONFIG = "configs/smollm2_addition.py"  # its tango variant


def tango_step_prompts(
    record: str | Path, step: int, *, style: templates.Templates | None = None
) -> tuple[list[Prompt], list[Prompt]]:
    """(generator prompts [P], verifier judging prompts [P * n]) of generator step `step`;
    `style`: the verifier's template (default: the config's, compact)."""
    cfg = load_run_config(load_config_file(CONFIG).get_config("tango"))
    rows = [
        json.loads(line)
        for line in (Path(record) / "rollouts" / f"step_{step:06d}.jsonl").read_text().splitlines()
    ]
    rows = [r for r in rows if r["phase"] == "generator"]
    if not rows:
        raise ValueError(f"{record}: step {step} logged no generator rollouts; pick another step.")
    split = formats.StepSplit(cfg.data.step_split)

    def role(kind: Kind) -> Role:
        role_cfg = cfg.generator if kind is Kind.GENERATOR else cfg.verifier
        tokenizer = load_tokenizer(role_cfg.model.path)
        return Role(kind, role_cfg, Path("."), None, tokenizer, None, None)

    generator, verifier = role(Kind.GENERATOR), role(Kind.VERIFIER)
    seen: dict[str, Prompt] = {}
    for r in rows:  # the logged prompt is the chat-templated text the generator saw
        if r["prompt"] not in seen:
            ids = generator.tokenizer(r["prompt"], add_special_tokens=False)["input_ids"]
            seen[r["prompt"]] = Prompt(tuple(ids), r["prompt"])
    ver = [
        verifier.encode(
            templates.render_verifier_prompt(
                r["question"],
                formats.tagged_solution(r["solution"], split),
                variant=templates.Variant.TRAIN,
                style=cfg.data.templates if style is None else style,
            ),
            truncate=True,
        )
        for r in rows
    ]
    return list(seen.values()), ver
