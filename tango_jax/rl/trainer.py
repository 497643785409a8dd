"""One jitted, sharded optimiser step per model: policy gradient (GRPO & co.) or SFT.

    trainer = Trainer(model, TrainerConfig(...), mesh=mesh, ref_model=ref)
    metrics, logp_BxR = trainer.step(batch)          # one AdamW update, exact accumulation

The step is a pure function `(params, opt_state, ref_params, batch) -> (params, opt_state,
metrics, logp)` jitted once with explicit shardings and donated params/optimizer state.

Exact gradient accumulation. The batch [B] is split into M micro-batches of
`micro_batch_size` rows, interleaved (micro-batch m = rows m, m+M, m+2M, ...) so that every
micro-batch is spread over all data-parallel devices. Each micro-batch's loss is
`sum_m / count_total`, where `count_total` (tokens, sequences or micro-batches, by
`LossAggMode`) is computed from the masks before the scan; the summed gradients are therefore
exactly the gradient of the mini-batch loss, whatever M or the mesh.

Non-finite loss or gradients: the update is rejected inside the step (the returned params are
the old ones) and `metrics["nonfinite"]` is 1; the caller decides to stop. Donated buffers thus
never end up holding NaNs.

Shape legend: B sequences, M micro-batches, P prompt slots, R response slots, L = P + R.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from tango_jax.models.transformer import Transformer
from tango_jax.parallel.mesh import data_parallel_size
from tango_jax.parallel.partition import shard_model
from tango_jax.rl import losses
from tango_jax.rl.batch import TrainBatch


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
    clip_high: float = 0.2
    dual_clip: float | None = None  # dual-clip PPO constant (> 1); None: off
    kl_coef: float = 0.001  # β of the KL-to-reference term, in the loss
    kl_estimator: losses.KLEstimator = losses.KLEstimator.K3  # kl | abs | mse | low_var_kl
    entropy_coef: float = 0.001  # entropy bonus
    # token-mean (exact over the mini-batch) | seq-mean-token-mean | microbatch-token-mean (the
    # official code: depends on the micro-batch size)
    agg_mode: losses.LossAggMode = losses.LossAggMode.TOKEN_MEAN
    temperature: float = 1.0  # logits are divided by the sampling temperature (as the sampler)
    logprob_chunk: int = 256  # sequence chunk for the log-prob pass (memory, not numerics)
    # PPO ratio. False: old = stop_gradient(current), i.e. ρ ≡ 1, which is exactly the official
    # one-epoch one-mini-batch regime without a second forward. True: old = sampler log-probs.
    use_sampler_logprobs: bool = False
    # Truncated importance sampling (sampler/trainer mismatch): multiply each token's PG loss by
    # min(exp(logp_trainer - logp_sampler), tis_cap), detached. None disables.
    tis_cap: float | None = None


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
    optimizer: OptimizerConfig = OptimizerConfig()
    loss: LossConfig = LossConfig()
    # Rows per accumulation step over the whole mesh (memory only: the accumulation is exact);
    # the paper's 4 per GPU x 8 GPUs.
    micro_batch_size: int = 32


def _tree_norm(tree) -> jax.Array:
    return optax.tree.norm(jax.tree.map(lambda x: x.astype(jnp.float32), tree))


# --- the per-micro-batch loss -------------------------------------------------------------------


def _response_logprobs(model: Transformer, batch: dict, loss_cfg: LossConfig, with_entropy: bool):
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
    )


def _split_dp(x, dp: int):
    """[b, ...] -> [dp, b/dp, ...]: the rows each data-parallel shard holds."""
    return x.reshape(dp, x.shape[0] // dp, *x.shape[1:])


def _agg(values_BxR, mask_BxR, mode: losses.LossAggMode, dp: int):
    """(sum, count) of a micro-batch; microbatch-token-mean works per device micro-batch (as the
    official per-GPU micro-batches of `ppo_micro_batch_size_per_gpu` rows)."""
    if mode is not losses.LossAggMode.MICROBATCH_TOKEN_MEAN or dp == 1:
        return losses.aggregate(values_BxR, mask_BxR, mode)
    sums, counts = jax.vmap(lambda v, m: losses.aggregate(v, m, mode))(
        _split_dp(values_BxR, dp), _split_dp(mask_BxR, dp)
    )
    return sums.sum(), counts.sum()


def _micro_loss(params, graphdef, ref_params, batch, count_total, cfg: LossConfig, dp: int):
    """Loss contribution of one micro-batch (already divided by the global count) + stats."""
    model = nnx.merge(graphdef, params)
    mask = batch["response_mask"]
    mode = cfg.agg_mode
    if cfg.objective is Objective.SFT:
        logp, _ = _response_logprobs(model, batch, cfg, with_entropy=False)
        nll_sum, _ = _agg(-logp, mask, mode, dp)
        return nll_sum / count_total, ({"loss/nll": nll_sum}, logp)

    logp, entropy = _response_logprobs(model, batch, cfg, with_entropy=cfg.entropy_coef != 0)
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
    )
    if cfg.tis_cap is not None:
        tis = jnp.minimum(
            jnp.exp(jax.lax.stop_gradient(logp) - batch["sampler_logprobs"]), cfg.tis_cap
        )
        pg = pg * jnp.where(mask > 0, tis, 0.0)
    kl = None
    if cfg.kl_coef:
        ref_logp, _ = _response_logprobs(nnx.merge(graphdef, ref_params), batch, cfg, False)
        kl = losses.kl_estimate(logp, jax.lax.stop_gradient(ref_logp), cfg.kl_estimator)
    total = losses.total_loss_per_token(
        pg, entropy_BxT=entropy, entropy_coef=cfg.entropy_coef, kl_BxT=kl, kl_coef=cfg.kl_coef
    )
    loss_sum, _ = _agg(total, mask, mode, dp)
    sums = {"loss/pg": _agg(pg, mask, mode, dp)[0]}
    if kl is not None:
        sums["loss/kl"] = _agg(kl, mask, mode, dp)[0]
    if entropy is not None:
        sums["loss/entropy"] = _agg(entropy, mask, mode, dp)[0]
    # Token statistics are always token means (independent of the loss aggregation).
    for name in ("ratio", "clipfrac", "dual_clipfrac", "ppo_kl"):
        sums[f"token_sum/{name}"] = jnp.sum(st[name])
    big = jnp.where(mask > 0, st["ratio"], -jnp.inf).max()
    small = jnp.where(mask > 0, st["ratio"], jnp.inf).min()
    return loss_sum / count_total, (sums | {"max/ratio": big, "min/ratio": small}, logp)


# --- the step ----------------------------------------------------------------------------------


def _accumulate(params, ref_params, batch, *, graphdef, cfg: TrainerConfig, dp):
    """Exact mini-batch loss and gradient by a scan over micro-batches.

    Returns (loss, grads (float32), stat sums, count_total, logp [B, R]).
    """
    b = batch["input_ids"].shape[0]
    mb = cfg.micro_batch_size
    m = b // mb
    # [B, ...] -> [M, mb, ...], interleaved so each micro-batch spans every data shard.
    micro = jax.tree.map(lambda x: x.reshape(mb, m, *x.shape[1:]).swapaxes(0, 1), batch)
    mode = cfg.loss.agg_mode
    count_total = jax.vmap(lambda mask: _agg(jnp.zeros_like(mask), mask, mode, dp)[1])(
        micro["response_mask"]
    ).sum()
    count_total = jnp.maximum(count_total, 1.0)

    grad_fn = jax.value_and_grad(_micro_loss, has_aux=True)

    def body(carry, mbatch):
        grads_acc, loss_acc, sums_acc = carry
        (loss, (sums, logp)), grads = grad_fn(
            params, graphdef, ref_params, mbatch, count_total, cfg.loss, dp
        )
        grads_acc = jax.tree.map(lambda a, g: a + g.astype(a.dtype), grads_acc, grads)
        sums_acc = {
            k: (
                jnp.maximum(sums_acc[k], v)
                if k.startswith("max/")
                else jnp.minimum(sums_acc[k], v)
                if k.startswith("min/")
                else sums_acc[k] + v
            )
            for k, v in sums.items()
        }
        return (grads_acc, loss_acc + loss, sums_acc), logp

    zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params)
    sums_shape = jax.eval_shape(
        lambda: _micro_loss(
            params,
            graphdef,
            ref_params,
            jax.tree.map(lambda x: x[0], micro),
            count_total,
            cfg.loss,
            dp,
        )[1][0]
    )
    init_sums = {
        k: jnp.full(
            (),
            -jnp.inf if k.startswith("max/") else jnp.inf if k.startswith("min/") else 0.0,
            jnp.float32,
        )
        for k in sums_shape
    }
    (grads, loss, sums), logp_MxmbxR = jax.lax.scan(body, (zeros, jnp.zeros(()), init_sums), micro)
    logp = logp_MxmbxR.swapaxes(0, 1).reshape(b, -1)  # back to row order [B, R]
    return loss, grads, sums, count_total, logp


def _train_step(params, opt_state, ref_params, batch, *, graphdef, tx, cfg: TrainerConfig, dp):
    loss, grads, sums, count_total, logp = _accumulate(
        params, ref_params, batch, graphdef=graphdef, cfg=cfg, dp=dp
    )
    b = batch["input_ids"].shape[0]
    grad_norm = _tree_norm(grads)
    updates, new_opt_state = tx.update(grads, opt_state, params)
    new_params = optax.apply_updates(params, updates)
    ok = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
    keep = lambda new, old: jax.tree.map(lambda n, o: jnp.where(ok, n, o), new, old)
    new_params, new_opt_state = keep(new_params, params), keep(new_opt_state, opt_state)

    tokens = batch["response_mask"].sum()
    metrics = {
        "loss": loss,
        "grad_norm": grad_norm,
        "param_norm": _tree_norm(new_params),
        "update_norm": _tree_norm(updates),
        "nonfinite": (~ok).astype(jnp.float32),
        "tokens": tokens,
        "sequences": jnp.asarray(b, jnp.float32),
    }
    for k, v in sums.items():
        if k.startswith("token_sum/"):
            metrics[k.removeprefix("token_sum/")] = v / jnp.maximum(tokens, 1.0)
        elif k.startswith(("max/", "min/")):
            metrics[k.replace("/", "_")] = v
        else:
            metrics[k] = v / count_total
    return new_params, new_opt_state, metrics, logp


class Trainer:
    """Owns one model's parameters, optimizer state and compiled step.

    `model` stays usable after each step (its state is updated in place), so the embedded
    sampler can share it; `ref_model` (frozen, for the KL term) is never updated.
    """

    def __init__(
        self,
        model: Transformer,
        config: TrainerConfig,
        *,
        mesh: Mesh,
        ref_model: Transformer | None = None,
    ):
        self.model, self.config, self.mesh = model, config, mesh
        if (
            config.loss.objective is Objective.POLICY_GRADIENT
            and config.loss.kl_coef
            and ref_model is None
        ):
            raise ValueError("loss.kl_coef > 0 needs a ref_model (the frozen initial policy).")
        # Every input of the step lives on an explicit NamedSharding of `mesh` (parameters per
        # the logical-axis rules), the same in and out, so the step compiles exactly once.
        shard_model(model, mesh)
        self.graphdef, params = nnx.split(model)
        self.param_shardings = jax.tree.map(lambda x: x.sharding, params)
        self.tx = config.optimizer.make()
        replicated = NamedSharding(mesh, P())
        opt_state = jax.jit(self.tx.init)(params)
        self.opt_shardings = jax.tree.map(
            lambda x: x.sharding if isinstance(x.sharding, NamedSharding) else replicated, opt_state
        )
        self.opt_state = jax.device_put(opt_state, self.opt_shardings)
        self.ref_params = None
        ref_shardings = None
        if ref_model is not None:
            shard_model(ref_model, mesh)
            self.ref_params = nnx.state(ref_model)
            ref_shardings = jax.tree.map(lambda x: x.sharding, self.ref_params)
        self.step_count = 0
        self.dp = data_parallel_size(mesh)
        if config.micro_batch_size % self.dp:
            raise ValueError(
                f"micro_batch_size ({config.micro_batch_size}) must be divisible by the "
                f"data-parallel size ({self.dp} = mesh data x fsdp)."
            )
        self._batch_sharding = NamedSharding(mesh, P(("data", "fsdp")))
        self._jitted = jax.jit(
            self._step_fn,
            donate_argnums=(0, 1),
            in_shardings=(
                self.param_shardings,
                self.opt_shardings,
                ref_shardings,
                self._batch_sharding,
            ),
            out_shardings=(
                self.param_shardings,
                self.opt_shardings,
                replicated,
                self._batch_sharding,
            ),
        )
        self.traces = 0  # number of times the step was traced (tests assert it stays 1)
        self._logprob_fn = None

    def loss_and_grads(self, batch: TrainBatch) -> tuple[float, Any]:
        """The accumulated mini-batch loss and float32 gradient, without updating (for tests
        and diagnostics)."""
        fn = jax.jit(
            lambda p, r, bt: _accumulate(
                p, r, bt, graphdef=self.graphdef, cfg=self.config, dp=self.dp
            )[:2]
        )
        with jax.set_mesh(self.mesh):
            loss, grads = fn(self.params, self.ref_params, self._device_batch(batch))
        return float(loss), grads

    def logprobs(self, batch: TrainBatch) -> np.ndarray:
        """The current policy's log-probs [B, R] of the batch's response tokens (forward only,
        no update): for the drift of rollout batches that are not trained on."""
        if self._logprob_fn is None:

            def fn(params, bt):
                model = nnx.merge(self.graphdef, params)
                return _response_logprobs(model, bt, self.config.loss, with_entropy=False)[0]

            self._logprob_fn = jax.jit(fn)
        rows = -(-batch.size // self.dp) * self.dp  # any batch size: pad rows to the data shards
        padded = {
            k: np.concatenate([v, np.zeros((rows - batch.size, *v.shape[1:]), v.dtype)])
            for k, v in batch.arrays().items()
        }
        device = {k: jax.device_put(v, self._batch_sharding) for k, v in padded.items()}
        with jax.set_mesh(self.mesh):
            return np.asarray(self._logprob_fn(self.params, device))[: batch.size]

    def _step_fn(self, params, opt_state, ref_params, batch):
        self.traces += 1
        return _train_step(
            params,
            opt_state,
            ref_params,
            batch,
            graphdef=self.graphdef,
            tx=self.tx,
            cfg=self.config,
            dp=self.dp,
        )

    @property
    def params(self) -> nnx.State:
        return nnx.state(self.model)

    def _device_batch(self, batch: TrainBatch) -> dict[str, jax.Array]:
        mb = self.config.micro_batch_size
        if batch.size % mb:
            raise ValueError(
                f"batch of {batch.size} sequences is not a multiple of micro_batch_size ({mb}); "
                "choose batch sizes (prompts x samples) divisible by it."
            )
        return {k: jax.device_put(v, self._batch_sharding) for k, v in batch.arrays().items()}

    def step(self, batch: TrainBatch) -> tuple[dict[str, float], np.ndarray]:
        """One optimiser step. Returns (metrics, trainer log-probs [B, R] before the update)."""
        with jax.set_mesh(self.mesh):
            params, opt_state, metrics, logp = self._jitted(
                self.params, self.opt_state, self.ref_params, self._device_batch(batch)
            )
        nnx.update(self.model, params)
        self.opt_state = opt_state
        self.step_count += 1
        out = {k: float(v) for k, v in jax.device_get(metrics).items()}
        out["lr"] = float(self.config.optimizer.learning_rate_fn()(self.step_count - 1))
        if not math.isfinite(out["lr"]):
            out["lr"] = 0.0
        return out, np.asarray(logp)

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint needs to resume this trainer exactly."""
        return {"params": self.params, "opt_state": self.opt_state, "step": self.step_count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        nnx.update(self.model, state["params"])
        self.opt_state = state["opt_state"]
        self.step_count = int(state["step"])
