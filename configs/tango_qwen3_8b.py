"""Tango with Qwen3-8B in both roles: the paper's recipe (TANGO_SPEC §6) on today's Qwen.

The roles mirror the paper's Qwen setting: the generator starts from an SFT of the base model
(configs/sft_qwen2_5_math_7b.py with --config.generator.model.path=models/Qwen3-8B-Base
--config.run_dir=runs/sft_qwen3_8b, saved as models/Qwen3-8B-Base-SFT), the verifier from the
base model itself, no SFT. Everything else (schedule, losses, rewards, 256 prompts x 5
rollouts, micro-batches, vLLM with TP 2 per replica) is configs/tango_qwen2_5_math_7b.py, whose
docstring shows how to launch the vLLM servers (use --model models/Qwen3-8B-Base-SFT and
models/Qwen3-8B-Base there).

Prompts are plain text (chat_template=False, the default), as in the official code: the
generator prompt asks for `<think><step>...</step></think><answer>\\boxed{}</answer>`, and a
Qwen3 tokenizer reads `<think>` / `</think>` as the same single tokens its thinking mode uses,
so the format and the model's native thinking block coincide. For the post-trained Qwen3-8B
(hybrid thinking) see docs/models.md, "Qwen3 and thinking mode": with chat_template=True the
template's default (thinking on) fits the generator's format but not the verifier's (whose
output must start with <step_verification>), so keep the verifier on plain text.

Memory (`python -m tango_jax.plan_memory --config configs/tango_qwen3_8b.py --layers 4,8`,
docs/models.md "Qwen3-8B memory plan", XLA's CPU plan): on one node of 8 x 80 GB the
generator step needs ~75 GB per device and the verifier step ~79 GB even at 1 row per GPU,
so train on H200s, or on two nodes (16 GPUs, multi-process: add
--config.generator.trainer.micro_batch_size=32 --config.verifier.trainer.micro_batch_size=16,
~62 GB per device).

    python -m tango_jax.train --config configs/tango_qwen3_8b.py \\
        --config.data.train_path=data/eurus2/train.parquet \\
        --config.data.eval_path=data/math500/test.jsonl \\
        --config.generator.sampler.vllm.urls='("http://node1:8100","http://node1:8101")' \\
        --config.verifier.sampler.vllm.urls='("http://node2:8100","http://node2:8101")' \\
        --config.generator.sampler.vllm.api_key=$TANGO_VLLM_KEY \\
        --config.verifier.sampler.vllm.api_key=$TANGO_VLLM_KEY

Models are local paths (`huggingface-cli download Qwen/Qwen3-8B-Base --local-dir
models/Qwen3-8B-Base` on a machine with internet).
"""

from tango_jax.config.run import sibling_config


def get_config():
    c = sibling_config(__file__, "tango_qwen2_5_math_7b").get_config()
    c.name = "tango_qwen3_8b"
    c.run_dir = "runs/tango_qwen3_8b"
    c.generator.model.path = "models/Qwen3-8B-Base-SFT"
    c.verifier.model.path = "models/Qwen3-8B-Base"
    # vLLM's max_model_len defaults to each role's prompt + response budget (4096 / 8192),
    # which Qwen3's 40,960 positions hold.
    return c
