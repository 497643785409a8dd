"""One model's trainer: its parameters, optimizer state and the compiled step.

    trainer = Trainer(model, TrainerConfig(...), mesh=mesh, ref_model=ref)
    metrics, logp_BxR = trainer.step(batch)          # one AdamW update, exact accumulation

The step (`rl.train_step.train_step`, pure) is jitted once with explicit shardings, the same
in and out, and donated params/optimizer state, so it compiles exactly once.

With LoRA (`model.config.lora`), the trained parameters are the adapters (`nnx.LoRAParam`)
alone: the optimizer state, the checkpointed state and the update are adapter-shaped, and the
base weights are a frozen, never-donated input of the step.

Shape legend: B sequences, R response slots.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from tango_jax.models.transformer import Transformer
from tango_jax.parallel.distributed import fetch, put
from tango_jax.parallel.mesh import data_parallel_size
from tango_jax.parallel.partition import shard_model
from tango_jax.rl.batch import TrainBatch
from tango_jax.rl.train_step import (
    Objective,
    TrainerConfig,
    accumulate,
    response_logprobs,
    train_step,
    tree_norm,
)


def optimizer_shardings(tx, params, param_shardings, mesh: Mesh):
    """Shardings of `tx`'s state: every params-shaped part (AdamW's mu and nu) sharded as the
    parameters, the rest (step counts) replicated. Left to jit's propagation, `tx.init`'s
    zeros come out replicated: a full optimizer state on every device."""
    replicated = NamedSharding(mesh, P())
    return optax.tree_map_params(
        tx,
        lambda _, sharding: sharding,
        jax.eval_shape(tx.init, params),
        param_shardings,
        transform_non_params=lambda _: replicated,
    )


# One program for the whole tree. Eagerly, every jnp op on a sharded leaf is its own program
# with a collective; the burst of them deadlocked XLA's asynchronous CPU dispatch on 8 simulated
# devices in one process (tests/test_trainer.py, the suite's aborts) and two gloo processes
# after a resume (tests/test_distributed.py); one jitted reduction does not.
_global_norm = jax.jit(tree_norm)


class Trainer:
    """Owns one model's parameters, optimizer state and compiled step.

    `model` stays usable after each step (its state is updated in place), so the embedded
    sampler can share it; `ref_model` (frozen, for the KL term) is never updated. With LoRA
    the reference is a copy of the initial adapters over the frozen base (for fresh adapters,
    B = 0: the base itself) and `ref_model` is not needed.
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
        lora = model.config.lora.enabled
        # What the optimizer updates; the rest of the state (`frozen`) is an input only.
        self.trained = nnx.LoRAParam if lora else nnx.Param
        if (
            config.loss.objective is Objective.POLICY_GRADIENT
            and config.loss.kl_coef
            and ref_model is None
            and not lora
        ):
            raise ValueError("loss.kl_coef > 0 needs a ref_model (the frozen initial policy).")
        if lora and ref_model is not None:
            raise ValueError(
                "a LoRA model's KL reference is its initial adapters over its own frozen base; "
                "pass no ref_model."
            )
        # Every input of the step lives on an explicit NamedSharding of `mesh` (parameters per
        # the logical-axis rules), the same in and out, so the step compiles exactly once.
        shard_model(model, mesh)
        self.graphdef, params, self.frozen = nnx.split(model, self.trained, ...)
        self.param_shardings = jax.tree.map(lambda x: x.sharding, params)
        frozen_shardings = jax.tree.map(lambda x: x.sharding, self.frozen)
        self.tx = config.optimizer.make()
        replicated = NamedSharding(mesh, P())
        self.opt_shardings = optimizer_shardings(self.tx, params, self.param_shardings, mesh)
        self.opt_state = jax.jit(self.tx.init, out_shardings=self.opt_shardings)(params)
        self.ref_params = None
        ref_shardings = None
        if lora and config.loss.kl_coef:  # the initial adapters over the same frozen weights
            self.ref_params = jax.tree.map(jax.numpy.copy, params)  # not the donated buffers
        elif ref_model is not None:
            shard_model(ref_model, mesh)
            self.ref_params = nnx.state(ref_model)
        if self.ref_params is not None:
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
                frozen_shardings,
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
            lambda p, r, bt, fz: accumulate(
                p, r, bt, fz, graphdef=self.graphdef, cfg=self.config, dp=self.dp
            )[:2]
        )
        with jax.set_mesh(self.mesh):
            batch = self._device_batch(batch)
            loss, grads = fn(self.params, self.ref_params, batch, self.frozen)
        return float(loss), grads

    def logprobs(self, batch: TrainBatch) -> np.ndarray:
        """The current policy's log-probs [B, R] of the batch's response tokens (forward only,
        no update): for the drift of rollout batches that are not trained on."""
        if self._logprob_fn is None:

            def fn(params, frozen, bt):
                model = nnx.merge(self.graphdef, params, frozen)
                return response_logprobs(model, bt, self.config.loss, with_entropy=False)[0]

            self._logprob_fn = jax.jit(fn)
        rows = -(-batch.size // self.dp) * self.dp  # any batch size: pad rows to the data shards
        padded = {
            k: np.concatenate([v, np.zeros((rows - batch.size, *v.shape[1:]), v.dtype)])
            for k, v in batch.arrays().items()
        }
        device = {k: put(v, self._batch_sharding) for k, v in padded.items()}
        with jax.set_mesh(self.mesh):
            return fetch(self._logprob_fn(self.params, self.frozen, device))[: batch.size]

    def _step_fn(self, params, opt_state, ref_params, batch, frozen):
        self.traces += 1
        return train_step(
            params,
            opt_state,
            ref_params,
            batch,
            frozen,
            graphdef=self.graphdef,
            tx=self.tx,
            cfg=self.config,
            dp=self.dp,
        )

    @property
    def params(self) -> nnx.State:
        """The trained parameters: the whole model, or with LoRA its adapters."""
        return nnx.state(self.model, self.trained)

    def _device_batch(self, batch: TrainBatch) -> dict[str, jax.Array]:
        mb = self.config.micro_batch_size
        if batch.size % mb:
            raise ValueError(
                f"batch of {batch.size} sequences is not a multiple of micro_batch_size ({mb}); "
                "choose batch sizes (prompts x samples) divisible by it."
            )
        return {k: put(v, self._batch_sharding) for k, v in batch.arrays().items()}

    def step(self, batch: TrainBatch) -> tuple[dict[str, float], np.ndarray]:
        """One optimiser step. Returns (metrics, trainer log-probs [B, R] before the update)."""
        with jax.set_mesh(self.mesh):
            params, opt_state, metrics, logp = self._jitted(
                self.params,
                self.opt_state,
                self.ref_params,
                self._device_batch(batch),
                self.frozen,
            )
        nnx.update(self.model, params)
        self.opt_state = opt_state
        self.step_count += 1
        out = {k: float(v) for k, v in fetch(metrics).items()}
        out["lr"] = float(self.config.optimizer.learning_rate_fn()(self.step_count - 1))
        if not math.isfinite(out["lr"]):
            out["lr"] = 0.0
        return out, fetch(logp)

    def param_norm(self) -> float:
        """The parameters' global norm (float32), as a step's `param_norm` metric reports it
        (one jitted program: see `_global_norm`)."""
        return float(_global_norm(self.params))

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint needs to resume this trainer exactly."""
        return {"params": self.params, "opt_state": self.opt_state, "step": self.step_count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        nnx.update(self.model, state["params"])
        self.opt_state = state["opt_state"]
        self.step_count = int(state["step"])
