"""The pure optimiser step of one model, and its configs: policy gradient (GRPO & co.) or SFT.

    params, opt_state, metrics, logp_BxR = train_step(params, opt_state, ref_params, batch,
                                                      frozen, graphdef=..., tx=..., cfg=..., dp=...)

`params` are the trained parameters: the whole model, or with LoRA only the adapters
(`nnx.LoRAParam`); `frozen` is the rest of the model's state (empty without LoRA), which gets
no gradient and no optimizer state. The model is `nnx.merge(graphdef, params, frozen)` and
the KL reference `nnx.merge(graphdef, ref_params, frozen)`: a copy of the initial parameters,
with LoRA of the initial adapters, over the same frozen base (no second copy of the model).

`rl.trainer.Trainer` jits it once with explicit shardings and donated params/optimizer state.

Exact gradient accumulation. The batch [B] is split into M micro-batches of
`micro_batch_size` rows, interleaved (micro-batch m = rows m, m+M, m+2M, ...) so that every
micro-batch is spread over all data-parallel devices. Each micro-batch's loss is
`sum_m / count_total`, where `count_total` (tokens, sequences or micro-batches, by
`LossAggMode`) is computed from the masks before the scan; the summed gradients are therefore
exactly the gradient of the mini-batch loss, whatever M or the mesh. Other statistics are
reduced over micro-batches as the `STATS` table says.

Non-finite loss or gradients: the update is rejected inside the step (the returned params are
the old ones) and `metrics["nonfinite"]` is 1; the caller decides to stop. Donated buffers thus
never end up holding NaNs.

Shape legend: B sequences, M micro-batches, P prompt slots, R response slots, L = P + R.
"""

from __future__ import annotations

import dataclasses
import enum
import math

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from tango_jax.models.transformer import Transformer
from tango_jax.parallel.mesh import constrain
from tango_jax.rl import losses
from tango_jax.schema import above, at_least, check_fields, finite, within


class Objective(enum.Enum):
    POLICY_GRADIENT = "pg"  # PPO-clip surrogate + KL to reference + entropy bonus
    SFT = "sft"  # cross-entropy on response tokens


class LRSchedule(enum.Enum):
    CONSTANT = "constant"  # the RL runs: 1e-6, no warm-up
    COSINE = "cosine"  # SFT: linear warm-up then cosine decay to 0


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
    """AdamW with global-norm clipping; the defaults are the paper's RL values (TANGO_SPEC §6)."""

    learning_rate: float = 1e-6
    schedule: LRSchedule = LRSchedule.CONSTANT  # constant (RL) | cosine (SFT)
    warmup_ratio: float = 0.0  # cosine: linear warm-up over this fraction of total_steps
    total_steps: int = 1  # horizon of the cosine schedule (optimiser steps)
    b1: float = 0.9
    b2: float = 0.999  # 0.999 RL (veRL's default), 0.95 SFT
    eps: float = 1e-8
    weight_decay: float = 0.01
    grad_clip: float = 1.0  # global-norm clipping; <= 0 disables

    def __post_init__(self):
        check_fields(
            self,
            {
                "learning_rate": above(0, "; the paper's RL value is 1e-6, SFT 5e-6"),
                "warmup_ratio": within(0.0, 1.0, open_hi=True),
                "total_steps": at_least(0),
                "b1": within(0.0, 1.0, open_hi=True),
                "b2": within(0.0, 1.0, open_hi=True),
                "eps": above(0),
                "weight_decay": within(0.0, math.inf, open_hi=True),
                "grad_clip": finite("; <= 0 disables clipping"),
            },
        )

    def learning_rate_fn(self) -> optax.Schedule:
        if self.schedule is LRSchedule.CONSTANT:
            return optax.constant_schedule(self.learning_rate)
        warmup = round(self.warmup_ratio * self.total_steps)
        return optax.warmup_cosine_decay_schedule(
            init_value=0.0,
            peak_value=self.learning_rate,
            warmup_steps=warmup,
            decay_steps=max(self.total_steps, warmup + 1),
            end_value=0.0,
        )

    def make(self) -> optax.GradientTransformation:
        adamw = optax.adamw(
            self.learning_rate_fn(),
            b1=self.b1,
            b2=self.b2,
            eps=self.eps,
            weight_decay=self.weight_decay,
        )
        if self.grad_clip > 0:
            return optax.chain(optax.clip_by_global_norm(self.grad_clip), adamw)
        return adamw


@dataclasses.dataclass(frozen=True)
class LossConfig:
    """The per-token loss: `pg - entropy_coef·H + kl_coef·KL` (PG) or `-log p` (SFT)."""

    objective: Objective = Objective.POLICY_GRADIENT  # pg | sft
    clip_low: float = 0.2  # PPO clip range (inert at ρ ≡ 1, the official one-step regime)
    # Above 0.2: DAPO's clip-higher (Yu et al. 2025, arXiv 2503.14476; 0.28 there)
    clip_high: float = 0.2
    dual_clip: float | None = None  # dual-clip PPO constant (> 1); None: off
    kl_coef: float = 0.001  # β of the KL-to-reference term, in the loss
    kl_estimator: losses.KLEstimator = losses.KLEstimator.K3  # kl | abs | mse | low_var_kl
    entropy_coef: float = 0.001  # entropy bonus
    # token-mean (exact over the mini-batch; DAPO's token-level loss) | seq-mean-token-mean
    # (GRPO's per-sequence mean) | microbatch-token-mean (the official code: depends on the
    # micro-batch size) | constant-norm (Dr. GRPO, Liu et al. 2025, arXiv 2503.20783: token sum
    # / (sequences · norm_tokens))
    agg_mode: losses.LossAggMode = losses.LossAggMode.TOKEN_MEAN
    # constant-norm's constant L: a role's trainer gets its rollout.max_tokens (derived, not set
    # by hand); 0 outside a role (set it to the generation budget to use constant-norm there)
    norm_tokens: int = 0
    # Importance ratio: token (PPO/GRPO) | sequence (GSPO, Zheng et al. 2025, arXiv 2507.18071:
    # ρ = exp(mean token log-ratio) per sequence, clipped whole; the paper pairs it with
    # seq-mean-token-mean and clip_low 3e-4 / clip_high 4e-4). Needs use_sampler_logprobs:
    # with ρ ≡ 1 both levels give the same loss and gradient in every agg_mode.
    ratio_level: losses.RatioLevel = losses.RatioLevel.TOKEN
    # DAPO's overlong filtering (arXiv 2503.14476, Sec. 3.4): completions cut at max_tokens
    # without an EOS carry no loss (their rows' response mask is zeroed in the step).
    mask_truncated: bool = False
    # logits are divided by the sampling temperature (as the sampler): a role's trainer gets
    # its rollout.temperature (derived, not set by hand)
    temperature: float = 1.0
    logprob_chunk: int = 256  # sequence chunk for the log-prob pass (memory, not numerics)
    # Vocabulary columns per block of the log-prob head (online log-sum-exp, custom backward:
    # no float32 [rows, chunk, V] logits; rl.vocab_blocks); 0: the whole vocabulary at once.
    # Memory and speed only: the same numbers up to float rounding.
    logprob_vocab_block: int = 0
    # PPO ratio. False: old = stop_gradient(current), i.e. ρ ≡ 1, which is exactly the official
    # one-epoch one-mini-batch regime without a second forward. True: old = sampler log-probs.
    use_sampler_logprobs: bool = False
    # Truncated importance sampling (sampler/trainer mismatch): multiply each token's PG loss by
    # min(exp(logp_trainer - logp_sampler), tis_cap), detached. None disables.
    tis_cap: float | None = None

    def __post_init__(self):
        check_fields(
            self,
            {
                "clip_low": within(0.0, 1.0, open_hi=True),
                "clip_high": within(0.0, math.inf, open_hi=True),
                "kl_coef": within(0.0, math.inf, open_hi=True),
                "entropy_coef": finite(),
                "temperature": above(0, "; it divides the logits"),
                "logprob_chunk": at_least(1),
                "logprob_vocab_block": at_least(0, " (0: the whole vocabulary at once)"),
                "norm_tokens": at_least(0, " (a role's trainer gets its rollout.max_tokens)"),
            },
        )
        if self.agg_mode is losses.LossAggMode.CONSTANT_NORM:
            check_fields(
                self,
                {"norm_tokens": at_least(1, " with agg_mode constant-norm: set it to max_tokens")},
            )
        if self.dual_clip is not None:
            check_fields(self, {"dual_clip": above(1, "; None turns dual-clip off")})


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
    optimizer: OptimizerConfig = OptimizerConfig()
    loss: LossConfig = LossConfig()
    # Rows per accumulation step over the whole mesh (memory only: the accumulation is exact);
    # the paper's 4 per GPU x 8 GPUs.
    micro_batch_size: int = 32

    def __post_init__(self):
        check_fields(self, {"micro_batch_size": at_least(1)})


class Reduction(enum.Enum):
    """How a per-micro-batch statistic becomes a step metric."""

    LOSS_MEAN = "loss_mean"  # summed, / the loss's count (tokens, sequences or micro-batches)
    TOKEN_MEAN = "token_mean"  # summed, / the response tokens (whatever the loss aggregation)
    MAX = "max"  # the largest over micro-batches
    MIN = "min"  # the smallest over micro-batches

    @property
    def initial(self) -> float:
        return {Reduction.MAX: -math.inf, Reduction.MIN: math.inf}.get(self, 0.0)

    def combine(self, acc: jax.Array, value: jax.Array) -> jax.Array:
        if self is Reduction.MAX:
            return jnp.maximum(acc, value)
        if self is Reduction.MIN:
            return jnp.minimum(acc, value)
        return acc + value


# Every statistic `_micro_loss` returns (by its metric name) and its reduction.
STATS: dict[str, Reduction] = {
    "loss/nll": Reduction.LOSS_MEAN,  # SFT
    "loss/pg": Reduction.LOSS_MEAN,
    "loss/kl": Reduction.LOSS_MEAN,
    "loss/entropy": Reduction.LOSS_MEAN,
    "ratio": Reduction.TOKEN_MEAN,
    "clipfrac": Reduction.TOKEN_MEAN,
    "dual_clipfrac": Reduction.TOKEN_MEAN,
    "ppo_kl": Reduction.TOKEN_MEAN,
    "max_ratio": Reduction.MAX,
    "min_ratio": Reduction.MIN,
}


def tree_norm(tree) -> jax.Array:
    return optax.tree.norm(jax.tree.map(lambda x: x.astype(jnp.float32), tree))


# --- the per-micro-batch loss -------------------------------------------------------------------


def response_logprobs(model: Transformer, batch: dict, loss_cfg: LossConfig, with_entropy: bool):
    """log p(response token | prefix) [B, R] (and entropy) from one forward over [B, L]."""
    r = batch["response_mask"].shape[1]
    p = batch["input_ids"].shape[1] - r
    h = model.hidden_states(batch["input_ids"], attention_mask_BxT=batch["attention_mask"])
    h_resp = h[:, p - 1 : p - 1 + r]  # [B, R, D]: the state before each response token
    return losses.token_logprobs(
        h_resp,
        model.lm_head_weight(),
        batch["input_ids"][:, p:],
        temperature=loss_cfg.temperature,
        chunk_size=loss_cfg.logprob_chunk,
        with_entropy=with_entropy,
        vocab_block=loss_cfg.logprob_vocab_block,
    )


def _split_dp(x, dp: int):
    """[b, ...] -> [dp, b/dp, ...]: the rows each data-parallel shard holds."""
    return x.reshape(dp, x.shape[0] // dp, *x.shape[1:])


def _agg(values_BxR, mask_BxR, cfg: LossConfig, dp: int):
    """(sum, count) of a micro-batch; microbatch-token-mean works per device micro-batch (as the
    official per-GPU micro-batches of `ppo_micro_batch_size_per_gpu` rows)."""
    mode = cfg.agg_mode
    if mode is not losses.LossAggMode.MICROBATCH_TOKEN_MEAN or dp == 1:
        return losses.aggregate(values_BxR, mask_BxR, mode, cfg.norm_tokens)
    sums, counts = jax.vmap(lambda v, m: losses.aggregate(v, m, mode))(
        _split_dp(values_BxR, dp), _split_dp(mask_BxR, dp)
    )
    return sums.sum(), counts.sum()


def loss_batch(batch: dict, cfg: LossConfig) -> dict:
    """`batch` with the response mask of the tokens that carry loss: with `mask_truncated`, the
    rows whose completion hit max_tokens (`truncated` [B]) are zeroed, before any count."""
    if not cfg.mask_truncated:
        return batch
    keep_B = 1.0 - batch["truncated"].astype(batch["response_mask"].dtype)
    return batch | {"response_mask": batch["response_mask"] * keep_B[:, None]}


def _micro_loss(params, frozen, graphdef, ref_params, batch, count_total, cfg: LossConfig, dp: int):
    """Loss contribution of one micro-batch (already divided by the global count) + stats."""
    model = nnx.merge(graphdef, params, frozen)
    mask = batch["response_mask"]
    if cfg.objective is Objective.SFT:
        logp, _ = response_logprobs(model, batch, cfg, with_entropy=False)
        nll_sum, _ = _agg(-logp, mask, cfg, dp)
        return nll_sum / count_total, ({"loss/nll": nll_sum}, logp)

    logp, entropy = response_logprobs(model, batch, cfg, with_entropy=cfg.entropy_coef != 0)
    old = batch["sampler_logprobs"] if cfg.use_sampler_logprobs else jax.lax.stop_gradient(logp)
    pg, st = losses.ppo_policy_loss(
        logp,
        old,
        batch["advantages"],
        mask,
        clip_low=cfg.clip_low,
        clip_high=cfg.clip_high,
        dual_clip=cfg.dual_clip,
        sample_weights_B=batch["sample_weights"],
        ratio_level=cfg.ratio_level,
    )
    if cfg.tis_cap is not None:
        tis = jnp.minimum(
            jnp.exp(jax.lax.stop_gradient(logp) - batch["sampler_logprobs"]), cfg.tis_cap
        )
        pg = pg * jnp.where(mask > 0, tis, 0.0)
    kl = None
    if cfg.kl_coef:
        ref_model = nnx.merge(graphdef, ref_params, frozen)
        ref_logp, _ = response_logprobs(ref_model, batch, cfg, False)
        kl = losses.kl_estimate(logp, jax.lax.stop_gradient(ref_logp), cfg.kl_estimator)
    total = losses.total_loss_per_token(
        pg, entropy_BxT=entropy, entropy_coef=cfg.entropy_coef, kl_BxT=kl, kl_coef=cfg.kl_coef
    )
    loss_sum, _ = _agg(total, mask, cfg, dp)
    sums = {"loss/pg": _agg(pg, mask, cfg, dp)[0]}
    if kl is not None:
        sums["loss/kl"] = _agg(kl, mask, cfg, dp)[0]
    if entropy is not None:
        sums["loss/entropy"] = _agg(entropy, mask, cfg, dp)[0]
    for name in ("ratio", "clipfrac", "dual_clipfrac", "ppo_kl"):  # masked token sums
        sums[name] = jnp.sum(st[name])
    sums["max_ratio"] = jnp.where(mask > 0, st["ratio"], -jnp.inf).max()
    sums["min_ratio"] = jnp.where(mask > 0, st["ratio"], jnp.inf).min()
    return loss_sum / count_total, (sums, logp)


# --- the step ----------------------------------------------------------------------------------


def _zeros_like_params(params):
    """float32 zeros shaped like the parameters and, under a mesh, sharded like them (by their
    logical axes): the gradient accumulator of the scan, which would otherwise be replicated."""

    def one(v: nnx.Variable):
        zeros = jnp.zeros(v.get_value().shape, jnp.float32)
        names = v.get_metadata().get("out_sharding")
        return v.replace(zeros if names is None else constrain(zeros, names))

    return jax.tree.map(one, params, is_leaf=lambda x: isinstance(x, nnx.Variable))


def accumulate(params, ref_params, batch, frozen, *, graphdef, cfg: TrainerConfig, dp):
    """Exact mini-batch loss and gradient by a scan over micro-batches.

    Returns (loss, grads (float32), stat sums, count_total, logp [B, R]).
    """
    batch = loss_batch(batch, cfg.loss)
    b = batch["input_ids"].shape[0]
    mb = cfg.micro_batch_size
    m = b // mb
    # [B, ...] -> [M, mb, ...], interleaved so each micro-batch spans every data shard.
    micro = jax.tree.map(lambda x: x.reshape(mb, m, *x.shape[1:]).swapaxes(0, 1), batch)
    count_total = jax.vmap(lambda mask: _agg(jnp.zeros_like(mask), mask, cfg.loss, dp)[1])(
        micro["response_mask"]
    ).sum()
    count_total = jnp.maximum(count_total, 1.0)

    grad_fn = jax.value_and_grad(_micro_loss, has_aux=True)
    if m == 1:  # one micro-batch: no scan, no zero-initialised accumulator to add into
        (loss, (sums, logp)), grads = grad_fn(
            params, frozen, graphdef, ref_params, batch, count_total, cfg.loss, dp
        )
        grads = jax.tree.map(lambda g: g.astype(jnp.float32), grads)
        return loss, grads, sums, count_total, logp

    def body(carry, mbatch):
        grads_acc, loss_acc, sums_acc = carry
        # Tied to this micro-batch by a barrier, the parameters look loop-variant to XLA, which
        # then gathers each layer's FSDP shards (and casts them) where the layer runs instead
        # of hoisting every layer's gathered weights out of the loop for the whole step.
        p, fz, ref_p, mbatch = jax.lax.optimization_barrier((params, frozen, ref_params, mbatch))
        (loss, (sums, logp)), grads = grad_fn(
            p, fz, graphdef, ref_p, mbatch, count_total, cfg.loss, dp
        )
        grads_acc = jax.tree.map(lambda a, g: a + g.astype(a.dtype), grads_acc, grads)
        sums_acc = {k: STATS[k].combine(sums_acc[k], v) for k, v in sums.items()}
        return (grads_acc, loss_acc + loss, sums_acc), logp

    zeros = _zeros_like_params(params)
    sums_shape = jax.eval_shape(
        lambda: _micro_loss(
            params,
            frozen,
            graphdef,
            ref_params,
            jax.tree.map(lambda x: x[0], micro),
            count_total,
            cfg.loss,
            dp,
        )[1][0]
    )
    init_sums = {k: jnp.full((), STATS[k].initial, jnp.float32) for k in sums_shape}
    (grads, loss, sums), logp_MxmbxR = jax.lax.scan(body, (zeros, jnp.zeros(()), init_sums), micro)
    logp = logp_MxmbxR.swapaxes(0, 1).reshape(b, -1)  # back to row order [B, R]
    return loss, grads, sums, count_total, logp


def train_step(
    params, opt_state, ref_params, batch, frozen, *, graphdef, tx, cfg: TrainerConfig, dp
):
    loss, grads, sums, count_total, logp = accumulate(
        params, ref_params, batch, frozen, graphdef=graphdef, cfg=cfg, dp=dp
    )
    b = batch["input_ids"].shape[0]
    grad_norm = tree_norm(grads)
    updates, new_opt_state = tx.update(grads, opt_state, params)
    new_params = optax.apply_updates(params, updates)
    ok = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
    keep = lambda new, old: jax.tree.map(lambda n, o: jnp.where(ok, n, o), new, old)
    new_params, new_opt_state = keep(new_params, params), keep(new_opt_state, opt_state)

    tokens = loss_batch(batch, cfg.loss)["response_mask"].sum()
    metrics = {
        "loss": loss,
        "grad_norm": grad_norm,
        "param_norm": tree_norm(new_params),
        "update_norm": tree_norm(updates),
        "nonfinite": (~ok).astype(jnp.float32),
        "tokens": tokens,
        "sequences": jnp.asarray(b, jnp.float32),
    }
    divisor = {Reduction.LOSS_MEAN: count_total, Reduction.TOKEN_MEAN: jnp.maximum(tokens, 1.0)}
    for k, v in sums.items():
        metrics[k] = v / divisor[STATS[k]] if STATS[k] in divisor else v
    return new_params, new_opt_state, metrics, logp
