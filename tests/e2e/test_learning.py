"""End-to-end learning signal: GRPO on a tiny model raises a reward that prefers one token."""

from __future__ import annotations

import jax
import numpy as np
from flax import nnx

from tango_jax.models import Transformer, presets
from tango_jax.models.tokenizer import tiny_tokenizer
from tango_jax.parallel.mesh import MeshConfig, make_mesh
from tango_jax.rl.advantages import grpo_outcome_advantages
from tango_jax.rl.batch import make_batch
from tango_jax.rl.train_step import LossConfig, OptimizerConfig, TrainerConfig
from tango_jax.rl.trainer import Trainer
from tango_jax.rollout.base import Prompt, SamplingParams
from tango_jax.rollout.jax_sampler import JaxSampler

TARGET = 7  # the rewarded token


def _reward(token_ids) -> float:
    return float(np.mean([t == TARGET for t in token_ids])) if token_ids else 0.0


def test_grpo_raises_mean_reward():
    config = presets.get("tiny-qwen2", vocab_size=64, embed_dim=64, mlp_dim=96, eos_token_id=None)
    mesh = make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])
    model = Transformer(config, rngs=nnx.Rngs(0))
    trainer = Trainer(
        model,
        TrainerConfig(
            micro_batch_size=16,
            optimizer=OptimizerConfig(learning_rate=3e-3),
            loss=LossConfig(kl_coef=0.0, entropy_coef=0.0),
        ),
        mesh=mesh,
    )
    sampler = JaxSampler(model, tiny_tokenizer(), mesh=mesh, prompt_bucket=8)
    prompts = [Prompt((3, 4, 5)), Prompt((9, 8))]
    group = 8
    history = []
    for step in range(30):
        params = SamplingParams(n=group, temperature=1.0, max_tokens=4, seed=step)
        completions = [c for per_prompt in sampler.generate(prompts, params) for c in per_prompt]
        rewards = np.array([_reward(c.token_ids) for c in completions], np.float32)
        history.append(rewards.mean())
        adv = np.asarray(grpo_outcome_advantages(rewards, group))
        batch = make_batch(
            [p.token_ids for p in prompts for _ in range(group)],
            [c.token_ids for c in completions],
            advantages=adv,
            prompt_bucket=8,
            response_bucket=4,
        )
        trainer.step(batch)
        sampler.update_weights(None, step + 1)
    first, last = np.mean(history[:5]), np.mean(history[-5:])
    print("mean reward per step:", np.round(history, 2))
    assert first < 0.1  # a random 64-token vocabulary rarely emits the target
    assert last > first + 0.3, f"mean reward {first:.3f} -> {last:.3f}"
