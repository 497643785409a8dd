"""GRPO on a real model on a 2-core CPU: SmolLM2-135M-Instruct learns small additions, with the
hyperparameters of TRL's GRPOTrainer twin run (scripts/bench/compare_trl/trl_grpo.py).

    python -m tango_jax.train --config configs/smollm2_addition.py:grpo     # 30 steps, ~30 min
    python -m tango_jax.train --config configs/smollm2_addition.py:grpo --config.seed=1
    python -m tango_jax.train --config configs/smollm2_addition.py:tango    # + a verifier

The task (tango_jax/data/addition.py): "What is 7 + 5? Answer with just the number." as the
user turn of the model's chat template, rewarded 1 when the reply's last integer is the sum
(`last_integer_reward`, which the TRL run imports too); a and b in 2..9, 48 training questions,
16 held out (a = 3 or 7). Zero-shot at T = 1 the model is right on 0.24 of its replies, and 27%
of them run past 64 tokens (docs/real_model.md, "GRPO against TRL").

Every hyperparameter is set to what the TRL run uses, which is TRL's default where that exists
in both trainers (docs/real_model.md has the table): 8 prompts x 8 samples = 64 rollouts a step,
T = 1, top-p 1, no top-k, 64 new tokens, AdamW (0.9, 0.999, eps 1e-8, no weight decay: HF's
Trainer default) at a constant 1e-5 (TRL's schedule set to constant), gradient clipping at 1, no
KL (β = 0) and no entropy term, one update per batch, the loss a token mean over the whole batch
(TRL's default `loss_type="dapo"`), advantages (r - mean) / (std + 1e-4) per group (TRL's
`scale_rewards="group"`, its 1e-4 floor), truncated replies kept in the loss. Held-out accuracy,
greedy and sampled at T = 1 (8 samples per problem), every 5 steps.

Variants: grpo (no verifier) | tango: SmolLM2 also as the verifier. The generator is the GRPO
run's, unchanged (same start, prompt and settings): it answers in its own words, without
<step> tags, so each line of a reply is a step (`data.step_split = "lines"`), shown to the
verifier as one <step> per line, with its step reward at the line's last token. The verifier
first gets a short format SFT (tango_jax/assets/addition/verifier_sft.jsonl: replies of the
shapes the model writes, on the training questions, in the Tango verification format that
configs/smollm2_arith.py's SFT teaches), then 2 warm-up updates, then [G, G, G, V] for the same
30 generator steps (10 verifier updates). Every rollout is logged (for the step labels'
informedness, scripts/bench/compare_trl/tango_addition.py).
Every field is documented where its dataclass is defined (tango_jax/config/run.py).
"""

from tango_jax.config.run import base_config

VARIANTS = ("grpo", "tango")
MODEL = "models/SmolLM2-135M-Instruct"  # relative to the repository root, where runs start
ASSETS = "tango_jax/assets/addition"  # tango_jax/data/addition.py writes these
REWARD = "tango_jax.data.addition:last_integer_reward"
PROMPTS_PER_STEP = 8
GROUP = 8  # TRL's default num_generations
# The seed-0 pilot of 60 steps had its training reward at 0.97 and held-out sampled accuracy at
# 0.95 by step 20 (from 0.24 and 0.36): 30 steps show the whole rise and keep a run inside 45
# minutes on 2 cores, evaluations every 5 steps included (docs/real_model.md).
STEPS = 30
VERIFIER_WARMUP = 2  # verifier updates on the start generator's rollouts (paper: 40)
VERIFIER_TOKENS = 128  # a verification of a reply of up to ~5 lines


def get_config(variant: str = "grpo"):
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose one of {VARIANTS}.")
    c = base_config()
    c.scorer_workers = 1  # the reward is a regex; a second process only competes for the cores
    c.drift_all_batches = False
    c.eval.every_generator_steps = 5  # the rise is in the first 10-15 steps
    c.eval.after_verifier_warmup = False
    c.eval.sampled = True  # held-out accuracy at the training temperature (what RL optimises)
    c.eval.sampled_n = 8  # 16 held-out questions x 8: 128 sampled answers
    c.eval.process_bench_size = 0  # a synthetic-task measurement
    c.checkpoint.every_steps = 0
    c.checkpoint.at_end = False  # the HF export at the end is what is kept (not Adam's state)
    c.data.source = "jsonl"
    c.data.train_path = f"{ASSETS}/train.jsonl"
    c.data.eval_path = f"{ASSETS}/eval.jsonl"
    c.data.eval_size = 16  # all of it
    c.data.prompts_per_step = PROMPTS_PER_STEP
    c.data.reward = REWARD
    c.data.prompt_style = "compact"  # the verifier's (tango); the generator's is the file below
    c.data.template_files.generator_train = f"{ASSETS}/generator_prompt.json"  # the question
    c.algorithm.eps = 1e-4  # TRL's floor under the group std (ours defaults to 1e-6)
    c.schedule.total_steps = STEPS
    c.schedule.verifier_warmup_steps = 0
    g = c.generator
    g.model.path = MODEL
    g.chat_template = True
    g.dtype = "float32"  # a CPU has no fast bf16 (TRL's bf16 default is switched off too)
    g.remat = False  # 135M parameters, short sequences: activations fit
    g.max_prompt_len = 64  # every prompt is 45 tokens, the chat template's system turn included
    g.rollout.n = GROUP
    g.rollout.max_tokens = 64
    # Train batches pad replies to a multiple of 16 (at most four compiled step shapes): the
    # replies shorten as the model learns to answer with the number, and the step with them.
    g.response_bucket = 16
    g.sampler.prompt_bucket = 16  # 45 -> 48
    g.sampler.max_rows = 64
    opt = g.trainer.optimizer
    opt.learning_rate = 1e-5
    opt.weight_decay = 0.0  # HF Trainer's default; it also exempts norms and biases from decay
    loss = g.trainer.loss
    loss.kl_coef = 0.0  # TRL's beta = 0: no reference model
    loss.entropy_coef = 0.0
    loss.agg_mode = "token-mean"  # TRL's loss_type="dapo"
    g.trainer.micro_batch_size = 16  # TRL's per_device_train_batch_size (memory only)
    c.verifier.model.path = MODEL  # checked even when disabled
    if variant == "grpo":
        c.verifier.enable = False
        c.verifier.trainable = False
        c.algorithm.step_rewards = False
    else:
        c.data.step_split = "lines"  # the model writes no <step> tags
        c.log_rollouts.every_steps = 1  # every rollout and its step labels, for the analysis
        c.log_rollouts.max_rows = PROMPTS_PER_STEP * GROUP
        v = c.verifier
        v.chat_template = True
        v.dtype = "float32"
        v.remat = False
        v.rollout.n = 2  # verifications per solution in verifier updates (paper 5: CPU time)
        v.rollout.max_tokens = VERIFIER_TOKENS
        v.max_prompt_len = 256  # a 64-token reply of many lines, tagged, in the chat template
        v.response_bucket = VERIFIER_TOKENS
        v.sampler.prompt_bucket = 32
        v.sampler.max_rows = 64
        v.trainer.optimizer.learning_rate = 1e-5
        v.trainer.optimizer.weight_decay = 0.0
        v.trainer.loss.kl_coef = 0.0
        v.trainer.loss.entropy_coef = 0.0
        v.trainer.micro_batch_size = 16
        sft = c.sft.verifier
        sft.enable = True
        sft.data_path = f"{ASSETS}/verifier_sft.jsonl"
        sft.steps = 16
        sft.batch_size = 8
        sft.trainer.optimizer.learning_rate = 1e-4  # smollm2_arith's format SFT
        sft.trainer.micro_batch_size = 8
        c.schedule.verifier_warmup_steps = VERIFIER_WARMUP
        # [G, G, G, V] after the warm-up: the same 30 generator steps as the GRPO runs
        c.schedule.total_steps = VERIFIER_WARMUP + STEPS * 4 // 3
    c.name = f"smollm2_addition_{variant}"
    c.run_dir = f"runs/smollm2_addition_{variant}"
    return c
