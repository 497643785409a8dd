"""The paper's main setting (TANGO_SPEC §6): TANGO-Qwen-7B, GRPO w/ Tango.

Generator: Qwen2.5-Math-7B after SFT (configs/sft_qwen2_5_math_7b.py); verifier: Qwen2.5-7B
base, no SFT. 40 verifier warm-up steps, then [G, G, G, V]; 256 prompts per step, 5 rollouts
(generator, T=1, <= 2048 tokens) or 5 verifications (verifier, <= 4096 tokens); AdamW lr 1e-6
constant; PPO-clip 0.2 (inert at one step per batch), k3 KL 0.001, entropy 0.001; α from 0.1 to
1e-3 exponentially; verifier rewards 1[verdict] + 0.8·format with sqrt-inverse class weights.
The paper's default is 200 generator steps (Table 1; total_steps ≈ 307); the released script
(and Table 2) uses 440 global steps = 300 generator steps, as here.

Hardware (paper: 4 x 8 A100, colocated). tango_jax keeps training and sampling apart: one
8-GPU node trains both models (FSDP over 8), and vLLM servers on the other nodes sample, e.g.
per role 4 replicas x TP 2 on one 8-GPU node:

    # on each sampling node: 4 replicas x TP 2 over its 8 GPUs (prints one URL per replica)
    TANGO_VLLM_KEY=... python -m tango_jax.launch_vllm --model models/Qwen2.5-Math-7B-SFT \
        --devices 0,1,2,3,4,5,6,7 --tensor-parallel-size 2 --backend nccl --dtype bfloat16 \
        --max-model-len 4096 --host 0.0.0.0 --api-key-env TANGO_VLLM_KEY --base-port 8100
    # on the training node:
    python -m tango_jax.train --config configs/tango_qwen2_5_math_7b.py \
        --config.generator.model.path=models/Qwen2.5-Math-7B-SFT \
        --config.verifier.model.path=models/Qwen2.5-7B \
        --config.data.train_path=data/eurus2/train.parquet \
        --config.data.eval_path=data/math500/test.jsonl \
        --config.generator.sampler.vllm.urls='("http://node1:8100","http://node1:8101")' \
        --config.generator.sampler.vllm.api_key_env=TANGO_VLLM_KEY \
        --config.generator.sampler.vllm.sync.master_address=<this node's address> ...

(or set sampler.vllm.replicas / devices to let the trainer start servers on its own node's
spare GPUs). Models and data are local paths: download them beforehand on a machine with
internet (`huggingface-cli download Qwen/Qwen2.5-7B --local-dir models/Qwen2.5-7B`,
`huggingface-cli download --repo-type dataset PRIME-RL/Eurus-2-RL-Data --local-dir ...`).
Everything not set below is the paper's default (tango_jax/config/run.py and the dataclasses
it embeds, one comment per field).

Variants (`configs/tango_qwen2_5_math_7b.py:VARIANT`): "" (the above, full fine-tuning) and
"lora": both roles train rank-64 LoRA adapters (alpha 128) on all seven projections over a
bfloat16 base, lr 1e-5; memory plans on one GPU and one node in docs/scaling.md ("LoRA: the
paper's 7B + 7B on one GPU / one node").
"""

from tango_jax.config.run import base_config

VARIANTS = ("", "lora")


def get_config(variant: str = ""):
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose one of {VARIANTS}.")
    c = base_config()
    c.name = "tango_qwen2_5_math_7b"
    c.run_dir = "runs/tango_qwen2_5_math_7b"
    # Generator: the SFT checkpoint (TANGO_SPEC §5), 2048 new tokens; verifier: the base model,
    # no SFT (paper §4), 4096 new tokens on prompts right-truncated at 4096 (the defaults).
    c.generator.model.path = "models/Qwen2.5-Math-7B-SFT"
    c.verifier.model.path = "models/Qwen2.5-7B"
    for role in (c.generator, c.verifier):
        role.sampler.backend = "vllm"
        role.sampler.prompt_bucket = 256
        role.sampler.vllm.server.tensor_parallel_size = 2  # the paper's TP 2 per replica
        role.sampler.vllm.server.gpu_memory_utilization = 0.6
    c.data.source = "eurus2"
    c.data.train_path = "data/eurus2/train.parquet"
    c.data.eval_path = "data/math500/test.jsonl"
    c.data.question_field = "problem"  # MATH500's field names
    # Micro-batches (rows over the 8 training GPUs; the accumulation is exact, so these set
    # memory and speed, not results), chosen from `python -m tango_jax.plan_memory --config
    # configs/tango_qwen2_5_math_7b.py` to keep >= 10% of an 80 GB GPU free (docs/scaling.md):
    # 2 rows per GPU for the generator, 1 for the verifier's 8192-token sequences (the
    # paper's 4 per GPU would need ~150 GB per device with this model's materialised attention
    # scores).
    c.generator.trainer.micro_batch_size = 16
    c.verifier.trainer.micro_batch_size = 8
    # Drift of the untrained rollout batches would cost a verifier forward over 1280 x 8K
    # tokens per generator step; the trained batches' drift is logged regardless.
    c.drift_all_batches = False
    if variant == "lora":
        c.name = "tango_qwen2_5_math_7b_lora"
        c.run_dir = "runs/tango_qwen2_5_math_7b_lora"
        for role in (c.generator, c.verifier):
            # Rank 64 on all seven projections ("all-linear"): the middle of the 32-128 that
            # LoRA recipes for RL on 7B models commonly use (RL's updates want more rank than
            # the r 8-16 of SFT recipes); alpha = 2r, the common PEFT choice. Not tuned.
            # ~160M adapter parameters per 7B model.
            role.lora.rank = 64
            role.lora.alpha = 128.0
            # The frozen base in bfloat16 (7.6 GB per model instead of 15.2); adapters, their
            # AdamW state and the KL reference (the initial adapters) stay float32.
            role.param_dtype = "bfloat16"
            # 10x full fine-tuning's 1e-6, the usual LoRA rule (as configs/tiny_arith.py:lora);
            # not tuned.
            role.trainer.optimizer.learning_rate = 1e-5
    return c
