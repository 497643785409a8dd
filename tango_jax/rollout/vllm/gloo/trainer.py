"""Trainer side of tango_jax's gloo weight-transfer engine for vLLM (see `gloo.engine` for
the wire protocol and the worker side).

The trainer is rank 0 of the gloo group and hosts its TCPStore; `trainer_init` opens the store,
asks the server's workers to join through `/init_weight_transfer_engine` and joins itself,
watching both so that a failing side ends the rendezvous at once. `send_weights` drives one
update: `/start_weight_update`, `/update_weights` in a background call while the buckets are
broadcast (bucket k+1 is packed while bucket k is on the wire), the workers' report of load
time and bytes received, `/finish_weight_update`.
"""

from __future__ import annotations

import dataclasses
import datetime
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from typing import ClassVar, Self

import torch
from torch.distributed import ProcessGroupGloo, ReduceOp, TCPStore
from vllm.distributed.weight_transfer.base import (
    ParamMeta,
    TrainerInitInfo,
    TrainerWeightTransferEngine,
    VLLMWeightSyncClient,
    WeightSource,
)

from tango_jax.rollout.vllm.gloo.engine import (
    DEFAULT_BUCKET_BYTES,
    DEFAULT_TIMEOUT_S,
    GlooInitInfo,
    GlooUpdateInfo,
    abort_group,
    open_gloo_group,
    plan_buckets,
    tensor_nbytes,
)
from tango_jax.rollout.vllm.net import WeightTransferTimeout, in_daemon_thread


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
        http = in_daemon_thread(
            lambda: self.client.init_weight_transfer_engine(dataclasses.asdict(worker_info))
        )
        store = self.store
        join = in_daemon_thread(
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
        http = in_daemon_thread(lambda: self.client.update_weights(dataclasses.asdict(update)))
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
        abort_group(self.group)
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
