"""LoRA adapters <-> PEFT adapter directories (`adapter_config.json`, `adapter_model.safetensors`).

The directory is what `peft.PeftModel.from_pretrained(base_model, dir)` loads on top of the
Hugging Face base checkpoint (and what vLLM's `--enable-lora` serves). Tensor names and layouts:

  base_model.model.model.layers.{i}.self_attn.{q,k,v,o}_proj.lora_A.weight   [r, in]  = A.T
  base_model.model.model.layers.{i}.self_attn.{q,k,v,o}_proj.lora_B.weight   [out, r] = B.T
  base_model.model.model.layers.{i}.mlp.{gate,up,down}_proj.lora_{A,B}.weight

with A [in, r] and B [r, out] as in models/lora.py.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import jax
import numpy as np
from flax import nnx

from tango_jax.models.lora import HF_SUBMODULE, PROJECTIONS, LoraConfig, adapter_paths
from tango_jax.models.transformer import Transformer

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"


def _peft_entries(model: Transformer) -> Iterator[tuple[str, tuple, tuple]]:
    """(PEFT name prefix, state path of A, state path of B) of every adapter."""
    c = model.config
    for target, i, _, adapter in adapter_paths(c.num_layers, c.lora):
        submodule = HF_SUBMODULE[PROJECTIONS[target][0]]
        prefix = f"base_model.model.model.layers.{i}.{submodule}.{target}"
        yield prefix, (*adapter, "lora_a"), (*adapter, "lora_b")


def peft_config(lora: LoraConfig, base_model: str = "") -> dict:
    """The adapter_config.json of `lora` (PEFT's LoraConfig fields)."""
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_model,
        "r": lora.rank,
        "lora_alpha": lora.alpha,
        "lora_dropout": lora.dropout,
        "target_modules": sorted(lora.targets),
        "bias": "none",
        "fan_in_fan_out": False,
        "use_rslora": False,
        "use_dora": False,
        "init_lora_weights": True,
    }


def save_peft_adapter(
    model: Transformer, path: str | os.PathLike, *, base_model: str = "", overwrite: bool = False
) -> Path:
    """Writes `model`'s adapters as a PEFT adapter directory (float32), atomically (written
    under a temporary name, then renamed into place)."""
    from safetensors.numpy import save_file

    from tango_jax.models.hf import staged_directory, to_host

    if not model.config.lora.enabled:
        raise ValueError("save_peft_adapter: the model has no LoRA adapters (lora.rank is 0).")
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists; pass overwrite=True to replace it.")
    flat = dict(nnx.to_flat_state(nnx.state(model, nnx.LoRAParam)))
    tensors = {}
    for prefix, a, b in _peft_entries(model):
        tensors[f"{prefix}.lora_A.weight"] = np.ascontiguousarray(to_host(flat[a].get_value()).T)
        tensors[f"{prefix}.lora_B.weight"] = np.ascontiguousarray(to_host(flat[b].get_value()).T)
    with staged_directory(path) as tmp:
        save_file(tensors, str(tmp / ADAPTER_WEIGHTS), metadata={"format": "pt"})
        config = peft_config(model.config.lora, base_model)
        (tmp / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2) + "\n")
    return path


def read_peft_config(path: str | os.PathLike) -> LoraConfig:
    """The LoraConfig of a PEFT adapter directory (plain LoRA only: no DoRA, no rsLoRA)."""
    file = Path(path) / ADAPTER_CONFIG
    if not file.exists():
        raise FileNotFoundError(f"{file} does not exist: not a PEFT adapter directory.")
    cfg = json.loads(file.read_text())
    unsupported = [k for k in ("use_dora", "use_rslora") if cfg.get(k)]
    if cfg.get("peft_type") != "LORA" or unsupported or cfg.get("bias", "none") != "none":
        raise ValueError(
            f"{file}: only plain LoRA adapters load (peft_type LORA, bias none, no "
            f"{unsupported or 'DoRA/rsLoRA'}); got peft_type {cfg.get('peft_type')!r}."
        )
    targets = cfg["target_modules"]
    targets = {targets} if isinstance(targets, str) else set(targets)
    return LoraConfig(
        rank=int(cfg["r"]),
        alpha=float(cfg["lora_alpha"]),
        targets=tuple(t for t in PROJECTIONS if t in targets)
        + tuple(sorted(targets - set(PROJECTIONS))),
        dropout=float(cfg.get("lora_dropout", 0.0)),
    )


def load_peft_adapter(model: Transformer, path: str | os.PathLike) -> Transformer:
    """Sets `model`'s adapters (in place) from a PEFT adapter directory whose LoRA settings
    equal the model's `config.lora` (rank, alpha, targets); returns the model."""
    from safetensors import safe_open

    path = Path(path)
    theirs, ours = read_peft_config(path), model.config.lora
    if (theirs.rank, theirs.alpha, set(theirs.targets)) != (
        ours.rank,
        ours.alpha,
        set(ours.targets),
    ):
        raise ValueError(
            f"{path}: adapter rank {theirs.rank}, alpha {theirs.alpha}, targets "
            f"{sorted(theirs.targets)} differ from the model's lora ({ours.rank}, {ours.alpha}, "
            f"{sorted(ours.targets)}); set the role's lora fields to the adapter's."
        )
    state = nnx.state(model, nnx.LoRAParam)
    flat = dict(nnx.to_flat_state(state))
    with safe_open(str(path / ADAPTER_WEIGHTS), framework="numpy") as f:
        names = set(f.keys())
        for prefix, a, b in _peft_entries(model):
            for suffix, p in (("lora_A", a), ("lora_B", b)):
                name = f"{prefix}.{suffix}.weight"
                if name not in names:
                    raise ValueError(f"{path / ADAPTER_WEIGHTS}: tensor '{name}' is missing.")
                var = flat[p]
                host = f.get_tensor(name).T.astype(var.get_value().dtype)
                if host.shape != var.get_value().shape:
                    raise ValueError(
                        f"{path / ADAPTER_WEIGHTS}: '{name}' has shape {host.shape[::-1]}, "
                        f"the model's adapter {var.get_value().shape[::-1]}."
                    )
                flat[p] = var.replace(jax.device_put(host, var.get_value().sharding))
    nnx.update(model, nnx.from_flat_state(flat))
    return model
