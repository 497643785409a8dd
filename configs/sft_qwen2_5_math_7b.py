"""The generator's SFT stage (TANGO_SPEC §5): Qwen2.5-Math-7B on step-by-step solutions.

    python -m tango_jax.train --config configs/sft_qwen2_5_math_7b.py \\
        --config.sft.generator.data_path=data/eurus2_sft_llama70b.jsonl

The data: Eurus-2-SFT-Data math prompts answered in the Tango format by Llama-3.1-70B-Instruct
(T=0.1, top-p 0.5, unfiltered), one JSON line {"question": ..., "response": ...} each; the
prompt is the generator template around the question. Full-parameter SFT, lr 5e-6 cosine with
10% warm-up, AdamW (0.9, 0.95), batch 64, 800 steps (the paper; the released script runs 2
epochs, §10.14). No RL steps (total_steps = 0): the run writes the SFT checkpoint to
run_dir/sft/generator (an HF checkpoint, the generator path of the Tango configs), evaluates it
greedily on data.eval_path, and exports it to run_dir/hf/generator. For Llama (Table 4), add
--config.generator.model.path=models/Llama-3.1-8B-Instruct.
"""

from tango_jax.config.run import sibling_config


def get_config():
    c = sibling_config(__file__, "tango_qwen2_5_math_7b").get_config()
    c.name = "sft_qwen2_5_math_7b"
    c.run_dir = "runs/sft_qwen2_5_math_7b"
    c.generator.model.path = "models/Qwen2.5-Math-7B"
    c.generator.sampler.backend = "jax"  # only the greedy evaluation samples
    c.generator.max_prompt_len = 1024  # official SFT prompt limit; max_length 4096 in all
    c.verifier.enable = False
    c.verifier.trainable = False
    c.algorithm.step_rewards = False
    c.schedule.total_steps = 0
    c.schedule.verifier_warmup_steps = 0
    # The paper's SFT stage is the default (800 steps of 64, lr 5e-6 cosine, micro-batch 2 per
    # GPU x 8 GPUs = 16).
    c.sft.generator.enable = True
    c.sft.generator.data_path = "data/eurus2_sft_llama70b.jsonl"
    return c
