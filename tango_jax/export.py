"""Export one model of a saved Tango run step as a Hugging Face checkpoint directory.

    python -m tango_jax.export --run_dir RUN --role generator --out DIR [--step N]
        [--dtype bfloat16] [--tokenizer PATH] [--overwrite] [--merged]

A role trained with LoRA is written as a PEFT adapter directory (`adapter_config.json`,
`adapter_model.safetensors`, loaded by `peft.PeftModel.from_pretrained` on the base model,
whose path it records), or with `--merged` as a plain HF checkpoint with the adapters merged
into the weights. Its base weights come from the HF checkpoint the role started from (the
step's `ModelInfo.base_dir`); the run checkpoint holds the adapters.

The model is rebuilt from the `ModelInfo` stored in the step itself (the role's config.json
dict and tokenizer directory), so export needs nothing but the run directory. Only the
role's parameters are read (not the optimizer state), onto one device by default; the HF
files are written by `tango_jax.models.save_pretrained` (atomic, one tensor on the host at a
time), which transformers and vLLM load.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path
from typing import Any

import jax
from flax import nnx
from jax.sharding import Mesh

from tango_jax.checkpoint.run import CHECKPOINT_SUBDIR, ModelInfo, RunCheckpointer
from tango_jax.models import Transformer, from_pretrained, save_pretrained
from tango_jax.models.config import dtype_from_name
from tango_jax.models.peft import save_peft_adapter
from tango_jax.models.tokenizer import load_tokenizer
from tango_jax.parallel.mesh import MeshConfig, make_mesh
from tango_jax.parallel.partition import abstract_model, state_shardings


def _abstract_on(state, mesh: Mesh):
    shardings = state_shardings(state, mesh)
    return jax.tree.map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), state, shardings
    )


def load_role_model(
    checkpoint_dir: str | os.PathLike, step: int | None, role: str, mesh: Mesh | None = None
) -> tuple[Transformer, ModelInfo]:
    """`role`'s model at `step` (None: latest) of `checkpoint_dir`, with its `ModelInfo`: the
    stored parameters, or with LoRA the base from `info.base_dir` and the stored adapters.
    mesh: where the params are restored (default: the first device)."""
    ckpt = RunCheckpointer(checkpoint_dir, keep=1, read_only=True)
    try:
        step = ckpt.latest_step() if step is None else step
        info = ckpt.model_info(step, role)
        config = info.model_config()
        mesh = mesh or make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])
        if config.lora.enabled:
            model = from_pretrained(
                info.base_dir, mesh=mesh, param_dtype=config.param_dtype, lora=config.lora
            )
            target = _abstract_on(nnx.state(model, nnx.LoRAParam), mesh)
            nnx.update(model, ckpt.restore_params(step, role, target))
        else:
            graphdef, abstract = abstract_model(lambda: Transformer(config, rngs=nnx.Rngs(0)))
            model = nnx.merge(
                graphdef, ckpt.restore_params(step, role, _abstract_on(abstract, mesh))
            )
    finally:
        ckpt.close()
    return model, info


@dataclasses.dataclass(frozen=True)
class ExportOptions:
    """How an export is written (each default: the plain export of the command line)."""

    # saved alongside; None: loaded from the run's recorded tokenizer directory (none
    # recorded: the export has no tokenizer files)
    tokenizer: Any = None
    dtype: Any = None  # stored dtype; None: the parameter dtype (adapters: float32)
    # where the params are restored; None: the first device (pass a mesh for larger models)
    mesh: Mesh | None = None
    overwrite: bool = False  # replace an existing out_dir
    merged: bool = False  # a LoRA role: an HF checkpoint with the adapters merged (else PEFT)


def export_hf(
    checkpoint_dir: str | os.PathLike,
    step: int | None,
    role: str,
    out_dir: str | os.PathLike,
    options: ExportOptions = ExportOptions(),
) -> Path:
    """Writes `role`'s model at `step` (None: latest) of `checkpoint_dir` to `out_dir`: an HF
    checkpoint, or for a LoRA role a PEFT adapter directory unless `options.merged`."""
    o = options
    model, info = load_role_model(checkpoint_dir, step, role, o.mesh)
    tokenizer = o.tokenizer
    if tokenizer is None and info.tokenizer_dir is not None:
        tokenizer = load_tokenizer(info.tokenizer_dir)
    if model.config.lora.enabled and not o.merged:
        out = save_peft_adapter(model, out_dir, base_model=info.base_dir, overwrite=o.overwrite)
        if tokenizer is not None:
            tokenizer.save_pretrained(str(out))
        return out
    return save_pretrained(
        model, out_dir, tokenizer=tokenizer, dtype=o.dtype, overwrite=o.overwrite
    )


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run_dir", required=True, help="the run directory (holds checkpoints/)")
    parser.add_argument("--role", required=True, help="generator or verifier")
    parser.add_argument("--out", required=True, help="output HF checkpoint directory")
    parser.add_argument("--step", type=int, default=None, help="saved step (default: latest)")
    parser.add_argument("--dtype", default=None, help="float32, bfloat16 or float16")
    parser.add_argument("--tokenizer", default=None, help="tokenizer dir (default: the run's)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    parser.add_argument(
        "--merged",
        action="store_true",
        help="a LoRA role: write the HF checkpoint with the adapters merged (default: PEFT dir)",
    )
    args = parser.parse_args(argv)
    try:
        out = export_hf(
            Path(args.run_dir) / CHECKPOINT_SUBDIR,
            args.step,
            args.role,
            args.out,
            ExportOptions(
                tokenizer=None if args.tokenizer is None else load_tokenizer(args.tokenizer),
                dtype=None if args.dtype is None else dtype_from_name(args.dtype),
                overwrite=args.overwrite,
                merged=args.merged,
            ),
        )
    except (FileNotFoundError, FileExistsError, KeyError, ValueError) as e:
        parser.exit(2, f"tango_jax.export: error: {e.args[0] if e.args else e}\n")
    print(f"exported {args.role} to {out}")
    return out


if __name__ == "__main__":
    main()
