"""One GRPO update, ours against TRL's GRPOTrainer: the same tiny Llama (weights written by
`transformers`), the same prompts, completions and rewards, then one optimiser step each.

TRL is the independent reference: its own advantage code (`scale_rewards="group"`), its own
loss aggregation (`loss_type`), its own AdamW step through the HF Trainer, with generation
replaced by a fixed `rollout_func`. For each `loss_type` with a tango_jax counterpart the loss,
the gradient norm (before clipping) and every updated parameter must agree within float32
rounding. Changing one of our aggregation modes, the group std (or its 1e-4 floor as TRL uses
it) or the optimiser breaks it (docs/real_model.md records that check). Skips without `trl`
(the `dev` and `compare` extras install it).
"""

from __future__ import annotations

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
from tango_jax.rl.batch import make_batch
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


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny_llama")
    return write_hf_checkpoint(path, family="llama", tie=True, heads=2, kv_heads=1, hidden=32,
                               inter=48, layers=2, vocab=64)  # fmt: skip


def _prompt_rows():
    return [PROMPTS[i // GROUP] for i in range(len(ROWS))]


def trl_update(checkpoint, loss_type: str, tmp_path, monkeypatch):
    """TRL's loss, pre-clip gradient norm and updated parameters for the fixed batch."""
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
        gradient_accumulation_steps=len(ROWS) // MICRO,
        num_generations=GROUP,
        max_completion_length=MAX_NEW,
        max_steps=1,
        shuffle_dataset=False,
        learning_rate=OPT["learning_rate"],
        lr_scheduler_type="constant",
        adam_beta1=OPT["b1"],
        adam_beta2=OPT["b2"],
        adam_epsilon=OPT["eps"],
        weight_decay=OPT["weight_decay"],
        max_grad_norm=CLIP,
        beta=0.0,
        loss_type=loss_type,
        scale_rewards="group",
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
    )
    losses = []

    class Recorded(trl.GRPOTrainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            losses.append(float(loss.detach()))
            return loss

    trainer = Recorded(
        model=model,
        reward_funcs=reward,
        args=args,
        train_dataset=datasets.Dataset.from_list([{"prompt": "a"}, {"prompt": "b"}]),
        processing_class=tokenizer,
        rollout_func=rollout,
    )
    trainer.train()
    grad_norm = next(h["grad_norm"] for h in trainer.state.log_history if "grad_norm" in h)
    params = {n: p.detach().numpy().copy() for n, p in model.named_parameters()}
    return sum(losses), float(grad_norm), params


def our_update(checkpoint, mode: LossAggMode):
    mesh = make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])
    model = from_pretrained(checkpoint, mesh=mesh)
    cfg = TrainerConfig(
        optimizer=OptimizerConfig(**OPT, grad_clip=CLIP),
        loss=LossConfig(kl_coef=0.0, entropy_coef=0.0, agg_mode=mode),
        micro_batch_size=MICRO,
    )
    rewards = np.array([r for _, r in ROWS], np.float32)
    adv = np.asarray(grpo_outcome_advantages(rewards, GROUP, eps=1e-4))  # TRL's std floor
    batch = make_batch(_prompt_rows(), [ids for ids, _ in ROWS], advantages=list(adv),
                       prompt_bucket=1, response_bucket=1)  # fmt: skip
    # Our micro-batch m holds rows m, m + M, ... (interleaved); TRL's holds a contiguous slice.
    # Reorder so that both cut the batch into the same micro-batches (bnpo depends on it).
    m = len(ROWS) // MICRO
    batch = batch.select(np.array([(j % m) * MICRO + j // m for j in range(len(ROWS))]))
    trainer = Trainer(model, cfg, mesh=mesh)
    metrics, _ = trainer.step(batch)
    params = {name: np.asarray(v) for name, v in iter_hf_tensors(model)}
    return metrics["loss"], metrics["grad_norm"], params


@pytest.mark.parametrize("loss_type", sorted(PAIRS))
def test_one_grpo_update_equals_trl(checkpoint, loss_type, tmp_path, monkeypatch):
    loss_ref, norm_ref, params_ref = trl_update(checkpoint, loss_type, tmp_path, monkeypatch)
    loss, norm, params = our_update(checkpoint, PAIRS[loss_type])
    before = {n: p.detach().numpy() for n, p in load_hf(checkpoint).named_parameters()}
    assert abs(loss - loss_ref) <= 1e-6 + 1e-5 * abs(loss_ref), (loss, loss_ref)
    assert norm == pytest.approx(norm_ref, rel=1e-5), (norm, norm_ref)
    assert set(params) == set(params_ref) - {"lm_head.weight"}  # tied: one tensor
    for name, ref in params_ref.items():
        if name == "lm_head.weight":
            continue
        step_ref = ref - before[name]
        assert np.abs(step_ref).max() > 1e-4, name  # every tensor moved
        np.testing.assert_allclose(params[name] - before[name], step_ref, atol=2e-6, err_msg=name)
