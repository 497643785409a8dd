"""The jitted train step: exact loss vs NumPy, exact accumulation, meshes, compile-once."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tango_jax.models import Transformer, presets
from tango_jax.parallel.mesh import MeshConfig, make_mesh
from tango_jax.parallel.partition import shard_model
from tango_jax.rl.batch import make_batch
from tango_jax.rl.losses import LossAggMode, RatioLevel
from tango_jax.rl.train_step import LossConfig, Objective, OptimizerConfig, TrainerConfig
from tango_jax.rl.trainer import Trainer

CONFIG = presets.get("tiny-qwen2", vocab_size=64, embed_dim=64, mlp_dim=96)


def _model(seed=0, mesh=None):
    model = Transformer(CONFIG, rngs=nnx.Rngs(seed))
    return model if mesh is None else shard_model(model, mesh)


def _mesh1():
    return make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])


def _batch(rows=8, seed=0, scalar_adv=False, truncated=None):
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(2, 64, size=rng.integers(2, 9)).tolist() for _ in range(rows)]
    responses = [rng.integers(2, 64, size=rng.integers(1, 12)).tolist() for _ in range(rows)]
    if scalar_adv:
        adv = rng.normal(size=rows).tolist()
    else:
        adv = [rng.normal(size=len(r)).tolist() for r in responses]
    lps = [(-rng.uniform(0.5, 5.0, size=len(r))).tolist() for r in responses]
    weights = rng.uniform(0.5, 1.5, size=rows).tolist()
    return make_batch(
        prompts,
        responses,
        advantages=adv,
        sample_weights=weights,
        sampler_logprobs=lps,
        truncated=truncated,
        prompt_bucket=8,
        response_bucket=8,
    )


# --- NumPy reference of the whole per-token loss ------------------------------------------------


def _np_logsoftmax(z):
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def _np_loss(policy, ref, batch, cfg: LossConfig, micro_batch_size: int):
    """Reference loss from the models' full logits, plain NumPy, row by row."""
    p = batch.prompt_len
    ids, attn = batch.input_ids, batch.attention_mask
    logits = np.asarray(policy(jnp.asarray(ids), attention_mask_BxT=jnp.asarray(attn)), np.float64)
    ref_logits = np.asarray(ref(jnp.asarray(ids), attention_mask_BxT=jnp.asarray(attn)), np.float64)
    per_token, masks = [], []
    for i in range(batch.size):
        n = int(batch.response_mask[i].sum())
        if cfg.mask_truncated and batch.truncated[i]:
            per_token.append(np.zeros(0))
            masks.append(0)
            continue
        lp_all = _np_logsoftmax(logits[i, p - 1 : p - 1 + n] / cfg.temperature)
        ref_all = _np_logsoftmax(ref_logits[i, p - 1 : p - 1 + n] / cfg.temperature)
        tgt = ids[i, p : p + n]
        logp, ref_logp = lp_all[np.arange(n), tgt], ref_all[np.arange(n), tgt]
        old = batch.sampler_logprobs[i, :n] if cfg.use_sampler_logprobs else logp
        log_ratio = logp - old
        if cfg.ratio_level is RatioLevel.SEQUENCE:  # GSPO: one length-normalised ratio
            log_ratio = np.full(n, log_ratio.mean())
        ratio = np.exp(log_ratio)
        adv = batch.advantages[i, :n]
        pg = np.maximum(-adv * ratio, -adv * np.clip(ratio, 1 - cfg.clip_low, 1 + cfg.clip_high))
        pg = pg * batch.sample_weights[i]
        x = ref_logp - logp
        kl = np.clip(np.exp(x) - x - 1, -10, 10)
        probs = np.exp(lp_all)
        entropy = -(probs * lp_all).sum(-1)
        per_token.append(pg + cfg.kl_coef * kl - cfg.entropy_coef * entropy)
        masks.append(n)
    if cfg.agg_mode is LossAggMode.TOKEN_MEAN:
        return np.concatenate(per_token).sum() / sum(masks)
    if cfg.agg_mode is LossAggMode.SEQ_MEAN_TOKEN_MEAN:
        return np.mean([t.mean() for t in per_token if len(t)])
    if cfg.agg_mode is LossAggMode.CONSTANT_NORM:  # Dr. GRPO: every row counts norm_tokens
        return np.concatenate(per_token).sum() / (batch.size * cfg.norm_tokens)
    # micro-batch token mean over interleaved micro-batches (rows m, m+M, ...)
    m = batch.size // micro_batch_size
    means = [
        np.concatenate([per_token[r] for r in range(k, batch.size, m)]).mean() for k in range(m)
    ]
    return np.mean(means)


# constant-norm goes through the step in the GSPO test below (one compile, not two more)
@pytest.mark.parametrize("agg", [m for m in LossAggMode if m is not LossAggMode.CONSTANT_NORM])
@pytest.mark.parametrize("sampler_ratio", [False, True])
def test_loss_equals_numpy_reference(agg, sampler_ratio):
    loss_cfg = LossConfig(
        agg_mode=agg,
        use_sampler_logprobs=sampler_ratio,
        kl_coef=0.05,
        entropy_coef=0.01,
        temperature=0.8,
    )
    policy, ref = _model(0), _model(1)
    batch = _batch()
    trainer = Trainer(
        policy, TrainerConfig(loss=loss_cfg, micro_batch_size=2), mesh=_mesh1(), ref_model=ref
    )
    want = _np_loss(policy, ref, batch, loss_cfg, micro_batch_size=2)
    loss, _ = trainer.loss_and_grads(batch)
    np.testing.assert_allclose(loss, want, rtol=2e-5, atol=1e-6)


def test_gspo_masked_truncations_and_constant_norm_equal_numpy_reference():
    """Sequence-level ratio (GSPO), truncated rows masked out and Dr. GRPO's constant
    normaliser, through the jitted step (two micro-batches), against the NumPy reference."""
    loss_cfg = LossConfig(
        agg_mode=LossAggMode.CONSTANT_NORM,
        norm_tokens=16,
        ratio_level=RatioLevel.SEQUENCE,
        mask_truncated=True,
        use_sampler_logprobs=True,
        clip_low=0.1,
        clip_high=0.15,
        kl_coef=0.05,
        entropy_coef=0.01,
    )
    policy, ref = _model(0), _model(1)
    batch = _batch(truncated=[0, 1, 0, 0, 1, 0, 0, 0])
    trainer = Trainer(
        policy, TrainerConfig(loss=loss_cfg, micro_batch_size=2), mesh=_mesh1(), ref_model=ref
    )
    want = _np_loss(policy, ref, batch, loss_cfg, micro_batch_size=2)
    loss, _ = trainer.loss_and_grads(batch)
    np.testing.assert_allclose(loss, want, rtol=2e-5, atol=1e-6)
    off = _np_loss(policy, ref, batch, dataclasses.replace(loss_cfg, mask_truncated=False), 2)
    assert abs(off - want) > 1e-3  # the masked rows did carry loss


def _flat(grads):
    return np.concatenate([np.ravel(np.asarray(g)) for g in jax.tree.leaves(grads)])


def test_gradients_identical_across_micro_batch_sizes_and_meshes():
    """token-mean: loss and gradient do not depend on micro-batching or on the mesh."""
    batch = _batch(rows=8, seed=1)
    cfg = LossConfig(use_sampler_logprobs=True, kl_coef=0.01, entropy_coef=0.001)
    results = {}
    for mesh_name, mesh in [("1dev", _mesh1()), ("8dev", make_mesh(MeshConfig(2, 2, 2)))]:
        for mb in (1, 2, 4) if mesh_name == "1dev" else (4, 8):
            trainer = Trainer(
                _model(0, mesh),
                TrainerConfig(loss=cfg, micro_batch_size=mb),
                mesh=mesh,
                ref_model=_model(1, mesh),
            )
            loss, grads = trainer.loss_and_grads(batch)
            results[(mesh_name, mb)] = (loss, _flat(grads))
    ref_loss, ref_grads = results[("1dev", 1)]
    for key, (loss, grads) in results.items():
        np.testing.assert_allclose(loss, ref_loss, rtol=1e-5, err_msg=str(key))
        np.testing.assert_allclose(grads, ref_grads, rtol=1e-4, atol=1e-7, err_msg=str(key))


def test_remat_model_trains_with_the_same_loss_and_gradients():
    """Per-layer remat inside the trainer's jit/grad/eval_shape (mesh of 8) changes nothing."""
    batch = _batch(rows=8, seed=5)
    mesh = make_mesh(MeshConfig(2, 2, 2))
    cfg = TrainerConfig(loss=LossConfig(kl_coef=0.01, entropy_coef=0.001), micro_batch_size=4)
    results = []
    for remat in (False, True):
        config = dataclasses.replace(CONFIG, remat=remat)
        model = shard_model(Transformer(config, rngs=nnx.Rngs(0)), mesh)
        ref = shard_model(Transformer(config, rngs=nnx.Rngs(1)), mesh)
        trainer = Trainer(model, cfg, mesh=mesh, ref_model=ref)
        loss, grads = trainer.loss_and_grads(batch)
        metrics, _ = trainer.step(batch)
        results.append((loss, _flat(grads), metrics["loss"]))
    np.testing.assert_allclose(results[1][0], results[0][0], rtol=1e-6)
    np.testing.assert_allclose(results[1][1], results[0][1], rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(results[1][2], results[0][2], rtol=1e-6)


def test_microbatch_token_mean_depends_on_micro_batch_size():
    """The official aggregation is reproduced, including its dependence on micro-batching."""
    batch = _batch(rows=8, seed=2)
    cfg = LossConfig(agg_mode=LossAggMode.MICROBATCH_TOKEN_MEAN, kl_coef=0.0, entropy_coef=0.0)
    losses = [
        Trainer(
            _model(0), TrainerConfig(loss=cfg, micro_batch_size=mb), mesh=_mesh1()
        ).loss_and_grads(batch)[0]
        for mb in (2, 8)
    ]
    assert abs(losses[0] - losses[1]) > 1e-4


def test_step_compiles_once_and_updates_params():
    model = _model(0)
    trainer = Trainer(
        model,
        TrainerConfig(micro_batch_size=4, optimizer=OptimizerConfig(learning_rate=1e-3)),
        mesh=_mesh1(),
        ref_model=_model(0),
    )
    before = np.asarray(model.layers[0].mlp.up[...]).copy()
    metrics, logp = trainer.step(_batch(seed=3))
    trainer.step(_batch(seed=4))  # same bucketed shapes, new values
    assert trainer.traces == 1
    assert not np.allclose(before, np.asarray(model.layers[0].mlp.up[...]))
    assert logp.shape == _batch(seed=3).response_mask.shape
    for key in (
        "loss",
        "loss/pg",
        "loss/kl",
        "loss/entropy",
        "grad_norm",
        "param_norm",
        "update_norm",
        "clipfrac",
        "ratio",
        "max_ratio",
        "tokens",
        "lr",
        "nonfinite",
    ):
        assert key in metrics and np.isfinite(metrics[key]), key
    assert metrics["nonfinite"] == 0.0
    assert metrics["ratio"] == pytest.approx(1.0)  # ρ ≡ 1 in the default one-step regime


def test_trainer_logprobs_equal_model_logprobs():
    model = _model(0)
    batch = _batch(seed=5)
    trainer = Trainer(
        model, TrainerConfig(micro_batch_size=4, loss=LossConfig(kl_coef=0.0)), mesh=_mesh1()
    )
    logits = np.asarray(
        model(jnp.asarray(batch.input_ids), attention_mask_BxT=jnp.asarray(batch.attention_mask))
    )
    _, logp = trainer.step(batch)
    p = batch.prompt_len
    for i in range(batch.size):
        n = int(batch.response_mask[i].sum())
        ref = _np_logsoftmax(logits[i, p - 1 : p - 1 + n].astype(np.float64))
        np.testing.assert_allclose(
            logp[i, :n], ref[np.arange(n), batch.input_ids[i, p : p + n]], rtol=1e-5, atol=1e-5
        )


def test_nonfinite_update_is_rejected():
    model = _model(0)
    trainer = Trainer(
        model, TrainerConfig(micro_batch_size=4, loss=LossConfig(kl_coef=0.0)), mesh=_mesh1()
    )
    batch = _batch(seed=6)
    bad = dataclasses.replace(batch, advantages=np.full_like(batch.advantages, np.nan))
    before = jax.tree.map(np.asarray, nnx.state(model))
    metrics, _ = trainer.step(bad)
    assert metrics["nonfinite"] == 1.0
    after = jax.tree.map(np.asarray, nnx.state(model))
    for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(after)):
        np.testing.assert_array_equal(a, b)


def test_sft_step_lowers_nll_and_matches_numpy():
    model = _model(0)
    cfg = TrainerConfig(
        micro_batch_size=4,
        loss=LossConfig(objective=Objective.SFT),
        optimizer=OptimizerConfig(learning_rate=3e-3, weight_decay=0.0),
    )
    trainer = Trainer(model, cfg, mesh=_mesh1())
    batch = _batch(seed=7)
    p = batch.prompt_len
    logits = np.asarray(
        model(jnp.asarray(batch.input_ids), attention_mask_BxT=jnp.asarray(batch.attention_mask)),
        np.float64,
    )
    nll = []
    for i in range(batch.size):
        n = int(batch.response_mask[i].sum())
        lp = _np_logsoftmax(logits[i, p - 1 : p - 1 + n])
        nll.append(-lp[np.arange(n), batch.input_ids[i, p : p + n]])
    first, _ = trainer.step(batch)
    np.testing.assert_allclose(first["loss"], np.concatenate(nll).mean(), rtol=1e-5)
    for _ in range(10):
        last, _ = trainer.step(batch)
    assert last["loss"] < 0.8 * first["loss"]


def test_sft_loss_skips_the_tokens_a_loss_mask_exempts():
    """`make_batch(loss_masks=...)` (the SFT of unlabelled step judgments): a response token
    with mask 0 is still read (it conditions what follows) but adds nothing to the loss,
    which is the mean over the other tokens (NumPy reference from the full logits)."""
    model = _model(0)
    cfg = TrainerConfig(micro_batch_size=4, loss=LossConfig(objective=Objective.SFT))
    trainer = Trainer(model, cfg, mesh=_mesh1())
    rng = np.random.default_rng(8)
    prompts = [rng.integers(2, 64, size=rng.integers(2, 9)).tolist() for _ in range(8)]
    responses = [rng.integers(2, 64, size=rng.integers(3, 12)).tolist() for _ in range(8)]
    masks = [(rng.uniform(size=len(r)) < 0.6).astype(float).tolist() for r in responses]
    masks[0] = None  # a row without a mask learns every token
    batch = make_batch(prompts, responses, loss_masks=masks, prompt_bucket=8, response_bucket=8)
    p = batch.prompt_len
    logits = np.asarray(
        model(jnp.asarray(batch.input_ids), attention_mask_BxT=jnp.asarray(batch.attention_mask)),
        np.float64,
    )
    nll = []
    for i, r in enumerate(responses):
        keep = np.ones(len(r), bool) if masks[i] is None else np.asarray(masks[i]) > 0
        lp = _np_logsoftmax(logits[i, p - 1 : p - 1 + len(r)])[np.arange(len(r)), r]
        nll.append(-lp[keep])
    metrics, _ = trainer.step(batch)
    np.testing.assert_allclose(metrics["loss"], np.concatenate(nll).mean(), rtol=1e-5)
    with pytest.raises(ValueError, match="loss_masks\\[1\\] has 2 values for a"):
        make_batch(prompts[:2], responses[:2], loss_masks=[None, [1.0, 0.0]])


def test_errors_name_the_field():
    with pytest.raises(
        ValueError, match="micro_batch_size \\(3\\).*data-parallel size \\(8 = mesh"
    ):
        Trainer(
            _model(0),
            TrainerConfig(micro_batch_size=3, loss=LossConfig(kl_coef=0)),
            mesh=make_mesh(MeshConfig(1, 8, 1)),
        )
    trainer = Trainer(
        _model(0), TrainerConfig(micro_batch_size=3, loss=LossConfig(kl_coef=0)), mesh=_mesh1()
    )
    with pytest.raises(ValueError, match="batch of 8 sequences.*micro_batch_size \\(3\\)"):
        trainer.step(_batch())
    with pytest.raises(ValueError, match="kl_coef > 0 needs a ref_model"):
        Trainer(_model(0), TrainerConfig(), mesh=_mesh1())


_PARAM_NORM_BURST = """
import sys
import os
sys.path[:0] = sys.argv[1].split(os.pathsep)
import conftest  # 8 simulated devices
import numpy as np
from tango_jax.parallel.mesh import MeshConfig, make_mesh
import jax
from tango_jax.rl.train_step import TrainerConfig
from tango_jax.rl.trainer import Trainer
import test_trainer as t

mesh = make_mesh(MeshConfig(1, 4, 2))
trainer = Trainer(t._model(0, mesh), TrainerConfig(), mesh=mesh, ref_model=t._model(1, mesh))
norms = {trainer.param_norm() for _ in range(300)}
assert len(norms) == 1, norms
leaves = [np.asarray(x, np.float64) for x in jax.tree.leaves(jax.device_get(trainer.params))]
np.testing.assert_allclose(norms.pop(), np.sqrt(sum((x * x).sum() for x in leaves)), rtol=1e-6)
print("ok")
"""


def test_param_norm_in_a_burst_on_8_devices_does_not_deadlock():
    """300 calls in a row on an fsdp x tensor mesh of 8 simulated devices. Computed eagerly,
    the norm was ~100 tiny programs with a collective each per call, and such a burst deadlocks
    XLA's asynchronous CPU dispatch within seconds (the process aborts at the rendezvous
    timeout after 40 s). Runs in a child process so that a regression fails this test only."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    here = Path(__file__).resolve().parent  # conftest, the helpers and this file
    tests = os.pathsep.join(map(str, [here.parent, here.parent / "helpers", here]))
    child = subprocess.run(
        [sys.executable, "-c", _PARAM_NORM_BURST, str(tests)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert child.returncode == 0 and "ok" in child.stdout, child.stderr[-3000:]
