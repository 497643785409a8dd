"""The XLA flags of every test process and of the child processes tests start.

Tests compile hundreds of small programs and run each a few times, so XLA's CPU compile time,
not run time, is most of the suite. Two settings shorten it, and neither changes what is
computed (HLO optimisation, which decides the numerics, is untouched; float32 matmuls and
convolutions stay library calls):

- LLVM's optimisation level 0, without its expensive passes: about 30% less compile time;
- XLA:CPU's legacy loop emitters instead of its MLIR fusion emitters
  (`--xla_cpu_use_fusion_emitters=false`): about 35% less CPU time again in compile-bound
  modules (jax 0.10.2; the measurements are in docs/testing.md).

Either can part two differently fused programs in the last bit. It applies to tests only: runs
and benchmarks keep XLA's defaults.
"""

FAST_COMPILE = (
    "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
    " --xla_cpu_use_fusion_emitters=false"
)


def xla_flags(local_devices: int | None = None) -> str:
    """XLA_FLAGS for a test process: `local_devices` simulated CPU devices (None: XLA's one)."""
    devices = f"--xla_force_host_platform_device_count={local_devices} " if local_devices else ""
    return devices + FAST_COMPILE
