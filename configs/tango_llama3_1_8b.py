"""Table 4: Llama-3.1-8B-Instruct in both roles, GRPO w/ Tango (TANGO_SPEC §7, App. E).

The generator starts from its SFT (configs/sft_qwen2_5_math_7b.py with
--config.generator.model.path=models/Llama-3.1-8B-Instruct); the verifier from
Llama-3.1-8B-Instruct itself. Everything else as configs/tango_qwen2_5_math_7b.py, whose
docstring shows how to launch the vLLM servers. Memory (`python -m tango_jax.plan_memory
--config configs/tango_llama3_1_8b.py`, docs/scaling.md): on one 8-GPU training node the
verifier step needs ~92 GB per device even at 1 row per GPU, so train on H200s (141 GB) or
expect to run out of memory on 80 GB GPUs.

    python -m tango_jax.train --config configs/tango_llama3_1_8b.py \\
        --config.data.train_path=data/eurus2/train.parquet \\
        --config.data.eval_path=data/math500/test.jsonl
"""

from tango_jax.config.run import sibling_config


def get_config():
    c = sibling_config(__file__, "tango_qwen2_5_math_7b").get_config()
    c.name = "tango_llama3_1_8b"
    c.run_dir = "runs/tango_llama3_1_8b"
    c.generator.model.path = "models/Llama-3.1-8B-Instruct-SFT"
    c.verifier.model.path = "models/Llama-3.1-8B-Instruct"
    # vLLM's max_model_len defaults to each role's prompt + response budget (4096 / 8192),
    # which Llama-3.1's 128K context holds.
    return c
