"""Sharding on 8 simulated CPU devices (tests/conftest.py sets the device count)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hf_fixtures import VARIANTS, write_hf_checkpoint
from jax.sharding import PartitionSpec as P

from tango_jax.models import from_pretrained, presets
from tango_jax.models.transformer import Transformer
from tango_jax.parallel.mesh import MeshConfig, make_mesh, resolve_spec
from tango_jax.parallel.partition import init_sharded, sharding_fallbacks


def test_eight_devices_available():
    assert jax.device_count() == 8


@pytest.mark.parametrize(
    "cfg, shape",
    [
        (MeshConfig(), (1, 8, 1)),
        (MeshConfig(2, -1, 2), (2, 2, 2)),
        (MeshConfig(1, 2, -1), (1, 2, 4)),
    ],
)
def test_mesh_fill(cfg, shape):
    assert tuple(make_mesh(cfg).devices.shape) == shape


def test_mesh_errors_name_the_problem():
    with pytest.raises(ValueError, match="needs 12 devices but 8"):
        make_mesh(MeshConfig(3, 2, 2))
    with pytest.raises(ValueError, match="-1 for one axis only"):
        make_mesh(MeshConfig(-1, -1, 1))
    with pytest.raises(ValueError, match="does not divide"):
        make_mesh(MeshConfig(3, -1, 1))


def _specs(model):
    return {
        "/".join(map(str, p)): v.get_value().sharding.spec
        for p, v in nnx.to_flat_state(nnx.state(model))
    }


def test_partition_specs_fsdp_and_tensor():
    mesh = make_mesh(MeshConfig(1, 4, 2))
    config = presets.get("tiny-qwen2", num_heads=4, num_kv_heads=2)
    model = init_sharded(lambda: Transformer(config, rngs=nnx.Rngs(0)), mesh)
    specs = _specs(model)
    assert specs["embed"] == P("tensor", "fsdp")
    assert specs["layers/0/attention/q"] == P("fsdp", "tensor", None)
    assert specs["layers/0/attention/k"] == P("fsdp", "tensor", None)
    assert specs["layers/0/attention/o"] == P("tensor", None, "fsdp")
    assert specs["layers/1/attention/q_bias"] == P("tensor", None)
    assert specs["layers/1/mlp/gate"] == P("fsdp", "tensor")
    assert specs["layers/1/mlp/down"] == P("tensor", "fsdp")
    assert specs["final_norm/scale"] == P(None)
    # each device really holds 1/8 of the MLP weight
    gate = model.layers[1].mlp.gate[...]
    assert gate.addressable_shards[0].data.size == gate.size // 8


def test_indivisible_dimension_falls_back_to_replication_and_is_reported():
    mesh = make_mesh(MeshConfig(1, 2, 4))
    config = presets.get("tiny-qwen2")  # 1 KV head cannot be split over tensor=4
    spec, fallbacks = resolve_spec(("embed", "kv_heads", "head_dim"), (128, 1, 64), mesh)
    assert spec == P("fsdp", None, None)
    assert fallbacks[0].logical == "kv_heads"
    abstract = nnx.eval_shape(lambda: Transformer(config, rngs=nnx.Rngs(0)))
    reported = sharding_fallbacks(nnx.state(abstract), mesh)
    assert "layers/0/attention/k" in reported and "layers/0/mlp/gate" not in reported


@pytest.mark.parametrize(
    "mesh_cfg", [MeshConfig(1, 8, 1), MeshConfig(2, 2, 2), MeshConfig(1, 1, 8)]
)
def test_sharded_forward_equals_unsharded(tmp_path_factory, mesh_cfg):
    path = write_hf_checkpoint(
        tmp_path_factory.mktemp("m"), **VARIANTS["qwen2_tied_gqa"], vocab=256
    )
    single = from_pretrained(path)
    mesh = make_mesh(mesh_cfg)
    sharded = from_pretrained(path, mesh=mesh)
    tokens = jnp.asarray(np.random.default_rng(0).integers(2, 256, size=(8, 12)))
    with jax.set_mesh(mesh):
        got = nnx.jit(lambda m, t: m(t))(
            sharded, jax.device_put(tokens, jax.sharding.NamedSharding(mesh, P(("data", "fsdp"))))
        )
    want = single(tokens)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-5, atol=2e-5)
