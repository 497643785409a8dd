"""Tiny Tango on synthetic arithmetic: the default run, end to end on a 2-core CPU.

    python -m tango_jax.train --config configs/tiny_arith.py             # Tango (~9 min)
    python -m tango_jax.train --config configs/tiny_arith.py --config.seed=1 \\
        --config.run_dir=runs/tiny_arith_s1
    python -m tango_jax.train --config configs/tiny_arith.py:grpo        # rule-reward baseline
    python -m tango_jax.train --config configs/tiny_arith.py:fixed_verifier
    python -m tango_jax.train --config configs/tiny_arith.py:tango,scratch   # SFT in the run too
    python -m tango_jax.train --config configs/tiny_arith.py:lora        # Tango, LoRA on both

The config string is VARIANT[,scratch]. By default RL starts from the SFT checkpoints shipped
in tango_jax/assets/tiny_arith_sft/ (2-layer Qwen2-style models, head size 64, 0.5M parameters,
the project's 512-token tokenizer), which `python scripts/assets/make_tiny_sft.py` reproduces from
random init (~26 min on the 2-core CPU: too long for the main job, which must take minutes).
`,scratch` runs the SFT inside the run instead, from random init: the generator's 1200 steps on
step-by-step solutions (a fifth of them with an arithmetic slip), then the first of the
verifier's three SFT phases (the shipped verifier has all three; make_tiny_sft.py runs the
second and the third, a short calibration).

The verifier's SFT carries outcome labels only (docs/miniature.md says why each choice): the
verdict of each transcript is labelled, the step judgments get no loss (`unlabelled`), each step
analysis writes the value as written next to the recomputed one (`compare`), and most examples
are one-equation fact checks from other training problems in the same layout (arithmetic
knowledge, never a step label of a wrong solution). Then RL: 40 verifier warm-up steps, the
[G, G, G, V] cycle (the verifier rewarded for a verdict its step judgments agree with, classes
balanced in full), held-out evaluations (generator accuracy greedy and sampled, the verifier's
ProcessBench-style step F1). The structure is the paper's; sizes and learning rates are a CPU's
(commented where they differ from configs/tango_qwen2_5_math_7b.py). Every field is documented
where its dataclass is defined (tango_jax/config/run.py lists them); this file sets only what
differs from the paper's defaults. Results over seeds: `python -m tango_jax.study`, docs/results.md,
docs/miniature.md.
"""

from pathlib import Path

import tango_jax
from tango_jax.config.run import base_config
from tango_jax.config.tiny import tiny_role

VARIANTS = ("tango", "grpo", "fixed_verifier", "lora")
STARTS = ("", "scratch")
# The SFT checkpoints RL starts from by default (scripts/assets/make_tiny_sft.py writes them).
SFT_ASSETS = Path(tango_jax.__file__).resolve().parent / "assets" / "tiny_arith_sft"


def get_config(arg: str = "tango"):
    """arg: VARIANT[,scratch]. VARIANT: tango (default) | grpo (rule-based reward only, no
    verifier; the same number of generator steps) | fixed_verifier (the SFT verifier, never
    updated) | lora (Tango with LoRA adapters on both roles, docs/lora.md). `,scratch`: random
    init and SFT inside the run instead of the shipped SFT."""
    variant, _, start = arg.partition(",")
    if variant not in VARIANTS:
        raise ValueError(
            f"unknown variant {variant!r} in config string {arg!r}; choose one of {VARIANTS}."
        )
    if start not in STARTS:
        raise ValueError(
            f"unknown start {start!r} in config string {arg!r}: write VARIANT or VARIANT,scratch."
        )
    c = base_config()
    suffix = "" if variant == "tango" else f"_{variant}"
    c.name = f"tiny_arith{suffix}"
    c.run_dir = f"runs/tiny_arith{suffix}"
    c.scorer_workers = 2
    c.eval.every_generator_steps = 12
    c.eval.sampled = True  # held-out accuracy at T=1 too (what RL optimises)
    c.eval.sampled_n = 4  # 4 samples per problem: 512 in all, standard error ~0.02
    c.checkpoint.every_steps = 20
    c.checkpoint.keep = 2
    # Generator: 4 samples per prompt (paper 5), ~62-token solutions. Verifier: 4 verifications
    # per solution in verifier steps, ~140-token transcripts.
    # lr far above the paper's 1e-6: a 0.5M-parameter model, a few dozen updates. Both roles at
    # 1e-4. The verifier's lr was chosen on seed 0 only (docs/miniature.md).
    for name, seed, max_tokens, max_prompt_len in (
        ("generator", 1, 96, 256),
        ("verifier", 2, 160, 384),
    ):
        sft_assets = None if start == "scratch" else SFT_ASSETS
        tiny_role(c, name, seed=seed, max_tokens=max_tokens, max_prompt_len=max_prompt_len,
                  sft_assets=sft_assets, learning_rate=1e-4)  # fmt: skip
    # 40 verifier warm-up steps (the paper's number), then 48 steps of [G, G, G, V]:
    # 36 G and 52 V steps in all.
    c.schedule.total_steps = 88
    c.schedule.verifier_warmup_steps = 40
    c.data.prompts_per_step = 32
    c.data.eval_size = 128
    c.data.prompt_style = "compact"
    # The verifier's SFT data (outcome labels only; what the shipped verifier was trained on).
    c.data.arith.verifier_sft_labels = "unlabelled"
    c.data.arith.verifier_sft_analysis = "compare"
    c.data.arith.verifier_sft_facts = 0.5  # phase 2 (make_tiny_sft.py): 0.75
    # The verifier's RL (seed 0, 40 verifier-only steps from the shipped SFT; docs/miniature.md,
    # History, 2026-11-25): its reward counts the verdict only when some step judgment is INCORRECT
    # exactly when the verdict is (still an outcome reward), and its classes are weighted by
    # 1 / frequency (the official YAML's default) instead of 1 / sqrt: step F1 0.45 -> 0.49,
    # AUROC of the first error's P(INCORRECT) 0.70 -> 0.79. With the plain verdict reward the
    # F1 stays (0.44) and the AUROC barely moves (0.73); with consistency but sqrt weights the
    # verifier drifts to passing every solution (the generator's are ~85% right): F1 0.17.
    c.algorithm.verifier_consistent_verdict = True
    c.algorithm.class_reweight = "inverse"
    # Format SFT of both models (the paper SFTs only the generator; its verifier is a 7B base
    # model that can follow the format and check arithmetic, which a random tiny model cannot).
    for stage, steps in ((c.sft.generator, 1200), (c.sft.verifier, 2000)):
        stage.enable = start == "scratch"
        stage.steps = steps
        stage.batch_size = 32
        stage.trainer.optimizer.learning_rate = 3e-3
        stage.trainer.micro_batch_size = 8
    c.sft.verifier.num_examples = 64_000  # every example seen about once
    # from scratch, the verifier's SFT starts from the SFT generator: it can do the arithmetic
    c.sft.verifier.start_from_generator = start == "scratch"
    if variant in ("grpo", "fixed_verifier"):  # same generator steps (36), no verifier updates
        c.verifier.trainable = False
        c.schedule.total_steps = 36
        c.schedule.verifier_warmup_steps = 0
    if variant == "lora":  # Tango; both roles train adapters only, the SFT models frozen
        for role in (c.generator, c.verifier):
            # rank 8 on all seven projections of the 128-wide model (PEFT's usual r 8, alpha
            # 16), lr 10x full fine-tuning's (the common LoRA rule; not tuned here)
            role.lora.rank = 8
            role.lora.alpha = 16.0
            role.trainer.optimizer.learning_rate = 1e-3
    if variant == "grpo":
        c.verifier.enable = False
        c.algorithm.step_rewards = False
        c.sft.verifier.enable = False
    return c
