"""A role's kernel switches (RoleConfig.fused_*, padding_as_lengths, sampler.decode_block)
reach the model and the sampler that `build_role` makes, and change no greedy token."""

from __future__ import annotations

import dataclasses

import jax
import pytest

from tango_jax.config.roles import RoleConfig, SamplerSettings
from tango_jax.config.run import base_config, load_run_config
from tango_jax.models.tiny import write_tiny_checkpoint
from tango_jax.parallel.mesh import MeshConfig, make_mesh
from tango_jax.rollout.base import SamplingParams
from tango_jax.run.roles import build_role
from tango_jax.schema import ConfigError
from tango_jax.tango.schedule import Kind

SWITCHES = dict(fused_norm=True, fused_mlp=True, fused_rope=True, padding_as_lengths=True)


def test_switches_reach_the_model_and_sampler_and_keep_greedy_tokens(tmp_path):
    path = write_tiny_checkpoint(tmp_path / "tiny", "tiny-qwen2", seed=3)
    mesh = make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])
    plain = RoleConfig(dtype="float32", remat=False)
    switched = dataclasses.replace(
        plain, sampler=SamplerSettings(prompt_bucket=8, decode_block=4), **SWITCHES
    )
    roles = [
        build_role(Kind.GENERATOR, c, path, mesh, with_trainer=False) for c in (plain, switched)
    ]
    assert all(getattr(roles[1].model.config, k) for k in SWITCHES)
    assert not any(getattr(roles[0].model.config, k) for k in SWITCHES)
    assert roles[1].sampler.decode_block == 4 and roles[0].sampler.decode_block == 0
    prompts = [roles[0].encode(t) for t in ("Last letters of: ab cd", "12 + 7 =", "x")]
    params = SamplingParams(n=1, temperature=0.0, max_tokens=12)
    outs = [[c[0].token_ids for c in r.generate(prompts, params)] for r in roles]
    assert outs[0] == outs[1] and all(len(t) > 0 for t in outs[0])


def test_switches_are_config_fields():
    c = base_config()
    c.generator.model.preset = c.verifier.model.preset = "tiny-qwen2"
    for k in SWITCHES:
        c.generator[k] = True
    c.verifier.sampler.decode_block = 64
    cfg = load_run_config(c)
    assert cfg.generator.model_numerics()["fused_mlp"] and cfg.verifier.sampler.decode_block == 64
    c.verifier.sampler.decode_block = -1
    with pytest.raises(ConfigError, match="decode_block"):
        load_run_config(c)
