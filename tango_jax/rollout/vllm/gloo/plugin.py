"""vLLM general plugin: registers tango_jax's CPU weight-transfer engine under the name "gloo".

vLLM calls `register()` in every process it starts (API server, engine core, workers) through
the `vllm.general_plugins` entry point declared in pyproject.toml, so that
`vllm serve --weight-transfer-config '{"backend": "gloo"}'` finds the engine on the worker
side exactly as it finds the built-in "nccl" one. The trainer registers the same name in its
own process (`vllm.sync` calls `register()`) for the trainer-side engine.

Registration is lazy (a module path, not a class), so this import stays cheap: no torch, no
JAX, and vLLM's factory module only.
"""

from __future__ import annotations

BACKEND = "gloo"
_ENGINE_MODULE = "tango_jax.rollout.vllm.gloo.engine"
_TRAINER_MODULE = "tango_jax.rollout.vllm.gloo.trainer"


def register() -> None:
    """Registers the "gloo" worker and trainer engines with vLLM's factories; idempotent.

    vLLM may call general plugins more than once per process, and its factories refuse a
    second registration of a name, hence the membership checks.
    """
    from vllm.distributed.weight_transfer.factory import (
        WeightTransferEngineFactory,
        WeightTransferTrainerFactory,
    )

    if BACKEND not in WeightTransferEngineFactory._registry:
        WeightTransferEngineFactory.register_engine(
            BACKEND, _ENGINE_MODULE, "GlooWeightTransferEngine"
        )
    if BACKEND not in WeightTransferTrainerFactory._registry:
        WeightTransferTrainerFactory.register_engine(
            BACKEND, _TRAINER_MODULE, "GlooTrainerWeightTransferEngine"
        )
