"""Export one model of a saved Tango run step as a Hugging Face checkpoint directory.

    python -m tango_jax.export --run_dir RUN --role generator --out DIR [--step N]
        [--dtype bfloat16] [--tokenizer PATH] [--overwrite]

The model is rebuilt from the `ModelInfo` stored in the step itself (the role's config.json
dict and tokenizer directory), so export needs nothing but the run directory. Only the
role's parameters are read (not the optimizer state), onto one device by default; the HF
files are written by `tango_jax.models.save_pretrained` (atomic, one tensor on the host at a
time), which transformers and vLLM load.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import jax
from flax import nnx
from jax.sharding import Mesh

from tango_jax.checkpoint.run import CHECKPOINT_SUBDIR, RunCheckpointer
from tango_jax.models import Transformer, save_pretrained
from tango_jax.models.config import dtype_from_name
from tango_jax.models.tokenizer import load_tokenizer
from tango_jax.parallel.mesh import MeshConfig, make_mesh
from tango_jax.parallel.partition import abstract_model, state_shardings


def export_hf(
    checkpoint_dir: str | os.PathLike,
    step: int | None,
    role: str,
    out_dir: str | os.PathLike,
    *,
    tokenizer: Any = None,
    dtype: Any = None,
    mesh: Mesh | None = None,
    overwrite: bool = False,
) -> Path:
    """Writes `role`'s model at `step` (None: latest) of `checkpoint_dir` to `out_dir`.

    tokenizer: saved alongside; default: loaded from the run's recorded tokenizer directory
      (none recorded: the export has no tokenizer files).
    dtype: stored dtype (default: the parameter dtype). mesh: where the params are restored
      (default: the first device; pass a mesh for models larger than one device).
    """
    ckpt = RunCheckpointer(checkpoint_dir, keep=1, read_only=True)
    try:
        step = ckpt.latest_step() if step is None else step
        info = ckpt.model_info(step, role)
        config = info.model_config()
        mesh = mesh or make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])
        graphdef, abstract = abstract_model(lambda: Transformer(config, rngs=nnx.Rngs(0)))
        shardings = state_shardings(abstract, mesh)
        target = jax.tree.map(
            lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, shardings
        )
        model = nnx.merge(graphdef, ckpt.restore_params(step, role, target))
    finally:
        ckpt.close()
    if tokenizer is None and info.tokenizer_dir is not None:
        tokenizer = load_tokenizer(info.tokenizer_dir)
    return save_pretrained(model, out_dir, tokenizer=tokenizer, dtype=dtype, overwrite=overwrite)


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run_dir", required=True, help="the run directory (holds checkpoints/)")
    parser.add_argument("--role", required=True, help="generator or verifier")
    parser.add_argument("--out", required=True, help="output HF checkpoint directory")
    parser.add_argument("--step", type=int, default=None, help="saved step (default: latest)")
    parser.add_argument("--dtype", default=None, help="float32, bfloat16 or float16")
    parser.add_argument("--tokenizer", default=None, help="tokenizer dir (default: the run's)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    args = parser.parse_args(argv)
    try:
        out = export_hf(
            Path(args.run_dir) / CHECKPOINT_SUBDIR,
            args.step,
            args.role,
            args.out,
            tokenizer=None if args.tokenizer is None else load_tokenizer(args.tokenizer),
            dtype=None if args.dtype is None else dtype_from_name(args.dtype),
            overwrite=args.overwrite,
        )
    except (FileNotFoundError, FileExistsError, KeyError, ValueError) as e:
        parser.exit(2, f"tango_jax.export: error: {e.args[0] if e.args else e}\n")
    print(f"exported {args.role} to {out}")
    return out


if __name__ == "__main__":
    main()
