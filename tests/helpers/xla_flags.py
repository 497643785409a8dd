"""The XLA flags of every test process and of the child processes tests start.

Tests compile hundreds of small programs and run each a few times, so XLA's CPU compile time,
not run time, is most of the suite: LLVM's optimisation level 0 (and no expensive LLVM passes)
compiles about 30% faster and changes no result a test checks (HLO optimisation, which decides
the numerics, is untouched; float32 matmuls and convolutions stay library calls). It applies to
tests only: runs and benchmarks keep XLA's defaults.
"""

FAST_COMPILE = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"


def xla_flags(local_devices: int | None = None) -> str:
    """XLA_FLAGS for a test process: `local_devices` simulated CPU devices (None: XLA's one)."""
    devices = f"--xla_force_host_platform_device_count={local_devices} " if local_devices else ""
    return devices + FAST_COMPILE
