"""The vLLM sampler's configs: what `VLLMSampler` runs on, and what a run config says.

    VLLMSamplerConfig(servers=(VLLMServerConfig(model=..., ...),), sync=WeightSyncConfig(...))
    VLLMConfig(replicas=2, server=VLLMServerConfig(tensor_parallel_size=2)).sampler_config(
        model="/ckpt", max_model_len=4096)                    # -> a VLLMSamplerConfig

`VLLMConfig` is `RoleConfig.sampler.vllm`: it embeds the server's and the weight sync's own
dataclasses, so a new server or sync setting is one field, in its own class.
"""

from __future__ import annotations

import dataclasses

from tango_jax.rollout.vllm.server import VLLMServerConfig
from tango_jax.rollout.vllm.sync import SyncBackend, WeightSyncConfig
from tango_jax.schema import FieldError, apply_derived, derived, secret_field


@dataclasses.dataclass(frozen=True)
class VLLMClientConfig:
    """What a `VLLMSampler` needs besides its servers (the fields that `VLLMSamplerConfig` and
    a run config's `VLLMConfig` share)."""

    urls: tuple[str, ...] = ()  # running servers to use (e.g. from tango_jax/launch_vllm.py)
    # The servers' key: required on every route but /health, the weight-update routes included.
    # Name the environment variable that holds it (the key never enters config.json, W&B or the
    # command line); `api_key` itself still works but is redacted wherever a config is written.
    api_key_env: str = ""
    api_key: str | None = secret_field()
    # How weights reach the servers (backend and dtype must match theirs).
    sync: WeightSyncConfig = dataclasses.field(default_factory=WeightSyncConfig)
    request_timeout_s: float = 1800.0  # limit of one completions request (one prompt's n samples)
    max_concurrency: int = 64  # requests in flight per replica
    # Restarts of one replica within one `generate` / `update_weights` call (and resends of
    # requests whose connection a healthy server dropped).
    max_restarts: int = 2
    # Score a fixed sequence with vLLM and with the JAX model after each sync and raise if they
    # disagree (`vllm.verify`); costs one short forward pass each.
    verify_after_sync: bool = True


@dataclasses.dataclass(frozen=True)
class VLLMSamplerConfig(VLLMClientConfig):
    """The sampler's servers: `servers` to launch and own (one per replica), or `urls` of
    running ones (their key, if any, in `api_key`)."""

    servers: tuple[VLLMServerConfig, ...] = ()

    def __post_init__(self):
        if bool(self.servers) == bool(self.urls):
            raise ValueError(
                "VLLMSamplerConfig: give exactly one of `servers` (launch them) or `urls` "
                f"(connect to running ones); got {len(self.servers)} servers and "
                f"{len(self.urls)} urls."
            )
        for s in self.servers:
            backend = s.weight_transfer_backend
            if backend is not None and backend != self.sync.backend.value:
                raise ValueError(
                    f"VLLMServerConfig.weight_transfer_backend ({backend!r}) must equal "
                    f"VLLMSamplerConfig.sync.backend ({self.sync.backend.value!r})."
                )
            if s.dtype != self.sync.dtype:
                raise ValueError(
                    f"VLLMServerConfig.dtype ({s.dtype!r}) must equal "
                    f"VLLMSamplerConfig.sync.dtype ({self.sync.dtype!r}): weights are sent in "
                    "the server's dtype."
                )
        if self.max_concurrency < 1:
            raise ValueError(f"max_concurrency ({self.max_concurrency}) must be >= 1.")
        if self.max_restarts < 0:
            raise ValueError(f"max_restarts ({self.max_restarts}) must be >= 0.")


@dataclasses.dataclass(frozen=True)
class VLLMConfig(VLLMClientConfig):
    """A role's vLLM servers as a run config describes them (`RoleConfig.sampler.vllm`):
    running ones at `urls`, or `replicas` copies of `server` that the sampler launches and
    restarts. `sampler_config` turns it into the sampler's `VLLMSamplerConfig`. The servers'
    dtype and weight-transfer backend are the sync's, their key is `api_key`."""

    # The paper's GPUs: vLLM's NCCL engine, bfloat16 weights.
    sync: WeightSyncConfig = WeightSyncConfig(backend=SyncBackend.NCCL, dtype="bfloat16")
    replicas: int = 1  # servers to launch when urls is empty
    devices: tuple[str, ...] = ()  # CUDA_VISIBLE_DEVICES per replica, e.g. ("4,5", "6,7")
    # Every launched replica: its port is server.port + i (0: free ports); max_model_len None is
    # the role's prompt + response budget.
    server: VLLMServerConfig = dataclasses.field(
        default=VLLMServerConfig(),
        metadata=derived(
            model=("the role's checkpoint (per replica)", lambda c: ""),
            devices=("devices (one entry per replica)", lambda c: None),
            dtype=("sync.dtype", lambda c: c.sync.dtype),
            weight_transfer_backend=("sync.backend", lambda c: c.sync.backend.value),
            api_key=("api_key", lambda c: c.api_key),
            api_key_env=("api_key_env", lambda c: c.api_key_env),
        ),
    )

    def __post_init__(self):
        apply_derived(self)
        # A run sends its servers merged weights and never loads an adapter, and --enable-lora
        # slows generation (docs/lora.md): refused here, not silently paid for.
        if self.server.max_lora_rank:
            raise FieldError(
                "server.max_lora_rank",
                self.server.max_lora_rank,
                "must be 0 in a run: it syncs merged weights and loads no adapter (serve "
                "exported adapters with launch_vllm --max-lora-rank).",
            )

    def sampler_config(self, model: str, max_model_len: int) -> VLLMSamplerConfig:
        """The sampler's config for servers serving checkpoint `model` (launched ones get
        `server.max_model_len or max_model_len`)."""
        s = self.server
        if self.devices and len(self.devices) != self.replicas and not self.urls:
            raise ValueError(
                f"devices has {len(self.devices)} entries for {self.replicas} replicas; give "
                "one CUDA_VISIBLE_DEVICES per replica."
            )
        servers = tuple(
            dataclasses.replace(
                s,
                model=model,
                port=s.port + i if s.port else 0,
                devices=self.devices[i] if self.devices else None,
                max_model_len=s.max_model_len or max_model_len,
            )
            for i in range(0 if self.urls else self.replicas)
        )
        shared = {f.name: getattr(self, f.name) for f in dataclasses.fields(VLLMClientConfig)}
        return VLLMSamplerConfig(servers=servers, **shared)
