"""Short whole runs of the tiny config, shared by the loop, overlap and distributed tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

from tango_jax.config.run import load_run_config, sibling_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def short_config(
    run_dir: Path,
    *,
    backend: str = "jax",
    total_steps: int = 5,
    variant: str = "tango",
    scratch: bool = True,
    data: dict | None = None,
):
    """tiny_arith shrunk to seconds per step: V (warm-up), then G, G, G, V. `scratch`: random
    init and a few SFT steps (False: the shipped SFT models, no SFT); `data`: fields of
    config.data to set (own data files)."""
    start = ",scratch" if scratch else ""
    c = sibling_config(str(CONFIGS / "x.py"), "tiny_arith").get_config(f"{variant}{start}")
    c.run_dir = str(run_dir)
    c.scorer_workers = 1
    # The session's 8 simulated devices: FSDP over 2 and tensor parallelism over 4, so the loop
    # runs sharded end to end (4-row micro-batches split over the 2 data shards).
    c.mesh = dict(data=1, fsdp=2, tensor=4)
    for stage in (c.sft.generator, c.sft.verifier):
        stage.steps, stage.batch_size, stage.num_examples = 3, 8, 64
        stage.trainer.micro_batch_size = 8
    for role, max_tokens in ((c.generator, 24), (c.verifier, 32)):
        role.rollout.n = 2
        role.rollout.max_tokens = role.eval_max_tokens = role.response_bucket = max_tokens
        role.trainer.micro_batch_size = 4  # 2 prompts x 2 samples
        role.sampler.backend = backend
        role.trainer.optimizer.learning_rate = 1e-3
    c.data.prompts_per_step = 2
    for field, value in (data or {}).items():
        c.data[field] = value
    c.data.eval_size = 4
    trains_verifier = c.verifier.enable and c.verifier.trainable
    c.schedule.total_steps = total_steps
    c.schedule.verifier_warmup_steps = 1 if trains_verifier else 0
    c.eval.every_generator_steps = 2
    c.checkpoint.every_steps = 2
    c.checkpoint.keep = 3
    return load_run_config(c)


def weights(path: Path) -> dict[str, np.ndarray]:
    out = {}
    for f in sorted(path.glob("*.safetensors")):
        out |= load_file(str(f))
    return out


def comparable(rows):
    """Metric lines without wall-clock quantities."""
    return [
        {
            k: v
            for k, v in r.items()
            if k != "time"
            and "perf/" not in k
            and not k.endswith(("_s", "seconds", "tokens_per_s", "gbps"))
        }
        for r in rows
    ]
