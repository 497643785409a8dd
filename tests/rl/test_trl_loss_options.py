"""The policy-gradient options of issue 49 against TRL's own GRPOTrainer code.

The loss: TRL's `GRPOTrainer._compute_loss`, called unbound on a `SimpleNamespace` standing in
for the trainer (the attributes that method reads, its model forward replaced by fixed
per-token log-probs that require grad), against ours (`losses.ppo_policy_loss` +
`losses.aggregate`, the truncation mask of `train_step.loss_batch`) on the same log-probs, old
log-probs, advantages and masks: same loss and same gradient with respect to the log-probs
for each matched (`loss_type`, `importance_sampling_level`, `mask_truncated_completions`).
TRL zeroes the completion mask of truncated rows in `_generate_and_score_completions`; that
one line is reproduced here (rows flagged truncated get an all-zero mask).

The advantage scaling: TRL computes it inside `_generate_and_score_completions`, too large a
method to call; `_trl_advantages` reproduces its `sum_then_normalize` branch line by line in
torch with TRL's own `nanstd` (group / batch / none, the 1e-4 floor).
"""

from __future__ import annotations

import collections
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tango_jax.rl import losses
from tango_jax.rl.advantages import AdvantageScaling, grpo_outcome_advantages
from tango_jax.rl.losses import LossAggMode, RatioLevel
from tango_jax.rl.train_step import LossConfig, loss_batch

torch = pytest.importorskip("torch")
grpo_trainer = pytest.importorskip("trl.trainer.grpo_trainer")
trl_utils = pytest.importorskip("trl.trainer.utils")

B, T, MAX_LEN = 6, 7, 10  # MAX_LEN: TRL's max_completion_length, our norm_tokens
LENGTHS = [7, 3, 5, 1, 7, 4]
TRUNCATED = [1, 0, 0, 0, 1, 0]  # rows cut at the budget (the two of full width)


def _inputs(ratio_scale: float, seed: int = 0):
    rng = np.random.default_rng(seed)
    mask = (np.arange(T)[None, :] < np.asarray(LENGTHS)[:, None]).astype(np.float32)
    logp = -rng.uniform(0.1, 3.0, size=(B, T)).astype(np.float32)
    old = (logp + ratio_scale * rng.normal(size=(B, T))).astype(np.float32)
    adv = rng.normal(size=B).astype(np.float32)
    return logp, old, adv, mask


def _trl_loss(logp, old, adv, mask, *, loss_type, level, eps_low, eps_high, truncated):
    """TRL's `_compute_loss` on fixed log-probs: (loss, d loss / d logp)."""
    if truncated:  # _generate_and_score_completions: completion_mask * (~is_truncated)
        mask = mask * (1.0 - np.asarray(TRUNCATED, np.float32))[:, None]
    logp_t = torch.tensor(logp, requires_grad=True)
    ident = lambda x, **_: x
    self = types.SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *a, **k: (logp_t, torch.zeros(B, T), None),
        aux_loss_enabled=False,
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        importance_sampling_level=level,
        beta=0.0,
        loss_type=loss_type,
        epsilon_low=eps_low,
        epsilon_high=eps_high,
        args=types.SimpleNamespace(delta=None, steps_per_generation=1),
        use_vllm=False,
        vllm_importance_sampling_correction=False,
        model=types.SimpleNamespace(training=True),
        current_gradient_accumulation_steps=1,
        max_completion_length=MAX_LEN,
        _entropy_bonus_enabled=False,
        _metrics=collections.defaultdict(lambda: collections.defaultdict(list)),
        accelerator=types.SimpleNamespace(num_processes=1, gather=ident, reduce=ident),
    )
    mask_t = torch.tensor(mask)
    inputs = {
        "prompt_ids": torch.ones(B, 1, dtype=torch.long),
        "prompt_mask": torch.ones(B, 1, dtype=torch.long),
        "completion_ids": torch.ones(B, T, dtype=torch.long),
        "completion_mask": mask_t,
        "advantages": torch.tensor(adv),
        "old_per_token_logps": torch.tensor(old),
        "num_items_in_batch": mask_t.sum(),
    }
    loss = grpo_trainer.GRPOTrainer._compute_loss(self, None, inputs)
    loss.backward()
    return float(loss.detach()), logp_t.grad.numpy()


def _our_loss(logp, old, adv, mask, cfg: LossConfig):
    """Our loss (one micro-batch: sum / count) and its gradient with respect to logp."""
    batch = loss_batch(
        {"response_mask": jnp.asarray(mask), "truncated": jnp.asarray(TRUNCATED, jnp.float32)},
        cfg,
    )
    m = batch["response_mask"]

    def loss_fn(lp):
        pg, _ = losses.ppo_policy_loss(
            lp,
            jnp.asarray(old),
            jnp.asarray(adv),
            m,
            clip_low=cfg.clip_low,
            clip_high=cfg.clip_high,
            ratio_level=cfg.ratio_level,
        )
        total, count = losses.aggregate(pg, m, cfg.agg_mode, cfg.norm_tokens)
        return total / jnp.maximum(count, 1.0)

    loss, grad = jax.value_and_grad(loss_fn)(jnp.asarray(logp))
    return float(loss), np.asarray(grad)


# (TRL loss_type, importance_sampling_level, mask_truncated_completions) -> our agg mode.
MATCHED = [
    ("grpo", "token", False, LossAggMode.SEQ_MEAN_TOKEN_MEAN),
    ("dapo", "token", False, LossAggMode.TOKEN_MEAN),
    ("bnpo", "token", False, LossAggMode.MICROBATCH_TOKEN_MEAN),
    ("dr_grpo", "token", False, LossAggMode.CONSTANT_NORM),
    ("grpo", "sequence", False, LossAggMode.SEQ_MEAN_TOKEN_MEAN),  # GSPO as its paper
    ("dapo", "sequence", False, LossAggMode.TOKEN_MEAN),
    ("dr_grpo", "sequence", False, LossAggMode.CONSTANT_NORM),
    ("dapo", "token", True, LossAggMode.TOKEN_MEAN),
    ("dr_grpo", "token", True, LossAggMode.CONSTANT_NORM),
    ("bnpo", "sequence", True, LossAggMode.MICROBATCH_TOKEN_MEAN),
]


def _case(loss_type, level, truncated, mode):
    gspo = level == "sequence"
    # GSPO's clip range is ~1e-4 wide (the paper's 3e-4 / 4e-4), so are its ratios' spreads;
    # both scales make some tokens (sequences) clip on each side.
    eps_low, eps_high, ratio_scale = (3e-4, 4e-4, 1e-3) if gspo else (0.2, 0.28, 0.3)
    cfg = LossConfig(
        clip_low=eps_low,
        clip_high=eps_high,
        agg_mode=mode,
        norm_tokens=MAX_LEN,
        ratio_level=RatioLevel(level),
        mask_truncated=truncated,
    )
    logp, old, adv, mask = _inputs(ratio_scale)
    trl = _trl_loss(
        logp,
        old,
        adv,
        mask,
        loss_type=loss_type,
        level=level,
        eps_low=eps_low,
        eps_high=eps_high,
        truncated=truncated,
    )
    return trl, _our_loss(logp, old, adv, mask, cfg), (logp, old, mask)


@pytest.mark.parametrize("loss_type,level,truncated,mode", MATCHED)
def test_loss_and_gradient_equal_trl(loss_type, level, truncated, mode):
    (trl_loss, trl_grad), (loss, grad), (logp, old, mask) = _case(loss_type, level, truncated, mode)
    np.testing.assert_allclose(loss, trl_loss, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(grad, trl_grad, rtol=1e-4, atol=1e-8)
    assert np.abs(grad).sum() > 1e-3  # not a vacuous match
    if truncated:  # the truncated rows carry no gradient
        assert np.all(grad[np.asarray(TRUNCATED, bool)] == 0)
    if level == "token":  # the clip range is left on both sides somewhere
        ratio = np.exp(logp - old)[mask > 0]
        assert (ratio < 0.8).any() and (ratio > 1.28).any()
    else:
        seq_ratio = np.exp(((logp - old) * mask).sum(1) / mask.sum(1))
        assert (seq_ratio < 1 - 3e-4).any() and (seq_ratio > 1 + 4e-4).any()


def test_grpo_loss_type_counts_masked_rows_we_do_not():
    """TRL's `grpo` averages over every row, a truncated (all-masked) one included; our
    seq-mean-token-mean over the rows that carry loss (the documented difference): ours times
    kept / all rows is TRL's."""
    (trl_loss, trl_grad), (loss, grad), _ = _case(
        "grpo", "token", True, LossAggMode.SEQ_MEAN_TOKEN_MEAN
    )
    kept = B - sum(TRUNCATED)
    np.testing.assert_allclose(loss * kept / B, trl_loss, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(grad * kept / B, trl_grad, rtol=1e-4, atol=1e-8)


def _trl_advantages(rewards, num_generations, scale_rewards):
    """TRL's `sum_then_normalize` advantages (one reward function), line by line."""
    rewards = torch.tensor(rewards)
    mean_grouped_rewards = torch.nanmean(rewards.view(-1, num_generations), dim=1)
    mean_grouped_rewards = mean_grouped_rewards.repeat_interleave(num_generations, dim=0)
    if scale_rewards in ["group", "none"]:
        std_rewards = trl_utils.nanstd(rewards.view(-1, num_generations), dim=1)
        std_rewards = std_rewards.repeat_interleave(num_generations, dim=0)
    else:  # "batch"
        std_rewards = trl_utils.nanstd(rewards).expand_as(rewards)
    advantages = rewards - mean_grouped_rewards
    if scale_rewards != "none":
        advantages = advantages / (std_rewards + 1e-4)
    return advantages.numpy()


@pytest.mark.parametrize("scaling", list(AdvantageScaling))
def test_advantage_scaling_equals_trl(scaling):
    rng = np.random.default_rng(3)
    rewards = rng.choice([0.0, 0.5, 1.0], size=12).astype(np.float32)
    rewards[4:8] = 1.0  # one all-equal group: 0 in every scaling
    want = _trl_advantages(rewards, 4, scaling.value)
    got = np.asarray(grpo_outcome_advantages(rewards, 4, eps=1e-4, scaling=scaling))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert np.all(got[4:8] == 0.0)
