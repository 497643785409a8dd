"""One process of tests/test_distributed.py: a shortened tiny RL loop on a mesh of 8 CPU devices
that this process shares with the others (`jax.distributed`, gloo collectives).

    python tests/distributed_worker.py --process-id 0 --num-processes 2 --port 12345 \
        --out out.json [--save-dir A] [--resume-from B] [--steps 3]

Each step: the embedded JAX sampler draws 2 completions for each of 8 prompts (seeded by the
step), a rule reward (share of even token ids) becomes group-centred advantages, and the
trainer takes one AdamW step with a KL term to the frozen reference. With --save-dir the state
after step steps-1 is saved with the run checkpointer (orbax, written by every process);
with --resume-from the latest checkpoint there is restored and the last step is taken again.
Writes the sampled tokens and the trainer's metrics per step (JSON) to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from xla_flags import xla_flags  # this folder (the worker runs as a script)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--process-id", type=int, default=0)
    p.add_argument("--num-processes", type=int, default=1)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--devices", type=int, default=8, help="devices over all processes")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--out", required=True)
    p.add_argument("--save-dir", default="")
    p.add_argument("--resume-from", default="")
    args = p.parse_args(argv)

    local = args.devices // args.num_processes
    os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ["XLA_FLAGS"] = xla_flags(local)
    import jax
    import numpy as np
    from flax import nnx

    from tango_jax.checkpoint.run import ModelInfo, RunCheckpointer
    from tango_jax.models import Transformer, presets
    from tango_jax.models.tokenizer import tiny_tokenizer
    from tango_jax.parallel.distributed import DistributedConfig, initialize
    from tango_jax.parallel.mesh import MeshConfig, make_mesh
    from tango_jax.parallel.partition import init_sharded
    from tango_jax.rl.batch import make_batch
    from tango_jax.rl.train_step import OptimizerConfig, TrainerConfig
    from tango_jax.rl.trainer import Trainer
    from tango_jax.rollout.base import Prompt, SamplingParams
    from tango_jax.rollout.jax_sampler import JaxSampler

    if args.num_processes > 1:
        initialize(
            DistributedConfig(
                enable=True,
                coordinator_address=f"127.0.0.1:{args.port}",
                num_processes=args.num_processes,
                process_id=args.process_id,
                initialization_timeout_s=120,
            )
        )
    assert jax.device_count() == args.devices and jax.local_device_count() == local
    mesh = make_mesh(MeshConfig())
    cfg = presets.get("tiny-qwen2")
    model = init_sharded(lambda: Transformer(cfg, rngs=nnx.Rngs(0)), mesh)
    ref = init_sharded(lambda: Transformer(cfg, rngs=nnx.Rngs(0)), mesh)
    trainer = Trainer(
        model,
        TrainerConfig(optimizer=OptimizerConfig(learning_rate=1e-3), micro_batch_size=8),
        mesh=mesh,
        ref_model=ref,
    )
    sampler = JaxSampler(model, tiny_tokenizer(), mesh=mesh, max_rows=16, prompt_bucket=16)
    rng = np.random.default_rng(0)
    prompts = [
        Prompt(tuple(int(t) for t in rng.integers(3, 300, size=5 + i)), "") for i in range(8)
    ]

    def step(s: int) -> dict:
        sampled = sampler.generate(prompts, SamplingParams(n=2, max_tokens=12, seed=s))
        flat = [c for per_prompt in sampled for c in per_prompt]
        rewards = np.array([np.mean([t % 2 == 0 for t in c.token_ids]) for c in flat])
        groups = rewards.reshape(len(prompts), 2)
        adv = (groups - groups.mean(axis=1, keepdims=True)).reshape(-1)
        batch = make_batch(
            [pr.token_ids for pr in prompts for _ in range(2)],
            [c.token_ids for c in flat],
            advantages=adv.tolist(),
            sampler_logprobs=[c.logprobs for c in flat],
        )
        metrics, _ = trainer.step(batch)
        return {"step": s, "tokens": [list(c.token_ids) for c in flat], "metrics": metrics}

    out = {"process_index": jax.process_index(), "process_count": jax.process_count()}
    if args.save_dir or not args.resume_from:
        out["fresh"] = []
        for s in range(1, args.steps + 1):
            out["fresh"].append(step(s))
            if s == args.steps - 1 and args.save_dir:
                info = {"generator": ModelInfo.from_model(model)}
                with RunCheckpointer(args.save_dir, keep=2, models=info) as ckpt:
                    ckpt.save(s, {"generator": trainer.state_dict()}, {"step": s})
    if args.resume_from:
        with RunCheckpointer(args.resume_from, keep=2) as ckpt:
            trainers, host = ckpt.restore(None, {"generator": trainer.state_dict()})
        trainer.load_state_dict(trainers["generator"])
        out["resumed"] = step(host["step"] + 1)
    with open(args.out, "w") as f:
        json.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
