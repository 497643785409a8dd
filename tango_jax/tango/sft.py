"""Supervised fine-tuning of one role before RL (TANGO_SPEC §5): cross-entropy on the response
tokens (and the EOS that ends them) of (prompt, response) text pairs, prompt as plain text.

The stage reads an HF checkpoint and writes one (`out_path`), so RL starts from an ordinary
checkpoint that both samplers load, and a resumed run skips a finished SFT.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from jax.sharding import Mesh

from tango_jax.config import RoleConfig, SFTStage
from tango_jax.data.tokenizer import load_tokenizer
from tango_jax.metrics import Progress
from tango_jax.models import from_pretrained, save_pretrained
from tango_jax.models.config import dtype_from_name
from tango_jax.rl.batch import make_batch
from tango_jax.rl.trainer import Objective, Trainer


def run_sft(
    role: str,
    stage: SFTStage,
    role_cfg: RoleConfig,
    init_path: Path,
    out_path: Path,
    examples: Sequence[tuple[str, str]],
    *,
    mesh: Mesh,
    seed: int,
    log: Callable[[int, dict[str, float]], None],
) -> Path:
    """Trains `stage.steps` steps of `stage.batch_size` examples drawn (seeded) from `examples`
    and saves the result at `out_path`."""
    if stage.trainer.loss.objective is not Objective.SFT:
        raise ValueError(
            f"sft.{role}.trainer.loss.objective must be 'sft', got "
            f"{stage.trainer.loss.objective.value!r}."
        )
    if not examples:
        raise ValueError(f"sft.{role}: no SFT examples.")
    tokenizer = load_tokenizer(init_path)
    model = from_pretrained(
        init_path,
        mesh=mesh,
        remat=role_cfg.remat,
        dtype=dtype_from_name(role_cfg.dtype),
        param_dtype=dtype_from_name(role_cfg.param_dtype),
    )
    trainer = Trainer(model, stage.trainer, mesh=mesh)  # cosine horizon: stage.steps (derived)
    eos = tokenizer.eos_token_id
    encoded = [
        (
            tokenizer(p, add_special_tokens=False)["input_ids"],
            tokenizer(r, add_special_tokens=False)["input_ids"] + [eos],
        )
        for p, r in examples
    ]
    rng = np.random.default_rng(seed)
    pad = tokenizer.pad_token_id or 0
    with Progress(f"sft {role}", total=stage.steps) as bar:
        for step in range(1, stage.steps + 1):
            rows = rng.choice(
                len(encoded), size=stage.batch_size, replace=len(encoded) < stage.batch_size
            )
            batch = make_batch(
                [encoded[i][0] for i in rows],
                [encoded[i][1] for i in rows],
                pad_id=pad,
                prompt_bucket=role_cfg.sampler.prompt_bucket,
                response_bucket=role_cfg.response_bucket,
                max_prompt_len=role_cfg.max_prompt_len,
            )
            metrics, _ = trainer.step(batch)
            if metrics["nonfinite"]:
                raise FloatingPointError(
                    f"sft.{role}: non-finite loss or gradient at SFT step {step}; lower "
                    f"sft.{role}.trainer.optimizer.learning_rate."
                )
            log(step, {f"sft/{role}/{k}": v for k, v in metrics.items()})
            bar.update(1)
    return save_pretrained(model, out_path, tokenizer=tokenizer, overwrite=True)
