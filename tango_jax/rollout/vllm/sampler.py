"""`VLLMSampler`: the `Sampler` protocol served by one or more vLLM servers.

    sampler = VLLMSampler(VLLMSamplerConfig(
        servers=(VLLMServerConfig(model="/ckpt/tiny", dtype="float32",
                                  weight_transfer_backend="gloo", cpu_kv_cache_gib=1),),
        sync=WeightSyncConfig(backend="gloo", dtype="float32")))
    completions = sampler.generate(prompts, SamplingParams(n=5, max_tokens=256))
    metrics = sampler.update_weights(nnx.state(model), version=1)   # after each update
    sampler.close()

Servers are either launched and owned by the sampler (`servers`, one per replica, e.g. on
their own GPUs) or already running (`urls`, for example from tango_jax/launch_vllm.py).
Prompts are spread over the replicas; each prompt is one OpenAI-compatible /v1/completions
request (token-id prompt, `n` samples, the sampled token's log-prob, exact generated token
ids), up to `max_concurrency` in flight per replica, batched by vLLM's scheduler.

Failures. A replica that drops connections or answers 5xx while its process has died (or
stopped answering /health) is restarted with the same arguments, receives the current
weights again (a restarted server starts from the checkpoint on disk; serving the retried
prompts from it would silently mix weight versions), and the prompts that had not completed
are sent again; prompts already completed are kept. At most `max_restarts` restarts per
replica per call. A server the sampler does not own is not restarted: the error says so. A
connection dropped by a server that is alive and healthy (a proxy; the keep-alive race with
vLLM's own server is avoided in the client, see client.py) is simply sent again, at most
`max_restarts` times per replica per call, and counted in `rollout/dropped_requests`. A
request that exceeds `request_timeout_s` and a rejected request (4xx) raise at once.

Versions. `weight_version` is the version of the last `update_weights` (initially
`initial_version`: the checkpoint). Before each batch the sampler checks the version the
server reports (`/weight_info`), so weights that changed behind its back (an external
restart) are re-sent or reported, never silently used; every `Completion.weight_version` is
the version that produced it.

Log-probs are the sampled tokens' log-probs under logits / temperature (`--logprobs-mode
processed_logprobs`), as `Completion` documents, when top_p = 1 and top_k = -1 (the training
settings). With top-p / top-k filtering vLLM renormalises over the kept tokens first, so the
reported value is log q(t) of the truncated distribution (>= the unfiltered one). Greedy
(temperature 0) reports the log-probs of the unscaled logits.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from tango_jax.models.config import ModelConfig
from tango_jax.models.hf import read_config
from tango_jax.rollout.base import Completion, Prompt, SamplingParams, WeightsHeldError
from tango_jax.rollout.vllm.auth import key_from
from tango_jax.rollout.vllm.client import (
    VLLMClient,
    VLLMHTTPError,
    VLLMUnavailable,
)
from tango_jax.rollout.vllm.completions import completion_request, parse_completions
from tango_jax.rollout.vllm.config import VLLMSamplerConfig
from tango_jax.rollout.vllm.server import VLLMServer, VLLMServerError
from tango_jax.rollout.vllm.sync import WeightSync, WeightSyncError

log = logging.getLogger(__name__)

FRESH_SERVER_VERSION = "default"  # what vLLM's /weight_info reports before any update


def _import_transfer_engines() -> None:
    try:
        import vllm.distributed.weight_transfer.factory  # noqa: F401
    except Exception as e:  # the first sync imports it again and reports any error
        log.debug("pre-importing vLLM's weight transfer failed: %s", e)


@dataclasses.dataclass
class _Replica:
    name: str
    client: VLLMClient
    server: VLLMServer | None  # None: not ours to restart
    sync: WeightSync | None = None  # set once the server is up
    model_name: str = ""


class VLLMSampler:
    """Implements `tango_jax.rollout.base.Sampler` on vLLM servers (see the module docstring).

    model_config: the trainer's model (needed to send weights and verify them); defaults to
    the config.json of the first launched server's checkpoint.
    """

    def __init__(
        self,
        config: VLLMSamplerConfig,
        model_config: ModelConfig | None = None,
        *,
        initial_version: int = 0,
        state_provider: Callable[[], Any] | None = None,
        start: bool = True,
    ):
        """state_provider: returns the parameters of the current `weight_version` (e.g.
        `lambda: nnx.state(model)` when every update is followed by `update_weights`). A
        restarted server is re-sent these; without it the sampler keeps a reference to the
        last synced state, which a trainer that donates its buffers has invalidated by then.
        start: launch the servers (or reach the urls) now; with False, call `start()` later
        (the run loop starts both roles' samplers at once)."""
        self.config = config
        self._state_provider = state_provider
        if model_config is None and config.servers:
            model_config = read_config(config.servers[0].model)
        self.model_config = model_config
        self.weight_version = initial_version
        self._state: Any = None  # the parameters of the last sync, to re-send after a restart
        self._synced = False
        self._held = False  # hold_weights(): the trainer is updating the provider's state
        self.stats = {
            "rollout/server_restarts": 0.0,
            "rollout/retried_prompts": 0.0,
            "rollout/dropped_requests": 0.0,
        }
        self.replicas: list[_Replica] = []
        self.started = False  # start() was called (a sampler is started once)
        if start:
            self.start()

    def start(self) -> None:
        """Launches the owned servers and waits until each is healthy (concurrently), or
        checks the running ones at `urls`; on failure every server it started is stopped."""
        if self.started:
            raise RuntimeError("VLLMSampler.start: already started (a sampler starts once).")
        self.started = True
        try:
            self._open_replicas()
        except BaseException:
            self.close()
            raise

    def _open_replicas(self) -> None:
        cfg = self.config
        timeouts = dict(
            request_timeout_s=cfg.request_timeout_s,
            sync_timeout_s=cfg.sync.timeout_s,
            request_timeout_name="VLLMSamplerConfig.request_timeout_s",
            sync_timeout_name="WeightSyncConfig.timeout_s",
        )
        for i, server_config in enumerate(cfg.servers):
            server = VLLMServer(server_config, name=f"vllm-{i}")
            self.replicas.append(_Replica(server.name, server.client(**timeouts), server))
        for i, url in enumerate(cfg.urls):
            client = VLLMClient(url, api_key=key_from(cfg.api_key, cfg.api_key_env), **timeouts)
            self.replicas.append(_Replica(f"vllm-{i}", client, None))
        # Importing vLLM's transfer engines costs the first sync ~10 s: do it while the
        # servers start.
        threading.Thread(target=_import_transfer_engines, daemon=True).start()
        # Start owned servers concurrently (each takes from seconds to minutes).
        with cf.ThreadPoolExecutor(max(1, len(self.replicas))) as pool:
            list(pool.map(self._open, self.replicas))

    def _open(self, replica: _Replica) -> None:
        if replica.server is not None:
            replica.server.start()
        elif not replica.client.health():
            raise VLLMServerError(
                f"{replica.name}: no healthy vLLM server at {replica.client.base_url}."
            )
        replica.sync = WeightSync(replica.client, self.model_config, self.config.sync)
        replica.model_name = replica.client.model_names()[0]

    # --- generation ----------------------------------------------------------------------------

    def generate(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[list[Completion]]:
        """`params.n` completions per prompt; `result[i][j]` is sample j of prompt i."""
        t0 = time.perf_counter()
        results: list[list[Completion] | None] = [None] * len(prompts)
        restarts = [0] * len(self.replicas)
        resends = [0] * len(self.replicas)
        pending = list(range(len(prompts)))
        for replica in self.replicas:
            self._ensure_current(replica, restarts)
        workers = len(self.replicas) * self.config.max_concurrency
        with cf.ThreadPoolExecutor(min(workers, max(1, len(prompts)))) as pool:
            while pending:
                failed = self._run(pool, prompts, params, pending, results)
                pending = sorted(i for _, ids in failed.values() for i in ids)
                for r, (error, ids) in failed.items():
                    log.warning(
                        "%s failed on %d prompt(s): %s", self.replicas[r].name, len(ids), error
                    )
                    replica = self.replicas[r]
                    if (
                        isinstance(error, VLLMUnavailable)
                        and resends[r] < self.config.max_restarts
                        and self._healthy(replica)
                    ):  # the server is fine and dropped the connection: send again
                        resends[r] += 1
                        self.stats["rollout/dropped_requests"] += len(ids)
                    else:
                        self._recover(replica, error, restarts, r)
                    self.stats["rollout/retried_prompts"] += len(ids)
        tokens = sum(len(c.token_ids) for group in results for c in group)  # type: ignore[union-attr]
        elapsed = time.perf_counter() - t0
        self.stats["rollout/generate_s"] = elapsed
        self.stats["rollout/generated_tokens"] = float(tokens)
        self.stats["rollout/tokens_per_s"] = tokens / max(elapsed, 1e-9)
        return results  # type: ignore[return-value]

    def _run(self, pool, prompts, params, indices, results) -> dict[int, tuple[Exception, list]]:
        """Sends prompts `indices`; fills `results`; returns {replica: (error, failed ids)}."""
        futures = {}
        for i in indices:
            r = i % len(self.replicas)
            payload = completion_request(self.replicas[r].model_name, prompts[i], params, i)
            futures[pool.submit(self.replicas[r].client.completions, payload)] = (i, r)
        failed: dict[int, tuple[Exception, list]] = {}
        try:
            for future in cf.as_completed(futures):
                i, r = futures[future]
                try:
                    results[i] = parse_completions(future.result(), params.n, self.weight_version)
                except (VLLMUnavailable, VLLMHTTPError) as e:
                    if isinstance(e, VLLMHTTPError) and e.status < 500:
                        raise  # a bad request: retrying cannot help
                    failed.setdefault(r, (e, []))[1].append(i)
        except BaseException:
            for future in futures:
                future.cancel()
            raise
        return failed

    # --- weights -------------------------------------------------------------------------------

    def update_weights(self, params: Any, version: int) -> dict[str, float]:
        """Streams `params` (an `nnx.State`) into every replica as `version`; returns the sync
        metrics (see `WeightSync.sync`; summed over replicas, which sync one after another)
        and the verification metrics (the worst replica's)."""
        if version < self.weight_version:
            raise ValueError(
                f"update_weights: version ({version}) must not go back (current "
                f"{self.weight_version})."
            )
        if self.model_config is None:
            raise ValueError(
                "VLLMSampler needs model_config to send weights to servers given by url."
            )
        restarts = [0] * len(self.replicas)
        total: dict[str, float] = {}
        for r, replica in enumerate(self.replicas):
            metrics = self._sync(replica, params, version, restarts, r)
            for k, v in metrics.items():  # replicas sync one after another: times add up
                if k == "weight_sync/version":
                    total[k] = v
                elif k.startswith("weight_sync/verify_"):
                    total[k] = max(v, total.get(k, 0.0))
                else:
                    total[k] = total.get(k, 0.0) + v
        self.weight_version, self._synced = version, True
        self._state = None if self._state_provider is not None else params
        if total.get("weight_sync/total_s"):
            total["weight_sync/gbps"] = (
                total["weight_sync/bytes"] / total["weight_sync/total_s"] / 1e9
            )
        return total

    def _sync(self, replica, params, version, restarts, r) -> dict[str, float]:
        """Sends `params` to one replica. A failed sync on a healthy server is retried once
        with a fresh transfer group (its previous group may have been replaced or broken); on
        a dead server, the server is restarted first (bounded by max_restarts)."""
        retried = False
        while True:
            try:
                metrics = replica.sync.sync(params, version)
                if self.config.verify_after_sync:
                    metrics.update(self._verify(replica, params, version))
                return metrics
            except WeightSyncError as e:
                if not self._healthy(replica):  # restart it; the loop then sends `params`
                    self._recover(replica, e, restarts, r, resync=False)
                elif retried:
                    raise
                else:
                    log.warning("%s: %s; retrying with a fresh transfer group", replica.name, e)
                retried = True

    def _verify(self, replica: _Replica, params: Any, version: int) -> dict[str, float]:
        from tango_jax.rollout.vllm.verify import SyncTolerance, verify_sync

        return verify_sync(
            replica.client,
            replica.model_name,
            self.model_config,
            params,
            version=version,
            tolerance=SyncTolerance.for_dtype(self.config.sync.dtype),
            probe_tokens=self._probe_tokens(replica),
        )

    def _probe_tokens(self, replica: _Replica) -> int:
        """The verification's cache probe: PROBE_TOKENS, or fewer when the server's context
        is shorter (its max_model_len, else the model's positions) with 4 tokens to spare."""
        from tango_jax.rollout.vllm.verify import PROBE_TOKENS

        limit = self.model_config.max_position_embeddings
        if replica.server is not None and replica.server.config.max_model_len:
            limit = min(limit, replica.server.config.max_model_len)
        return max(0, min(PROBE_TOKENS, limit - 4))

    def _ensure_current(self, replica: _Replica, restarts: list[int]) -> None:
        """Makes sure `replica` serves `weight_version` before a batch goes to it."""
        expected = str(self.weight_version) if self._synced else FRESH_SERVER_VERSION
        try:
            served = replica.client.weight_version()
        except VLLMUnavailable as e:
            self._recover(replica, e, restarts, self.replicas.index(replica))
            return
        except VLLMHTTPError as e:
            if e.status == 404:  # a server without the dev-mode routes cannot be checked
                return
            raise
        if served != expected:
            if not self._synced or replica.server is None:
                raise VLLMServerError(
                    f"{replica.name} serves weights {served!r} but this sampler expects "
                    f"{expected!r}; something else changed or restarted the server."
                )
            log.warning(
                "%s serves %r, expected %r: re-sending weights", replica.name, served, expected
            )
            self._sync(
                replica,
                self._current_state(),
                self.weight_version,
                restarts,
                self.replicas.index(replica),
            )

    @staticmethod
    def _healthy(replica: _Replica) -> bool:
        alive = replica.server is None or replica.server.alive
        return alive and replica.client.health()

    def _recover(
        self, replica: _Replica, error: Exception, restarts: list[int], r: int, resync=True
    ) -> None:
        """Restarts `replica` if its server died and (with `resync`) re-sends the current
        weights; raises if the server is fine (the error is the request's), is not ours, or
        has used up max_restarts."""
        server = replica.server
        if server is None:
            raise VLLMServerError(
                f"{replica.name} ({replica.client.base_url}) failed: {error}. It was not "
                "launched by this sampler, so it is not restarted."
            ) from error
        if self._healthy(replica):
            raise error  # the server is fine: the error is the request's
        if restarts[r] >= self.config.max_restarts:
            raise VLLMServerError(
                f"{replica.name} died again after {restarts[r]} restart(s) in this call "
                f"(max_restarts={self.config.max_restarts}): {error}. Log: {server.log_path}\n"
                f"{server.log_tail()}"
            ) from error
        restarts[r] += 1
        self.stats["rollout/server_restarts"] += 1
        log.warning(
            "%s: vLLM server is down (%s); restarting (%d/%d). Log tail:\n%s",
            replica.name,
            error,
            restarts[r],
            self.config.max_restarts,
            server.log_tail(10),
        )
        replica.sync.reset()
        server.restart()
        if resync and self._synced:  # it restarted from the checkpoint on disk
            self._sync(replica, self._current_state(), self.weight_version, restarts, r)

    @contextlib.contextmanager
    def hold_weights(self):
        """Overlapped rollouts: `generate` runs in a background thread while the trainer
        updates (and donates) the arrays `state_provider` returns. A server that must be sent
        the current weights meanwhile (it restarted, or serves another version) is restarted
        but not re-sent them: the call raises `WeightsHeldError`, and the caller collects
        again after its own sync, which finds the restarted server and sends it the weights."""
        self._held = True
        try:
            yield
        finally:
            self._held = False

    def _current_state(self) -> Any:
        """The parameters of `weight_version`, to re-send to a restarted server."""
        if self._held:
            raise WeightsHeldError(
                f"a vLLM server needs weights version {self.weight_version} again while the "
                "trainer is updating them (overlapped rollouts); this batch is collected again "
                "after the sync."
            )
        return self._state_provider() if self._state_provider is not None else self._state

    def metrics(self) -> dict[str, float]:
        """Counters and timings of the last calls (rollout/...)."""
        return dict(self.stats)

    def close(self) -> None:
        for replica in self.replicas:
            if replica.sync is not None:
                replica.sync.close()
            if replica.server is not None:
                replica.server.stop()
        self.replicas = []

    def __enter__(self) -> VLLMSampler:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
