"""Device mesh, logical axis names and the rules that map one onto the other.

Every parameter carries logical axis names (`("embed", "mlp")`, ...) in its NNX metadata
(`out_sharding`); activations are constrained with the same names. One rules table maps each
logical name to a mesh axis (or to nothing = replicated). Changing the parallelism layout is
therefore one edit of `LOGICAL_RULES` or of the mesh shape, never of the model code.

Mesh axes:
  data    pure data parallelism (parameters replicated)
  fsdp    data parallelism with parameters and optimizer state sharded (ZeRO-3 style)
  tensor  Megatron-style tensor parallelism over heads and the MLP hidden dimension

A logical name whose dimension is not divisible by the size of its mesh axes falls back to
replication *for that parameter* (for example 2 KV heads on a tensor axis of 4); `resolve_spec`
reports every such fallback so tests and logs can see it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

MESH_AXES = ("data", "fsdp", "tensor")

# logical name -> mesh axes (a tuple shards over several axes; None replicates).
LOGICAL_RULES: tuple[tuple[str, tuple[str, ...] | None], ...] = (
    # parameters
    ("vocab", ("tensor",)),
    ("embed", ("fsdp",)),
    ("mlp", ("tensor",)),
    ("q_heads", ("tensor",)),
    ("kv_heads", ("tensor",)),
    ("head_dim", None),
    ("norm", None),
    # activations
    ("batch", ("data", "fsdp")),
    ("act_len", None),
    ("act_embed", None),
    ("act_heads", ("tensor",)),
    ("act_mlp", ("tensor",)),
    ("act_vocab", ("tensor",)),
)


@dataclasses.dataclass(frozen=True)
class MeshConfig:
    """Mesh shape; one entry may be -1 to take all remaining devices."""

    data: int = 1
    fsdp: int = -1
    tensor: int = 1

    def shape(self, num_devices: int) -> tuple[int, int, int]:
        sizes = [self.data, self.fsdp, self.tensor]
        for name, size in zip(MESH_AXES, sizes):
            if size == 0 or size < -1:
                raise ValueError(f"mesh.{name} ({size}) must be a positive size or -1 (fill).")
        if sizes.count(-1) > 1:
            raise ValueError(f"mesh ({dict(zip(MESH_AXES, sizes))}) may use -1 for one axis only.")
        known = math.prod(s for s in sizes if s != -1)
        if -1 in sizes:
            if num_devices % known:
                raise ValueError(
                    f"mesh {dict(zip(MESH_AXES, sizes))}: the fixed axes use {known} devices, "
                    f"which does not divide the {num_devices} available; change the fixed sizes."
                )
            sizes[sizes.index(-1)] = num_devices // known
        if math.prod(sizes) != num_devices:
            raise ValueError(
                f"mesh {dict(zip(MESH_AXES, sizes))} needs {math.prod(sizes)} devices but "
                f"{num_devices} are available; set one axis to -1 to fill the rest."
            )
        return tuple(sizes)  # type: ignore[return-value]


def make_mesh(
    config: MeshConfig = MeshConfig(), devices: Sequence[jax.Device] | None = None
) -> Mesh:
    """Builds a (data, fsdp, tensor) mesh over `devices` (default: all devices)."""
    devices = list(jax.devices() if devices is None else devices)
    shape = config.shape(len(devices))
    return Mesh(np.asarray(devices, dtype=object).reshape(shape), MESH_AXES)


def data_parallel_size(mesh: Mesh) -> int:
    """Devices a batch is split over: data x fsdp (micro-batches must be multiples of it)."""
    return mesh.shape["data"] * mesh.shape["fsdp"]


def _rules_dict(rules) -> dict[str, tuple[str, ...] | None]:
    return {name: axes for name, axes in rules}


@dataclasses.dataclass(frozen=True)
class Fallback:
    """A logical dimension that could not be sharded as the rules asked."""

    logical: str
    dim: int
    axes: tuple[str, ...]
    axes_size: int


def resolve_spec(
    logical: Sequence[str | None] | None,
    shape: Sequence[int],
    mesh: Mesh,
    rules=LOGICAL_RULES,
) -> tuple[PartitionSpec, list[Fallback]]:
    """PartitionSpec for an array of `shape` whose dims carry `logical` names.

    Mesh axes of size 1 are dropped (they shard nothing). A mesh axis is used at most once per
    array (the first dimension asking for it gets it). Dimensions not divisible by their axes'
    total size are replicated and reported as `Fallback`s.
    """
    if logical is None:
        return PartitionSpec(), []
    if len(logical) != len(shape):
        raise ValueError(f"logical axes {tuple(logical)} do not match shape {tuple(shape)}.")
    table = _rules_dict(rules)
    used: set[str] = set()
    spec: list[tuple[str, ...] | None] = []
    fallbacks = []
    for name, dim in zip(logical, shape):
        if name is None:
            spec.append(None)
            continue
        if name not in table:
            raise KeyError(
                f"logical axis '{name}' has no rule in LOGICAL_RULES; add one "
                f"(known: {sorted(table)})."
            )
        axes = tuple(a for a in (table[name] or ()) if mesh.shape[a] > 1 and a not in used)
        size = math.prod(mesh.shape[a] for a in axes)
        if axes and dim % size:
            fallbacks.append(Fallback(name, dim, axes, size))
            axes = ()
        used.update(axes)
        spec.append(axes if len(axes) > 1 else (axes[0] if axes else None))
    return PartitionSpec(*spec), fallbacks


def named_sharding(logical, shape, mesh: Mesh, rules=LOGICAL_RULES) -> NamedSharding:
    return NamedSharding(mesh, resolve_spec(logical, shape, mesh, rules)[0])


def constrain(x: jax.Array, logical: Sequence[str | None]) -> jax.Array:
    """`with_sharding_constraint` by logical names under the ambient mesh (`jax.set_mesh`).

    Without an ambient mesh (plain single-device use, eager tests) there is nothing to
    constrain against and `x` is returned unchanged; under `jax.set_mesh(mesh)` the
    constraint always applies, on CPU meshes as on GPUs.
    """
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or tuple(mesh.axis_names) != MESH_AXES:
        return x
    spec, _ = resolve_spec(logical, x.shape, mesh)
    return jax.lax.with_sharding_constraint(x, spec)
