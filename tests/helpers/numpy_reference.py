"""Plain NumPy references for tango_jax.rl.advantages, tango_jax.tango.process_advantages,
tango_jax.tango.class_balance and tango_jax.rl.losses.

Written from the official formulas (RL-Tango `core_algos.py`, `rl_tango_trainer.py`, veRL
`dp_actor.py`; TANGO_SPEC.md §2-3), loop by loop in float64, without looking at how the JAX code
vectorises them. Rewards are [B] with groups of contiguous rows; masks are 0/1 arrays.
"""

from __future__ import annotations

import math

import numpy as np


def groups(batch_size, group_size):
    return [list(range(g, g + group_size)) for g in range(0, batch_size, group_size)]


def unbiased_std(values):
    values = [float(v) for v in values]
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def grpo_outcome(rewards, group_size, eps=1e-6):
    out = np.zeros(len(rewards))
    for rows in groups(len(rewards), group_size):
        vals = [rewards[i] for i in rows]
        if len(vals) == 1:
            mean, std = 0.0, 1.0
        else:
            mean, std = sum(vals) / len(vals), unbiased_std(vals)
        for i in rows:
            out[i] = (rewards[i] - mean) / (std + eps)
    return out


def rloo_outcome(rewards, group_size):
    out = np.zeros(len(rewards))
    for rows in groups(len(rewards), group_size):
        for i in rows:
            others = [rewards[j] for j in rows if j != i]
            out[i] = rewards[i] - sum(others) / len(others) if others else 0.0
    return out


def whiten(values, mask):
    """veRL masked_whiten: mean and unbiased variance over masked entries, rsqrt(var + 1e-8)."""
    picked = [
        values[i, t] for i in range(values.shape[0]) for t in range(values.shape[1]) if mask[i, t]
    ]
    mean = sum(picked) / len(picked)
    var = sum((v - mean) ** 2 for v in picked) / (len(picked) - 1)
    out = np.zeros(values.shape)
    for i in range(values.shape[0]):
        for t in range(values.shape[1]):
            if mask[i, t]:
                out[i, t] = (values[i, t] - mean) / math.sqrt(var + 1e-8)
    return out


def returns_to_go(token_rewards, mask):
    """The official REINFORCE++ loop (γ = 1): running return, reset where the mask is 0."""
    b, t_len = token_rewards.shape
    returns = np.zeros((b, t_len))
    running = np.zeros(b)
    for t in reversed(range(t_len)):
        running = token_rewards[:, t] + running
        returns[:, t] = running
        running = running * mask[:, t]
    return returns


def last_token_rewards(rewards, mask):
    token_rewards = np.zeros(mask.shape)
    for i in range(mask.shape[0]):
        length = int(mask[i].sum())
        if length:
            token_rewards[i, length - 1] = rewards[i]
    return token_rewards


def reinforce_pp_outcome(rewards, mask, group_size=None):
    rewards = np.array(rewards, dtype=np.float64)
    if group_size is not None:
        baseline = np.zeros(len(rewards))
        for rows in groups(len(rewards), group_size):
            if len(rows) > 1:
                for i in rows:
                    baseline[i] = sum(rewards[j] for j in rows) / len(rows)
        rewards = rewards - baseline
    returns = returns_to_go(last_token_rewards(rewards, mask), mask)
    return whiten(returns, mask) * mask


def _group_step_values(step_rewards, step_mask, rows):
    return [
        step_rewards[i, v, t]
        for i in rows
        for v in range(step_rewards.shape[1])
        for t in range(step_rewards.shape[2])
        if step_mask[i, v, t]
    ]


def _returns_then_mean_over_verifier_samples(normalised):
    b, nv, t_len = normalised.shape
    out = np.zeros((b, t_len))
    for i in range(b):
        for v in range(nv):
            running = 0.0
            for t in reversed(range(t_len)):
                running += normalised[i, v, t]
                out[i, t] += running / nv
    return out


def grpo_step(step_rewards, step_mask, group_size, eps=1e-6):
    normalised = np.zeros(step_rewards.shape)
    for rows in groups(step_rewards.shape[0], group_size):
        vals = _group_step_values(step_rewards, step_mask, rows)
        if len(vals) <= 1:
            mean, std = 0.0, 1.0
        else:
            mean, std = sum(vals) / len(vals), unbiased_std(vals)
        for i in rows:
            normalised[i] = np.where(step_mask[i], (step_rewards[i] - mean) / (std + eps), 0.0)
    return _returns_then_mean_over_verifier_samples(normalised)


def rloo_step(step_rewards, step_mask, group_size, scale=10.0):
    normalised = np.zeros(step_rewards.shape)
    for rows in groups(step_rewards.shape[0], group_size):
        vals = _group_step_values(step_rewards, step_mask, rows)
        n = len(vals)
        for i in rows:
            for v in range(step_rewards.shape[1]):
                for t in range(step_rewards.shape[2]):
                    if step_mask[i, v, t] and n > 1:
                        others = (sum(vals) - step_rewards[i, v, t]) / (n - 1)
                        normalised[i, v, t] = step_rewards[i, v, t] - others
    return scale * _returns_then_mean_over_verifier_samples(normalised)


def reinforce_pp_step(step_rewards, step_mask, mask):
    """The official REINFORCE++ process branch with the loop running over tokens (the fix)."""
    nv = step_rewards.shape[1]
    returns = np.zeros(mask.shape)
    for v in range(nv):
        returns += returns_to_go(step_rewards[:, v] * step_mask[:, v], mask) / nv
    return whiten(returns, mask) * mask


def alpha(t, schedule, alpha0, alpha_min, total_steps, exp_target_frac=1.0):
    if t < 0:
        return 0.0
    if schedule == "exp":
        k = math.log(alpha0 / alpha_min) / (exp_target_frac * total_steps)
        value = alpha0 * math.exp(-k * t)
    elif schedule == "linear":
        value = alpha0 - (alpha0 - alpha_min) * t / total_steps
    elif schedule == "cosine":
        value = alpha_min + 0.5 * (alpha0 - alpha_min) * (1 + math.cos(math.pi * t / total_steps))
    return max(alpha_min, value)


def class_weights_over_batches(label_batches, decay=0.8, method="sqrt_inverse"):
    """Runs the trainer's EMA over successive batches; returns the last batch's weights."""
    pos_ema = neg_ema = None
    for labels in label_batches:
        pos = sum(1 for x in labels if x > 0.5)
        neg = len(labels) - pos
        if pos_ema is None:
            pos_ema, neg_ema = float(pos), float(neg)
        else:
            pos_ema = decay * pos_ema + (1 - decay) * pos
            neg_ema = decay * neg_ema + (1 - decay) * neg
    if method == "sqrt_inverse":
        pos_coef, neg_coef = 1 / (math.sqrt(pos_ema) + 1e-6), 1 / (math.sqrt(neg_ema) + 1e-6)
    else:
        pos_coef, neg_coef = 1 / (pos_ema + 1e-6), 1 / (neg_ema + 1e-6)
    coefs = [pos_coef if x > 0.5 else neg_coef for x in label_batches[-1]]
    total = sum(coefs)
    return np.array([c * len(coefs) / total for c in coefs]), pos_ema, neg_ema


def ppo_loss(logp, old_logp, adv, clip_low, clip_high, dual_clip=None, weights=None):
    """Per-token loss of PPO-clip (and dual clip), unmasked, token by token."""
    out = np.zeros(logp.shape)
    for i in range(logp.shape[0]):
        for t in range(logp.shape[1]):
            ratio = math.exp(logp[i, t] - old_logp[i, t])
            a = adv[i, t]
            loss = max(-a * ratio, -a * min(max(ratio, 1 - clip_low), 1 + clip_high))
            if dual_clip is not None and a < 0:
                loss = min(loss, -a * dual_clip)
            out[i, t] = loss * (1.0 if weights is None else weights[i])
    return out


def kl(logp, ref_logp, kind):
    if kind == "kl":
        return logp - ref_logp
    if kind == "abs":
        return np.abs(logp - ref_logp)
    if kind == "mse":
        return 0.5 * (logp - ref_logp) ** 2
    log_ratio = ref_logp - logp
    return np.clip(np.exp(log_ratio) - log_ratio - 1, -10, 10)


def token_logprobs(hidden, lm_head, targets, temperature=1.0):
    """Full [B, T, V] logits in float64; returns (log-prob of the target, entropy)."""
    logits = np.einsum("btd,dv->btv", hidden.astype(np.float64), lm_head.astype(np.float64))
    logits = logits / temperature
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    logp = np.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]
    entropy = -(np.exp(log_probs) * log_probs).sum(axis=-1)
    return logp, entropy
