"""Hugging Face checkpoints <-> NNX models, through one name/layout table per model family.

`tensor_table(config)` lists, for every parameter, its HF tensor name, its NNX state path and
the two layout transforms between them. Loading (`from_pretrained`), saving
(`save_pretrained`) and weight sync to vLLM (`iter_hf_tensors`) all walk that one table, so
they cannot disagree about a name or a transpose.

Layouts (NNX side chosen for einsum readability; letters as in transformer.py):
  q/k/v_proj.weight  HF [N*H, D]  <->  NNX [D, N, H]      (K instead of N for k and v)
  o_proj.weight      HF [D, N*H]  <->  NNX [N, H, D]
  q/k/v_proj.bias    HF [N*H]     <->  NNX [N, H]            (qwen2 only)
  q/k_norm.weight    HF [H]       <->  NNX [H]               (qwen3 only: one scale per head dim)
  gate/up_proj       HF [F, D]    <->  NNX [D, F];   down_proj HF [D, F] <-> NNX [F, D]
  lm_head.weight     HF [V, D]    <->  NNX [D, V];   embeddings and norms unchanged
Transforms are written with `.T` and `.reshape` only, so they work on NumPy arrays (load, save)
and on sharded jax.Arrays on device (weight sync) alike.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from tango_jax.models.config import Family, ModelConfig
from tango_jax.models.lora import adapter_paths, merged_weight
from tango_jax.models.transformer import Transformer
from tango_jax.parallel.mesh import LOGICAL_RULES, MeshConfig, make_mesh
from tango_jax.parallel.partition import abstract_model, state_shardings


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be turned into the model it claims to be."""


Transform = Callable[[Any], Any]


@dataclasses.dataclass(frozen=True)
class TensorMap:
    hf_name: str
    path: tuple[str | int, ...]  # path in nnx.state(model)
    hf_shape: tuple[int, ...]
    to_nnx: Transform
    to_hf: Transform


def _identity(x):
    return x


def _transpose(x):
    return x.T


def _heads_in(heads: int, head_dim: int) -> tuple[Transform, Transform]:
    """HF [heads*H, D] <-> NNX [D, heads, H] (q/k/v projections)."""
    return (
        lambda w: w.T.reshape(w.shape[1], heads, head_dim),
        lambda w: w.reshape(w.shape[0], heads * head_dim).T,
    )


def _heads_out(heads: int, head_dim: int) -> tuple[Transform, Transform]:
    """HF [D, heads*H] <-> NNX [heads, H, D] (o projection)."""
    return (
        lambda w: w.T.reshape(heads, head_dim, w.shape[0]),
        lambda w: w.reshape(heads * head_dim, w.shape[2]).T,
    )


def _bias(heads: int, head_dim: int) -> tuple[Transform, Transform]:
    return (lambda b: b.reshape(heads, head_dim), lambda b: b.reshape(heads * head_dim))


def _decoder_table(c: ModelConfig, *, qkv_bias: bool, qk_norm: bool) -> list[TensorMap]:
    """Entries of the Qwen2, Qwen3 and Llama families (they use the same HF names; Qwen2 adds
    q/k/v biases, Qwen3 per-head q/k norms)."""
    d, f, n, k, h = c.embed_dim, c.mlp_dim, c.num_heads, c.num_kv_heads, c.head_dim
    t: list[TensorMap] = [
        TensorMap("model.embed_tokens.weight", ("embed",), (c.vocab_size, d), _identity, _identity),
        TensorMap("model.norm.weight", ("final_norm", "scale"), (d,), _identity, _identity),
    ]
    if not c.tie_word_embeddings:
        t.append(
            TensorMap("lm_head.weight", ("lm_head",), (c.vocab_size, d), _transpose, _transpose)
        )
    for i in range(c.num_layers):
        hf, nn = f"model.layers.{i}.", ("layers", i)
        attn = (*nn, "attention")
        t += [
            TensorMap(
                hf + "input_layernorm.weight",
                (*nn, "input_norm", "scale"),
                (d,),
                _identity,
                _identity,
            ),
            TensorMap(
                hf + "post_attention_layernorm.weight",
                (*nn, "post_attention_norm", "scale"),
                (d,),
                _identity,
                _identity,
            ),
            TensorMap(hf + "self_attn.q_proj.weight", (*attn, "q"), (n * h, d), *_heads_in(n, h)),
            TensorMap(hf + "self_attn.k_proj.weight", (*attn, "k"), (k * h, d), *_heads_in(k, h)),
            TensorMap(hf + "self_attn.v_proj.weight", (*attn, "v"), (k * h, d), *_heads_in(k, h)),
            TensorMap(hf + "self_attn.o_proj.weight", (*attn, "o"), (d, n * h), *_heads_out(n, h)),
            TensorMap(
                hf + "mlp.gate_proj.weight", (*nn, "mlp", "gate"), (f, d), _transpose, _transpose
            ),
            TensorMap(
                hf + "mlp.up_proj.weight", (*nn, "mlp", "up"), (f, d), _transpose, _transpose
            ),
            TensorMap(
                hf + "mlp.down_proj.weight", (*nn, "mlp", "down"), (d, f), _transpose, _transpose
            ),
        ]
        if qkv_bias:
            t += [
                TensorMap(hf + "self_attn.q_proj.bias", (*attn, "q_bias"), (n * h,), *_bias(n, h)),
                TensorMap(hf + "self_attn.k_proj.bias", (*attn, "k_bias"), (k * h,), *_bias(k, h)),
                TensorMap(hf + "self_attn.v_proj.bias", (*attn, "v_bias"), (k * h,), *_bias(k, h)),
            ]
        if qk_norm:
            t += [
                TensorMap(
                    hf + f"self_attn.{name}.weight",
                    (*attn, name, "scale"),
                    (h,),
                    _identity,
                    _identity,
                )
                for name in ("q_norm", "k_norm")
            ]
    return t


def _qwen2_table(c: ModelConfig) -> list[TensorMap]:
    return _decoder_table(c, qkv_bias=True, qk_norm=False)


def _qwen3_table(c: ModelConfig) -> list[TensorMap]:
    return _decoder_table(c, qkv_bias=False, qk_norm=True)


def _llama_table(c: ModelConfig) -> list[TensorMap]:
    return _decoder_table(c, qkv_bias=False, qk_norm=False)


_TABLES = {Family.QWEN2: _qwen2_table, Family.QWEN3: _qwen3_table, Family.LLAMA: _llama_table}

# Tensors some checkpoints carry that the model legitimately does not use.
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


def tensor_table(config: ModelConfig) -> list[TensorMap]:
    return _TABLES[config.family](config)


# --- reading safetensors -----------------------------------------------------------------------


class _SafetensorsDir:
    """Lazy access to the tensors of a checkpoint directory (single file or sharded + index)."""

    def __init__(self, path: Path):
        from safetensors import safe_open

        self.path = path
        index = path / "model.safetensors.index.json"
        if index.exists():
            try:
                weight_map = json.loads(index.read_text())["weight_map"]
            except (json.JSONDecodeError, KeyError) as e:
                raise CheckpointError(f"{index}: not a valid safetensors index ({e}).") from e
            files = sorted(set(weight_map.values()))
        else:
            files = sorted(p.name for p in path.glob("*.safetensors"))
            if not files:
                raise CheckpointError(
                    f"{path}: no *.safetensors files (and no model.safetensors.index.json). "
                    "Save the checkpoint with safetensors (transformers does by default)."
                )
            weight_map = None
        self.handles = {}
        for name in files:
            file = path / name
            if not file.exists():
                raise CheckpointError(f"{file}: listed in {index.name} but missing.")
            try:
                self.handles[name] = safe_open(str(file), framework="numpy")
            except Exception as e:  # safetensors raises its own error types for bad headers
                raise CheckpointError(
                    f"{file}: cannot be read as safetensors, truncated or corrupt ({e})."
                ) from e
        if weight_map is None:
            weight_map = {k: name for name, h in self.handles.items() for k in h.keys()}  # noqa: SIM118
        self.weight_map: dict[str, str] = weight_map

    def names(self) -> set[str]:
        return set(self.weight_map)

    def read(self, name: str) -> np.ndarray:
        file = self.path / self.weight_map[name]
        try:
            return self.handles[self.weight_map[name]].get_tensor(name)
        except Exception as e:
            raise CheckpointError(
                f"{file}: tensor '{name}' cannot be read, file truncated or corrupt ({e})."
            ) from e

    def shape(self, name: str) -> tuple[int, ...]:
        try:
            return tuple(self.handles[self.weight_map[name]].get_slice(name).get_shape())
        except Exception as e:
            raise CheckpointError(
                f"{self.path / self.weight_map[name]}: tensor '{name}' unreadable ({e})."
            ) from e


def read_config(path: str | os.PathLike, **overrides) -> ModelConfig:
    """ModelConfig from `path/config.json`; overrides set numerics (dtype, param_dtype, remat)."""
    file = Path(path) / "config.json"
    if not file.exists():
        raise CheckpointError(
            f"{file} does not exist: `path` must be a Hugging Face checkpoint directory."
        )
    try:
        hf = json.loads(file.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{file}: invalid JSON ({e}).") from e
    return ModelConfig.from_hf_dict(hf, source=str(file), **overrides)


def from_pretrained(
    path: str | os.PathLike,
    *,
    mesh: Mesh | None = None,
    dtype: Any = jnp.float32,
    param_dtype: Any = jnp.float32,
    remat: bool = False,
    attention: str = "auto",
    rules=LOGICAL_RULES,
    **variants,
) -> Transformer:
    """Loads a local HF checkpoint directory straight into a model sharded over `mesh`.

    Tensors are read one at a time (memory-mapped) and each device receives only its shard
    (`jax.make_array_from_callback`), so the whole model never sits on one device; host memory
    peaks at one tensor. `mesh=None` uses the first device. Raises `CheckpointError` naming the
    file or tensor for missing/truncated files, unsupported architectures and shape mismatches.
    `variants`: other ModelConfig fields (decode_attention, fused_norm, fused_mlp, fused_rope,
    padding_as_lengths).
    """
    path = Path(path)
    config = read_config(
        path, dtype=dtype, param_dtype=param_dtype, remat=remat, attention=attention, **variants
    )
    if mesh is None:
        mesh = make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])
    files = _SafetensorsDir(path)
    graphdef, abstract = abstract_model(lambda: Transformer(config, rngs=nnx.Rngs(0)))
    shardings = nnx.to_flat_state(state_shardings(abstract, mesh, rules))
    flat = dict(nnx.to_flat_state(abstract))
    table = tensor_table(config)

    expected = {e.hf_name for e in table}
    unexpected = sorted(
        n
        for n in files.names() - expected
        if not n.endswith(_IGNORED_SUFFIXES)
        and not (config.tie_word_embeddings and n == "lm_head.weight")
    )
    if unexpected:
        raise CheckpointError(
            f"{path}: tensors {unexpected[:5]}{' ...' if len(unexpected) > 5 else ''} are not "
            f"part of a {config.family.value} model with this config.json; the checkpoint and "
            "config disagree."
        )
    sharding_of = dict(shardings)
    for entry in table:
        if entry.hf_name not in files.weight_map:
            raise CheckpointError(
                f"{path}: tensor '{entry.hf_name}' is missing from the checkpoint."
            )
        shape = files.shape(entry.hf_name)
        if shape != entry.hf_shape:
            raise CheckpointError(
                f"{path / files.weight_map[entry.hf_name]}: tensor '{entry.hf_name}' has shape "
                f"{shape}, but config.json implies {entry.hf_shape}."
            )
        host = np.asarray(entry.to_nnx(files.read(entry.hf_name))).astype(param_dtype)
        var = flat[entry.path]
        sharding = sharding_of[entry.path].get_value()
        value = jax.make_array_from_callback(host.shape, sharding, lambda idx, a=host: a[idx])
        flat[entry.path] = var.replace(value)
    if config.lora.enabled:  # fresh adapters (B = 0: the loaded model's outputs are unchanged)
        flat.update(_initial_adapters(config, mesh, rules))
    missing = [p for p, v in flat.items() if isinstance(v.get_value(), jax.ShapeDtypeStruct)]
    if missing:  # a table that does not cover the model is a bug in this module, not in the input
        raise AssertionError(f"tensor_table does not cover model parameters {missing}.")
    return nnx.merge(graphdef, nnx.from_flat_state(flat))


def _initial_adapters(config: ModelConfig, mesh: Mesh, rules) -> dict:
    """The adapters' initial values (flat state), created on their shards from
    `lora.init_seed` (the base parameters' initialisers are traced but pruned as unused)."""
    make = lambda: Transformer(config, rngs=nnx.Rngs(config.lora.init_seed))
    _, abstract = abstract_model(make)
    shardings = state_shardings(nnx.filter_state(abstract, nnx.LoRAParam), mesh, rules)
    init = jax.jit(lambda: nnx.state(make(), nnx.LoRAParam), out_shardings=shardings)
    return dict(nnx.to_flat_state(init()))


# --- writing -----------------------------------------------------------------------------------


def iter_hf_tensors(
    model: Transformer | nnx.State, config: ModelConfig | None = None, dtype: Any = None
) -> Iterator[tuple[str, jax.Array]]:
    """Yields (HF name, array in HF layout) one parameter at a time, on device.

    `model` may be the model or its `nnx.State` (then pass `config`). `dtype` casts (e.g. to
    the sampler's bf16). Used by weight sync (which gathers/streams each tensor) and saving.
    LoRA adapters are merged into their projections (W + (alpha / r)·A·B): the tensors are
    those of the plain model that computes what the adapted one does. Merged tensors are
    float32 unless `dtype` is given (one rounding, by the caller, to what it sends or stores).
    """
    if isinstance(model, Transformer):
        config, state = model.config, nnx.state(model)
    else:
        if config is None:
            raise ValueError("iter_hf_tensors: pass `config` when giving an nnx.State.")
        state = model
    flat = dict(nnx.to_flat_state(state))
    adapted = {w: a for _, _, w, a in adapter_paths(config.num_layers, config.lora)}
    for entry in tensor_table(config):
        value = flat[entry.path].get_value()
        if entry.path in adapted:
            a = flat[(*adapted[entry.path], "lora_a")].get_value()
            b = flat[(*adapted[entry.path], "lora_b")].get_value()
            value = merged_weight(value, a, b, config.lora.scale)
        out = entry.to_hf(value)
        yield entry.hf_name, out if dtype is None else out.astype(dtype)


def to_host(x: jax.Array) -> np.ndarray:
    """The whole of `x` as a host array (an all-gather when it spans several processes)."""
    if not x.is_fully_addressable:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(jax.device_get(x))


def save_pretrained(
    model: Transformer,
    path: str | os.PathLike,
    *,
    tokenizer: Any = None,
    dtype: Any = None,
    max_shard_bytes: int = 5 * 2**30,
    overwrite: bool = False,
) -> Path:
    """Writes `model` as a HF checkpoint directory that transformers and vLLM load.

    The directory is written under a temporary name and renamed into place, so a crash never
    leaves a half-written checkpoint at `path`. Tensors are gathered to host one at a time.
    `dtype` (default: the parameter dtype) is the stored dtype. With several processes
    (jax.distributed) every process takes part in the gathers, process 0 alone writes, and all
    return once the directory is in place.
    """
    kwargs = dict(tokenizer=tokenizer, dtype=dtype, max_shard_bytes=max_shard_bytes)
    if jax.process_count() == 1:
        return _save_pretrained(model, path, overwrite=overwrite, **kwargs)
    from jax.experimental import multihost_utils

    if jax.process_index() == 0:
        _save_pretrained(model, path, overwrite=overwrite, **kwargs)
    else:
        for _, value in iter_hf_tensors(model):  # the same gathers, in the same order
            to_host(value)
    multihost_utils.sync_global_devices(f"save_pretrained {path}")
    return Path(path)


def _save_pretrained(
    model: Transformer,
    path: str | os.PathLike,
    *,
    tokenizer: Any,
    dtype: Any,
    max_shard_bytes: int,
    overwrite: bool,
) -> Path:
    from safetensors.numpy import save_file

    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists; pass overwrite=True to replace it.")
    config = model.config
    dtype = jnp.dtype(dtype or config.param_dtype)
    with staged_directory(path) as tmp:
        shards: list[dict[str, np.ndarray]] = [{}]
        size = 0
        for name, value in iter_hf_tensors(model):
            host = to_host(value).astype(dtype)
            if size and size + host.nbytes > max_shard_bytes:
                shards.append({})
                size = 0
            shards[-1][name] = np.ascontiguousarray(host)
            size += host.nbytes
        weight_map = {}
        for i, tensors in enumerate(shards):
            fname = (
                "model.safetensors"
                if len(shards) == 1
                else f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
            )
            save_file(tensors, str(tmp / fname), metadata={"format": "pt"})
            weight_map.update(dict.fromkeys(tensors, fname))
        if len(shards) > 1:
            total = sum(t.nbytes for s in shards for t in s.values())
            (tmp / "model.safetensors.index.json").write_text(
                json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2)
            )
        write_hf_configs(tmp, config, dtype.name)
        if tokenizer is not None:
            tokenizer.save_pretrained(str(tmp))
    return path


@contextlib.contextmanager
def staged_directory(path: Path) -> Iterator[Path]:
    """A directory written whole or not at all: the body writes into a fresh sibling
    (`.<name>.tmp-*`), which then replaces `path` (an old `path` is renamed aside first and
    removed after, so `path` is never missing once it existed); on an error the sibling is
    removed and `path` stays as it was."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        yield tmp
        if path.exists():
            old = path.with_name(f".{path.name}.old-{os.getpid()}")
            path.rename(old)
            tmp.rename(path)
            shutil.rmtree(old)
        else:
            tmp.rename(path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_hf_configs(directory: Path, config: ModelConfig, torch_dtype: str) -> None:
    """config.json and the generation_config.json (its special token ids) of a checkpoint."""
    hf_config = config.to_hf_dict(torch_dtype=torch_dtype)
    (directory / "config.json").write_text(json.dumps(hf_config, indent=2))
    gen = {
        k: hf_config[k]
        for k in ("bos_token_id", "eos_token_id", "pad_token_id")
        if hf_config[k] is not None
    }
    (directory / "generation_config.json").write_text(json.dumps(gen, indent=2))
