"""Short whole runs of the tiny config, shared by the loop, overlap and distributed tests."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file
from xla_flags import xla_flags

from tango_jax.config.files import load_config_file
from tango_jax.config.run import RunConfig, load_run_config
from tango_jax.metrics.rollouts import RolloutLogConfig
from tango_jax.schema import to_dict

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
TINY = f"--config={CONFIGS / 'tiny_arith.py'}:tango,scratch"  # the base of `config_flags`


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
    c = load_config_file(CONFIGS / "tiny_arith.py").get_config(f"{variant}{start}")
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
    # 16 miniature-ProcessBench items instead of 128: each evaluation verifies them all (12 of
    # its 13 s on the loaded machine), and no test here reads more than that they are verified.
    c.eval.process_bench_size = 16
    # No step-ranking probe at a child run's end (PyTorch and transformers imported, two
    # verifiers loaded: ~4 s a run); tests/parallel/test_distributed.py's 1-process run keeps
    # it and finds its lines, tests/e2e/test_study.py checks their numbers.
    c.eval.step_ranking = False
    trains_verifier = c.verifier.enable and c.verifier.trainable
    c.schedule.total_steps = total_steps
    c.schedule.verifier_warmup_steps = 1 if trains_verifier else 0
    c.eval.every_generator_steps = 2
    c.checkpoint.every_steps = 2
    c.checkpoint.keep = 3
    c.checkpoint.every_minutes = 0  # only the scheduled saves (and signals) in tests
    return load_run_config(c)


# tests/e2e/test_loop.py's run, and the child processes that resume copies of it: a reward
# function of one's own (tests/helpers/custom_rewards.py; a child needs tests/helpers on its
# path) and the rollout log at steps 1, 2 and 4.
LOOP_REWARD = "custom_rewards:digit_share"


def loop_config(run_dir: Path):
    c = short_config(run_dir, data={"reward": LOOP_REWARD})
    rollouts = RolloutLogConfig(every_steps=2, max_rows=16, max_chars=10_000)
    return dataclasses.replace(c, log_rollouts=rollouts)


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


def _flat(tree: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in tree.items():
        out |= _flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v}
    return out


def config_flags(cfg: RunConfig) -> list[str]:
    """The `--config.*` flags that turn `TINY` into `cfg` for `python -m tango_jax.train`: the
    fields where it differs (each a bool, int, float or str, so str() is its flag value)."""
    tiny = load_config_file(CONFIGS / "tiny_arith.py").get_config("tango,scratch")
    base = _flat(to_dict(load_run_config(tiny)))
    return [f"--config.{k}={v}" for k, v in _flat(to_dict(cfg)).items() if base[k] != v]


def child_env(local_devices: int = 8, compile_cache: Path | None = None) -> dict[str, str]:
    """This environment for a child process: `local_devices` simulated CPU devices, the test
    session's matmul precision (conftest), and JAX's persistent compilation cache (most of a
    short run's time is compiling): the suite's own when scripts/test.sh set one (shared by
    every process of the run, so a program compiled by one test's child is not compiled
    again by the next), else `compile_cache`."""
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
    env["JAX_PLATFORMS"] = "cpu"
    env["XLA_FLAGS"] = xla_flags(local_devices)
    env["JAX_DEFAULT_MATMUL_PRECISION"] = "highest"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    if compile_cache is not None and "JAX_COMPILATION_CACHE_DIR" not in env:
        env["JAX_COMPILATION_CACHE_DIR"] = str(compile_cache)
        env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0.2"
    return env
