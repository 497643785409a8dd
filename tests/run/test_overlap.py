"""Overlapped rollouts (`overlap_rollouts`, run/overlap.py) on the tiny loop, shortened: which
weights produced which batch (the lag logged per batch), the truncated importance weights
in the loss (against NumPy), exact resume with a rollout in flight, a drained pipeline equal
to the default run, and a failed background collection that loses nothing."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest
from short_runs import comparable as _comparable
from short_runs import weights as _weights

from tango_jax.config.files import load_config_file
from tango_jax.config.run import load_run_config
from tango_jax.metrics.writer import read_metrics
from tango_jax.parallel.mesh import make_mesh
from tango_jax.rl.train_step import Objective
from tango_jax.rl.trainer import Trainer
from tango_jax.run.loop import TangoLoop
from tango_jax.run.overlap import Prefetch
from tango_jax.schema import ConfigError

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
TIS_CAP = 1.02  # small enough that some lag-1 tokens are truncated


def _config(
    run_dir: Path,
    *,
    overlap: bool = True,
    total_steps: int = 5,
    every_steps: int = 3,
    backend: str = "jax",
    tis_cap: float | None = TIS_CAP,
    variant: str = "tango",
):
    """tests/test_loop.py's shortened tiny loop (V warm-up, then G, G, G, V), overlapped, with
    a truncated importance correction on both trained roles; no SFT, evaluation or
    TensorBoard (not what these tests check, and they cost most of a short run)."""
    c = load_config_file(CONFIGS / "tiny_arith.py").get_config(f"{variant},scratch")
    c.run_dir = str(run_dir)
    c.scorer_workers = 1
    c.mesh = dict(data=1, fsdp=2, tensor=4)
    c.sft.generator.enable = c.sft.verifier.enable = False  # RL from the random presets
    c.tensorboard = False
    for role, max_tokens in ((c.generator, 24), (c.verifier, 32)):
        role.rollout.n = 2
        role.rollout.max_tokens = role.eval_max_tokens = role.response_bucket = max_tokens
        role.trainer.micro_batch_size = 4
        role.sampler.backend = backend
        role.trainer.optimizer.learning_rate = 1e-3
        role.trainer.loss.tis_cap = tis_cap
        role.trainer.loss.kl_coef = 0.0  # no reference model to build (not what is tested)
    c.data.prompts_per_step = 2
    c.data.eval_size = 4
    c.schedule.total_steps = total_steps
    c.schedule.verifier_warmup_steps = 1 if c.verifier.enable else 0
    c.eval.before_train = c.eval.at_end = False
    c.eval.every_generator_steps = 0
    c.eval.after_verifier_warmup = False
    c.checkpoint.every_steps = every_steps
    c.checkpoint.keep = 3
    c.checkpoint.export_hf_at_end = True
    c.overlap_rollouts = overlap
    return load_run_config(c)


def _run(cfg) -> list[dict]:
    TangoLoop(cfg, make_mesh(cfg.mesh)).run()
    return read_metrics(Path(cfg.run_dir))


LAGGED_CALL = 3  # the third RL update: step 3, the generator's batch from one update ago


@pytest.fixture(scope="module")
def overlap_run(tmp_path_factory):
    """5 steps, checkpoints at 3 and 5. Every RL update is recorded (the real step runs), and
    before the lagged one the trainer's real loss is also evaluated on that batch with random
    advantages and with none: the difference is the PG term alone (the run's own advantages
    can all be 0, a tiny model's groups often scoring alike; the entropy bonus still moves the
    weights)."""
    calls, probe = [], {}
    original = Trainer.step
    rng = np.random.default_rng(0)

    def recording_step(self, batch):
        if self.config.loss.objective is Objective.POLICY_GRADIENT:
            if len(calls) + 1 == LAGGED_CALL:
                adv = rng.normal(size=batch.advantages.shape).astype(np.float32)
                probed = dataclasses.replace(batch, advantages=adv)
                zero = dataclasses.replace(batch, advantages=np.zeros_like(adv))
                probe["batch"] = probed
                probe["pg"] = self.loss_and_grads(probed)[0] - self.loss_and_grads(zero)[0]
            metrics, logp = original(self, batch)
            calls.append((batch, logp, metrics))
            return metrics, logp
        return original(self, batch)

    Trainer.step = recording_step
    try:
        run_dir = tmp_path_factory.mktemp("overlap") / "a"
        rows = _run(_config(run_dir))
    finally:
        Trainer.step = original
    return run_dir, rows, calls, probe


def test_the_option_is_off_by_default_and_needs_an_importance_correction(tmp_path):
    cfg = _config(tmp_path, overlap=False, tis_cap=None)
    assert not cfg.overlap_rollouts
    with pytest.raises(ConfigError, match=r"overlap_rollouts.*generator\.trainer\.loss\.tis_cap"):
        _config(tmp_path, tis_cap=None)


def test_lag_and_prefetch_are_logged_per_batch(overlap_run):
    """V(warm-up), G, G | save, G, V | save: step 2 is collected during the verifier's update
    (feedback one verifier update old), step 3 during step 2's (the generator's own samples
    one update old), step 4 after the checkpoint's drain, step 5 during step 4's (the
    verifier current, judging generator solutions one update old)."""
    _, rows, _, _ = overlap_run
    by_step = {r["step"]: r for r in rows}
    assert sorted(by_step) == [1, 2, 3, 4, 5]
    assert [by_step[s]["rollout/prefetched"] for s in range(1, 6)] == [0, 1, 1, 0, 1]
    assert [by_step[s]["phase"] for s in range(1, 6)] == [
        "verifier_warmup",
        "generator",
        "generator",
        "generator",
        "verifier",
    ]
    assert by_step[1]["verifier/policy_lag"] == 0
    assert by_step[2]["generator/policy_lag"] == 0
    assert by_step[2]["generator/feedback/verifier_lag"] == 1
    assert by_step[3]["generator/policy_lag"] == 1
    assert by_step[3]["generator/feedback/verifier_lag"] == 0
    assert by_step[4]["generator/policy_lag"] == 0
    assert by_step[5]["verifier/policy_lag"] == 0
    assert by_step[5]["verifier/solutions/generator_lag"] == 1
    # the collection ran beside steps 1, 2 and 4 (before their update: the embedded sampler)
    for s, prefetching in ((1, True), (2, True), (3, False), (4, True), (5, False)):
        assert ("perf/prefetch_s" in by_step[s]) is prefetching, s
        if prefetching:
            assert by_step[s]["perf/prefetch_s"] > 0 and by_step[s]["perf/prefetch_wait_s"] > 0
            assert by_step[s]["perf/prefetch/generate_s"] > 0
            assert by_step[s]["rollout/prefetch_failed"] == 0
    # with the embedded sampler drift is float noise, except where the weights moved between
    # sampling and training: the lag-1 generator batch
    assert by_step[4]["generator/rollout/drift_max_abs"] < 1e-3
    assert by_step[3]["generator/rollout/drift_max_abs"] > 1e-2


def _tis_loss(batch, logp, cap):
    """NumPy: the token-mean PG loss with ρ ≡ 1 (the default ratio), each token weighted by
    min(exp(log p_trainer - log q_sampler), cap)."""
    mask = batch.response_mask > 0
    w = np.minimum(np.exp(logp.astype(np.float64) - batch.sampler_logprobs), cap)
    adv = batch.advantages if batch.advantages.ndim == 2 else batch.advantages[:, None]
    per_token = -adv * batch.sample_weights[:, None] * w
    return per_token[mask].sum() / mask.sum(), w[mask]


def test_the_lagged_batch_is_importance_corrected(overlap_run):
    """The generator's lag-1 batch (step 3): the PG term of the trainer's loss on it (random
    advantages; the same parameters, sampler log-probs and mask) is NumPy's loss weighted by
    the truncated importance weights from the trainer's log-probs that the step returned. The
    weights are far from 1 and some are truncated at the cap, so an uncorrected loss would not
    match. The step's own logged PG loss matches too; a current batch's weights are 1."""
    _, rows, calls, probe = overlap_run
    assert len(calls) == 5  # one RL update per step: V, G, G, G, V
    assert rows[LAGGED_CALL - 1]["generator/policy_lag"] == 1
    batch, logp, metrics = calls[LAGGED_CALL - 1]
    expected, w = _tis_loss(probe["batch"], logp, TIS_CAP)
    np.testing.assert_allclose(probe["pg"], expected, rtol=1e-4, atol=1e-6)
    assert np.abs(w - 1).max() > 1e-2 and (w == TIS_CAP).any() and (w < TIS_CAP).any()
    uncorrected, _ = _tis_loss(probe["batch"], logp, np.inf)
    assert abs(uncorrected - expected) > 1e-2 * abs(expected)
    np.testing.assert_allclose(metrics["loss/pg"], _tis_loss(batch, logp, TIS_CAP)[0], atol=1e-6)
    batch4, logp4, _ = calls[LAGGED_CALL]  # step 4, collected after the drain: current
    assert rows[LAGGED_CALL]["generator/policy_lag"] == 0
    np.testing.assert_allclose(_tis_loss(batch4, logp4, TIS_CAP)[1], 1.0, atol=2e-3)


def test_resume_with_a_rollout_in_flight_reproduces_the_run(overlap_run, tmp_path):
    """A crash after step 3's checkpoint (e.g. during step 4's update, step 5's rollouts in
    flight): the resumed run writes the same metrics for steps 4-5, step 5 prefetched again,
    and ends with the same weights."""
    run_dir, rows, _, _ = overlap_run
    copy = tmp_path / "b"
    shutil.copytree(run_dir, copy)
    shutil.rmtree(copy / "checkpoints" / "5")
    shutil.rmtree(copy / "hf")
    resumed = _run(_config(copy))
    assert [r["step"] for r in resumed] == [1, 2, 3, 4, 5]
    assert resumed[4]["rollout/prefetched"] == 1
    assert _comparable(resumed[3:]) == _comparable(rows[3:])
    for role in ("generator", "verifier"):
        wa, wb = _weights(run_dir / "hf" / role), _weights(copy / "hf" / role)
        for k in wa:
            np.testing.assert_array_equal(wa[k], wb[k], err_msg=f"{role} {k}")


def test_a_drained_pipeline_equals_the_default_run(tmp_path):
    """Overlap on with a checkpoint at every step never prefetches: it must train exactly as
    the default (overlap off) run, whose batches are all current (lag 0). (The generator
    alone: the verifier's steps take the same path in the tests above.)"""
    short = dict(total_steps=2, every_steps=1, variant="grpo")
    off = _run(_config(tmp_path / "off", overlap=False, **short))
    on = _run(_config(tmp_path / "on", overlap=True, **short))
    assert all(r["rollout/prefetched"] == 0 for r in on)
    assert not any(k.startswith(("rollout/prefetch", "perf/prefetch")) for r in off for k in r)
    for r in off:
        assert r[f"{r['phase'].split('_')[0]}/policy_lag"] == 0
    strip = lambda rows: [{k: v for k, v in r.items() if k != "rollout/prefetched"} for r in rows]
    assert _comparable(strip(on)) == _comparable(off)


def test_a_failed_background_collection_is_dropped_and_reported():
    """A background collection that raises (a server died mid-flight) leaves no rollouts and
    is counted: the loop then collects those problems again after the sync."""

    def dies(problems, timer):
        with timer("generate"):
            raise ConnectionError("vllm-0 went away")

    ahead = Prefetch(7, ["p1", "p2"], dies, background=True)
    ahead.start()
    ahead.join()
    assert ahead.rollouts is None and isinstance(ahead.error, ConnectionError)
    assert ahead.problems == ["p1", "p2"]
    m = ahead.metrics()
    assert m["rollout/prefetch_failed"] == 1 and "perf/prefetch/generate_s" in m
    # the embedded sampler's collection runs in the caller: its errors are the run's
    inline = Prefetch(7, [], dies, background=False)
    with pytest.raises(ConnectionError):
        inline.start()


def test_a_held_vllm_sampler_does_not_read_weights_mid_update():
    """While held (a background collection), a sampler that must re-send the current weights
    (a restarted server) raises instead of reading the arrays the trainer is updating."""
    from tango_jax.rollout.base import WeightsHeldError
    from tango_jax.rollout.vllm.sampler import VLLMSampler

    reads = []
    sampler = VLLMSampler.__new__(VLLMSampler)  # no servers: only the weights bookkeeping
    sampler._state_provider, sampler._held, sampler.weight_version = (
        lambda: reads.append(1),
        False,
        3,
    )
    with sampler.hold_weights(), pytest.raises(WeightsHeldError, match="version 3"):
        sampler._current_state()
    sampler._current_state()
    assert reads == [1]
