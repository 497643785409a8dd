"""GRPO updates, ours against TRL's GRPOTrainer: the same tiny Llama (weights written by
`transformers`), the same prompts, completions and rewards, then optimiser steps on each side.

TRL is the independent reference: its own advantage code (`scale_rewards="group"`), its own
loss aggregation (`loss_type`), its own AdamW step and gradient clipping through the HF Trainer
(torch's `clip_grad_norm_`), with generation replaced by a fixed `rollout_func`. For each
`loss_type` with a tango_jax counterpart:

* one update, unclipped (`test_one_grpo_update_equals_trl`): the loss, the gradient norm and
  every updated parameter agree within float32 rounding;
* two updates on one batch (`test_second_update_equals_trl`, TRL's `num_iterations=2`), as real
  runs clip: at global norm 1.0, with the gradient norm above it in both updates, a KL term
  (β = 0.1, k3, to the initial policy) and, for bnpo, an entropy bonus. The second update's
  old log-probs are from before the first, so its ratio is not 1 and the PPO clip binds on both
  sides; its loss is not 0 in any mode, and both updates' losses, norms and parameters agree.

docs/real_model.md records which changes to our code break which check. Skips without `trl`
(the `dev` and `compare` extras install it).
"""

from __future__ import annotations

import dataclasses
import os

import huggingface_hub
import jax
import numpy as np
import pytest
import torch
from hf_fixtures import load_hf, write_hf_checkpoint

from tango_jax.models import from_pretrained
from tango_jax.models.hf import iter_hf_tensors
from tango_jax.parallel.mesh import MeshConfig, make_mesh
from tango_jax.rl.advantages import grpo_outcome_advantages
from tango_jax.rl.batch import TrainBatch, make_batch
from tango_jax.rl.losses import LossAggMode
from tango_jax.rl.train_step import LossConfig, OptimizerConfig, TrainerConfig
from tango_jax.rl.trainer import Trainer

trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")
transformers = pytest.importorskip("transformers")

TOKENIZER = os.path.join(os.path.dirname(__file__), "../../tango_jax/assets/tiny_tokenizer")
EOS = 1  # hf_fixtures' eos_token_id (pad is 0, never a real token below)
GROUP, MICRO = 4, 4  # two prompts x 4 completions = 8 rows, two micro-batches of 4
MAX_NEW = 6
PROMPTS = [[5, 17, 9, 33, 41], [7, 12, 60]]
# Per row: completion ids (EOS-terminated, or cut at MAX_NEW tokens) and its reward. Unique
# completions, so the reward function can look its value up by ids.
ROWS = [
    ([20, 21, EOS], 1.0),
    ([22, 23, 24, 25, 26, 27], 0.0),  # truncated
    ([28, EOS], 0.0),
    ([29, 30, 31, 32, EOS], 1.0),
    ([34, 35, 36, EOS], 0.5),
    ([37, EOS], 0.0),
    ([38, 39, 40, 42, 43, 44], 1.0),  # truncated
    ([45, EOS], 1.0),  # micro-batches of 16 and 14 tokens: bnpo differs from dapo
]
OPT = dict(learning_rate=1e-2, b1=0.9, b2=0.999, eps=1e-3, weight_decay=0.0)  # eps ~ |g|: the
# first Adam step then depends on each gradient's size, not only its sign
CLIP = 1e3  # inactive: the update sees the gradient's scale (the norm is compared separately)
PAIRS = {  # TRL loss_type -> our aggregation with the same mean
    "dapo": LossAggMode.TOKEN_MEAN,
    "grpo": LossAggMode.SEQ_MEAN_TOKEN_MEAN,
    "bnpo": LossAggMode.MICROBATCH_TOKEN_MEAN,
}
# Micro-batch m of ours holds rows m, m + M, ... (interleaved); TRL's holds a contiguous slice.
# Our batch row j is row ORDER[j] of ROWS, so that both cut the batch into the same micro-batches.
ACCUM = len(ROWS) // MICRO  # micro-batches per update
ORDER = np.array([(j % ACCUM) * MICRO + j // ACCUM for j in range(len(ROWS))])


@dataclasses.dataclass(frozen=True)
class Update:
    """The settings both trainers get. The defaults: one unclipped update without KL or entropy
    (`test_one_grpo_update_equals_trl`); `MOVED`: `test_second_update_equals_trl`."""

    updates: int = 1  # optimiser steps on the one batch (TRL's num_iterations)
    learning_rate: float = OPT["learning_rate"]
    max_grad_norm: float = CLIP  # global-norm clipping (our grad_clip)
    beta: float = 0.0  # KL coefficient (our kl_coef), k3 estimator
    entropy_coef: float = 0.0
    epsilon: float = 0.2  # PPO clip range, both sides (our clip_low = clip_high)


# Two updates at lr 1e-3 (not 1e-2): the second one's ratios then span ~0.5-1.8, so that some
# tokens are clipped on each side and the others are not (at 1e-2 they reach 35, 83% clipped).
# Clipping at 1.0 as in the real runs, where it acted on 21-25 of 30 updates; the gradient norms
# here (~3.4-4.1, then ~1.4-1.6) are above it in both updates.
MOVED = Update(updates=2, learning_rate=1e-3, max_grad_norm=1.0, beta=0.1)
# TRL adds its entropy bonus as each micro-batch's token mean whatever the `loss_type`; ours is
# aggregated like the loss (veRL's `agg_loss`). The two agree for bnpo only.
ENTROPY = {"bnpo": 0.01}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny_llama")
    return write_hf_checkpoint(path, family="llama", tie=True, heads=2, kv_heads=1, hidden=32,
                               inter=48, layers=2, vocab=64)  # fmt: skip


def _prompt_rows():
    return [PROMPTS[i // GROUP] for i in range(len(ROWS))]


def trl_updates(checkpoint, loss_type: str, run: Update, tmp_path, monkeypatch) -> list[dict]:
    """Per TRL optimiser step: its loss, pre-clip gradient norm, logged metrics and the
    parameters after the step."""
    # TRL shuffles the rows of a generation batch before cutting it into micro-batches; keep
    # its order so that bnpo's per-micro-batch means are over known rows (rows 0-3, 4-7).
    monkeypatch.setattr(trl.trainer.grpo_trainer, "shuffle_sequence_dict", lambda d: d)
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func's warning
    # TRL's trainers ping the hub at start-up unless telemetry is off (read as a constant)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_DISABLE_TELEMETRY", True)
    torch.manual_seed(0)
    model = load_hf(checkpoint)
    model.get_input_embeddings().padding_idx = None  # tango_jax trains every embedding row
    tokenizer = transformers.AutoTokenizer.from_pretrained(TOKENIZER)
    rewards = {tuple(ids): r for ids, r in ROWS}

    def rollout(prompts, trainer):
        assert len(prompts) == len(ROWS)
        return {"prompt_ids": _prompt_rows(), "completion_ids": [ids for ids, _ in ROWS],
                "logprobs": None}  # fmt: skip

    def reward(prompts, completions, completion_ids, **_):
        return [rewards[tuple(ids)] for ids in completion_ids]

    args = trl.GRPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        per_device_train_batch_size=MICRO,
        gradient_accumulation_steps=ACCUM,
        num_generations=GROUP,
        max_completion_length=MAX_NEW,
        # One generation, `updates` optimiser steps on it; from the second on, the old
        # log-probs (computed at generation) are those of the policy before the first.
        num_iterations=run.updates,
        max_steps=run.updates,
        shuffle_dataset=False,
        learning_rate=run.learning_rate,
        lr_scheduler_type="constant",
        adam_beta1=OPT["b1"],
        adam_beta2=OPT["b2"],
        adam_epsilon=OPT["eps"],
        weight_decay=OPT["weight_decay"],
        max_grad_norm=run.max_grad_norm,
        epsilon=run.epsilon,
        beta=run.beta,
        # TRL's default (True) multiplies each token's k3 by its ratio (DeepSeek-V3.2's unbiased
        # KL gradient); the GRPO objective (Shao et al. 2024, Eq. 3) and veRL, which tango_jax
        # follows, add β·k3 unweighted.
        use_bias_correction_kl=False,
        entropy_coef=run.entropy_coef,
        loss_type=loss_type,
        scale_rewards="group",
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
    )
    losses, params = [], []

    class Recorded(trl.GRPOTrainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            losses.append(float(loss.detach()))
            return loss

    class Snapshot(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):  # after the step
            params.append({n: p.detach().numpy().copy() for n, p in model.named_parameters()})

    trainer = Recorded(
        model=model,
        reward_funcs=reward,
        args=args,
        train_dataset=datasets.Dataset.from_list([{"prompt": "a"}, {"prompt": "b"}]),
        processing_class=tokenizer,
        rollout_func=rollout,
        callbacks=[Snapshot()],
    )
    trainer.train()
    logs = [h for h in trainer.state.log_history if "grad_norm" in h]
    assert len(logs) == len(params) == run.updates and len(losses) == run.updates * ACCUM
    return [
        dict(
            loss=sum(losses[k * ACCUM : (k + 1) * ACCUM]),
            grad_norm=float(logs[k]["grad_norm"]),
            log=logs[k],
            params=params[k],
        )
        for k in range(run.updates)
    ]


def our_updates(checkpoint, loss_type: str, run: Update) -> tuple[list[dict], TrainBatch]:
    """Per step of ours: metrics, parameters after it and the log-probs [B, R] before it, in
    our row order (`ORDER`); and the batch."""
    mesh = make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])
    model = from_pretrained(checkpoint, mesh=mesh)
    ref_model = from_pretrained(checkpoint, mesh=mesh) if run.beta else None
    cfg = TrainerConfig(
        optimizer=OptimizerConfig(
            **(OPT | dict(learning_rate=run.learning_rate)), grad_clip=run.max_grad_norm
        ),
        loss=LossConfig(
            kl_coef=run.beta,
            entropy_coef=run.entropy_coef,
            agg_mode=PAIRS[loss_type],
            clip_low=run.epsilon,
            clip_high=run.epsilon,
            # One update: old = stop_gradient(current), ρ ≡ 1 (the real runs' path). More: the
            # old log-probs of the batch, taken before the first update.
            use_sampler_logprobs=run.updates > 1,
        ),
        micro_batch_size=MICRO,
    )
    rewards = np.array([r for _, r in ROWS], np.float32)
    adv = np.asarray(grpo_outcome_advantages(rewards, GROUP, eps=1e-4))  # TRL's std floor
    batch = make_batch(_prompt_rows(), [ids for ids, _ in ROWS], advantages=list(adv),
                       prompt_bucket=1, response_bucket=1).select(ORDER)  # fmt: skip
    trainer = Trainer(model, cfg, mesh=mesh, ref_model=ref_model)
    if run.updates > 1:
        batch = dataclasses.replace(batch, sampler_logprobs=trainer.logprobs(batch))
    steps = []
    for _ in range(run.updates):
        metrics, logp = trainer.step(batch)
        params = {name: np.asarray(v) for name, v in iter_hf_tensors(model)}
        steps.append(dict(metrics=metrics, logp=logp, params=params))
    return steps, batch


def assert_same_params(params, params_ref, before, what: str):
    """Every tensor moved from `before`, by the same step as TRL's (tied: one tensor)."""
    assert set(params) == set(params_ref) - {"lm_head.weight"}
    for name, ref in params_ref.items():
        if name == "lm_head.weight":
            continue
        step_ref = ref - before[name]
        assert np.abs(step_ref).max() > 1e-4, (what, name)
        np.testing.assert_allclose(
            params[name] - before[name], step_ref, atol=2e-6, err_msg=f"{what}: {name}"
        )


def assert_same_loss(loss, loss_ref, what: str):
    assert abs(loss - loss_ref) <= 1e-6 + 1e-5 * abs(loss_ref), (what, loss, loss_ref)


@pytest.mark.parametrize("loss_type", sorted(PAIRS))
def test_one_grpo_update_equals_trl(checkpoint, loss_type, tmp_path, monkeypatch):
    # At ρ ≡ 1 the grpo loss is -mean(A) = 0 on both sides (every group's advantages sum to 0),
    # so for grpo only the norm and the parameters say something here; the loss is compared
    # non-trivially in test_second_update_equals_trl.
    (ref,) = trl_updates(checkpoint, loss_type, Update(), tmp_path, monkeypatch)
    (ours,), _ = our_updates(checkpoint, loss_type, Update())
    before = {n: p.detach().numpy() for n, p in load_hf(checkpoint).named_parameters()}
    assert_same_loss(ours["metrics"]["loss"], ref["loss"], "loss")
    assert ours["metrics"]["grad_norm"] == pytest.approx(ref["grad_norm"], rel=1e-5)
    assert_same_params(ours["params"], ref["params"], before, "update")


@pytest.mark.parametrize("loss_type", sorted(PAIRS))
def test_second_update_equals_trl(checkpoint, loss_type, tmp_path, monkeypatch):
    run = dataclasses.replace(MOVED, entropy_coef=ENTROPY.get(loss_type, 0.0))
    refs = trl_updates(checkpoint, loss_type, run, tmp_path, monkeypatch)
    ours, batch = our_updates(checkpoint, loss_type, run)
    before = {n: p.detach().numpy() for n, p in load_hf(checkpoint).named_parameters()}

    # What the reference did, whatever our code does: gradient clipping acts in both updates;
    # in the second the PPO clip binds on both sides (TRL's own counts, A > 0 above 1 + eps and
    # A < 0 below 1 - eps) and leaves other tokens free; the KL (and bnpo's entropy bonus) weigh
    # in the loss far above its tolerance; the loss is not 0 (grpo's is 0 at ρ ≡ 1).
    log = refs[1]["log"]
    assert min(ref["grad_norm"] for ref in refs) > run.max_grad_norm, refs[1]["grad_norm"]
    assert log["clip_ratio/high_mean"] > 0.1 and log["clip_ratio/low_mean"] > 0.1, log
    assert log["clip_ratio/region_mean"] < 0.9, log
    assert run.beta * log["kl"] > 1e-3, log["kl"]
    assert run.entropy_coef == 0 or run.entropy_coef * log["entropy"] > 1e-3, log["entropy"]
    assert abs(refs[1]["loss"]) > 1e-2, refs[1]["loss"]

    for k, (our, ref) in enumerate(zip(ours, refs, strict=True)):
        what = f"update {k + 1}"
        assert_same_loss(our["metrics"]["loss"], ref["loss"], what)
        assert our["metrics"]["grad_norm"] == pytest.approx(ref["grad_norm"], rel=1e-5), what
        assert_same_params(our["params"], ref["params"], before, what)

    # The second update token by token: ρ = π_1 / π_0 from our log-probs before each update,
    # in TRL's row order (micro-batch k = rows 4k..4k+3).
    back = np.argsort(ORDER)
    mask = batch.response_mask[back] > 0
    adv = batch.advantages[back]
    ratio = np.exp(ours[1]["logp"] - batch.sampler_logprobs)[back]
    eps = run.epsilon
    # no clip decision hangs on float rounding (TRL's ratios differ from ours by ~1e-6)
    assert np.abs(ratio[mask][:, None] - np.array([1 - eps, 1 + eps])).min() > 1e-4
    high = mask & (adv > 0) & (ratio > 1 + eps)
    low = mask & (adv < 0) & (ratio < 1 - eps)

    def micro_mean(x):  # TRL's logged metric: the mean over micro-batches of token means
        mb = np.arange(len(ROWS)) // MICRO
        return np.mean([x[mb == k].sum() / mask[mb == k].sum() for k in range(ACCUM)])

    assert log["clip_ratio/high_mean"] == pytest.approx(micro_mean(high), abs=1e-6)
    assert log["clip_ratio/low_mean"] == pytest.approx(micro_mean(low), abs=1e-6)
    assert ours[1]["metrics"]["clipfrac"] == pytest.approx((high | low).sum() / mask.sum())
    if loss_type == "bnpo":  # our KL and entropy means are aggregated as TRL logs them
        # k3 = exp(-x) + x - 1 turns the ~1e-6 log-prob differences between the two
        # implementations into ~x·1e-6 per token (8e-7 measured on 0.053): 5e-6 absolute
        assert ours[1]["metrics"]["loss/kl"] == pytest.approx(log["kl"], abs=5e-6)
        assert_same_loss(ours[1]["metrics"]["loss/entropy"], log["entropy"], "entropy")
