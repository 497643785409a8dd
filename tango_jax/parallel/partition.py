"""Placing NNX models on a mesh from their logical axis annotations.

`state_shardings` reads each parameter's logical names (its `out_sharding` metadata) and
resolves them with `tango_jax.parallel.mesh.LOGICAL_RULES`; `init_sharded` builds a model whose
parameters are created directly in their shards (never whole on one device).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding

from tango_jax.parallel.mesh import LOGICAL_RULES, Fallback, resolve_spec


def _is_var(x) -> bool:
    return isinstance(x, nnx.Variable)


def logical_axes(variable: nnx.Variable) -> tuple[str | None, ...] | None:
    names = variable.get_metadata().get("out_sharding")
    return None if names is None else tuple(names)


def state_shardings(state: Any, mesh: Mesh, rules=LOGICAL_RULES) -> Any:
    """A tree like `state` (Variables replaced by their values' NamedSharding)."""

    def one(v):
        if not _is_var(v):
            return NamedSharding(mesh, jax.sharding.PartitionSpec())
        spec, _ = resolve_spec(logical_axes(v), v.get_value().shape, mesh, rules)
        return v.replace(NamedSharding(mesh, spec))

    return jax.tree.map(one, state, is_leaf=_is_var)


def sharding_fallbacks(state: Any, mesh: Mesh, rules=LOGICAL_RULES) -> dict[str, list[Fallback]]:
    """Parameters whose logical sharding had to fall back to replication, by path."""
    out = {}
    for path, v in nnx.to_flat_state(state):
        _, fallbacks = resolve_spec(logical_axes(v), v.get_value().shape, mesh, rules)
        if fallbacks:
            out["/".join(map(str, path))] = fallbacks
    return out


def abstract_model(make: Callable[[], nnx.Module]):
    """(graphdef, abstract state) of the model `make()` builds, allocating nothing."""
    return nnx.split(nnx.eval_shape(make))


def with_shardings(abstract: Any, shardings: Any) -> Any:
    """ShapeDtypeStructs of `abstract` carrying `shardings` (what an ahead-of-time plan lowers)."""
    return jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), abstract, shardings
    )


def abstract_sharded(make: Callable[[], nnx.Module], mesh: Mesh, rules=LOGICAL_RULES):
    """(graphdef, state as ShapeDtypeStructs on their shardings of `mesh`) of the module that
    `make` builds, without allocating it."""
    graphdef, abstract = abstract_model(make)
    return graphdef, with_shardings(abstract, state_shardings(abstract, mesh, rules))


def shard_bytes(tree: Any) -> float:
    """Bytes of one device's shards of the arrays (or ShapeDtypeStructs with shardings) in
    `tree`; the largest shard where a mesh splits a dimension unevenly."""
    total = 0
    for x in jax.tree.leaves(tree):
        shape = x.sharding.shard_shape(x.shape)
        total += int(np.prod(shape, dtype=np.int64)) * jnp.dtype(x.dtype).itemsize
    return float(total)


def init_sharded(make: Callable[[], nnx.Module], mesh: Mesh, rules=LOGICAL_RULES) -> nnx.Module:
    """Builds `make()` with every parameter created in place on its shards of `mesh`."""
    graphdef, abstract = abstract_model(make)
    shardings = state_shardings(abstract, mesh, rules)

    @jax.jit(out_shardings=shardings)
    def init():
        return nnx.state(make())

    return nnx.merge(graphdef, init())


def shard_model(model: nnx.Module, mesh: Mesh, rules=LOGICAL_RULES) -> nnx.Module:
    """Moves an existing model's parameters onto `mesh` per their logical axes (in place)."""
    state = nnx.state(model)
    nnx.update(model, jax.device_put(state, state_shardings(state, mesh, rules)))
    return model
