"""The run config's per-role sections (`RunConfig.generator` and `RunConfig.verifier`): where a
model's weights come from, its numerics, its sampler and rollouts, and its RL trainer.

Part of the single schema with tango_jax/config/run.py (which embeds `RoleConfig`); each field is
defined once, here, with its comment and default.
"""

from __future__ import annotations

import dataclasses
import enum
import math

from tango_jax.checkpoint.divergence import GuardAction
from tango_jax.models.config import ATTENTION_KERNELS, DECODE_ATTENTION, dtype_from_name
from tango_jax.models.lora import LoraConfig
from tango_jax.models.presets import PRESETS
from tango_jax.rl.train_step import TrainerConfig
from tango_jax.rollout.vllm.config import VLLMConfig
from tango_jax.schema import (
    Rule,
    above,
    apply_derived,
    at_least,
    check_fields,
    derived,
    one_of,
    within,
)


class SamplerBackend(enum.Enum):
    JAX = "jax"  # embedded sampler on the trainer's mesh (no weight transfer)
    VLLM = "vllm"  # a separate vLLM server per model, weights broadcast after each update


@dataclasses.dataclass(frozen=True)
class ModelSource:
    """Where a role's initial weights come from (set exactly one of path and preset)."""

    path: str = ""  # HF checkpoint directory (config.json, safetensors, tokenizer)
    # Instead of a path: a preset initialised randomly (tiny configs), written to
    # run_dir/initial/<role> as an HF checkpoint with the tiny tokenizer, so vLLM can serve it too
    preset: str = ""
    init_seed: int = 0  # the preset's initialisation

    def __post_init__(self):
        if self.preset:  # a name typo fails here, not after the other role's SFT
            check_fields(self, {"preset": one_of(sorted(PRESETS), "; or set path instead")})


@dataclasses.dataclass(frozen=True)
class SamplerSettings:
    backend: SamplerBackend = SamplerBackend.JAX  # jax | vllm
    max_rows: int = 256  # JAX sampler: rows per compiled call
    prompt_bucket: int = 64  # JAX sampler and train batches: prompt widths rounded up to this
    # JAX sampler: 0 = every decode step attends over the whole preallocated cache; N > 0 =
    # decode in chunks of N, 2N, 4N, ... steps, each attending over the filled prefix only
    # (same tokens; rollout/jax_sampler.py, A/B on a GPU with scripts/bench/gpu_check.py)
    decode_block: int = 0
    # JAX sampler: prefill each distinct prompt once (its n samples share its KV cache) and the
    # batch's common token prefix once, and drop finished rows from the decode; False = the
    # plain sampler, which computes every row in full (the same tokens; rollout/jax_sampler.py,
    # docs/benchmarks.md "Prefix sharing in the JAX sampler")
    share_prefix: bool = True
    vllm: VLLMConfig = VLLMConfig()  # backend = vllm: the servers (rollout/vllm/config.py)

    def __post_init__(self):
        check_fields(
            self,
            {
                "max_rows": at_least(1),
                "prompt_bucket": at_least(1),
                "decode_block": at_least(0, " (0: attend over the whole cache)"),
            },
        )


@dataclasses.dataclass(frozen=True)
class RolloutSettings:
    """Sampling for training rollouts (evaluation is always greedy, n = 1)."""

    n: int = 5  # samples per prompt (generator) / verifications per solution (verifier)
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1  # -1: off
    max_tokens: int = 2048
    # DAPO's soft overlong punishment (Yu et al. 2025, arXiv 2503.14476, Eq. 13; rl/overlong.py):
    # a completion longer than max_tokens - overlong_buffer tokens gets a reward term falling
    # linearly to -overlong_penalty at max_tokens (DAPO: 4096 of 20480, penalty 1). 0: off.
    overlong_buffer: int = 0
    overlong_penalty: float = 1.0  # what the soft penalty subtracts at max_tokens (DAPO: 1)
    # DAPO's dynamic sampling (Yu et al. 2025, arXiv 2503.14476, Sec. 3.2; rl/dynamic_sampling.py,
    # run/dynamic_sampling.py): groups whose rewards are all equal (no advantage, no gradient)
    # are dropped and the next prompt batches sampled until the step's batch holds
    # data.prompts_per_step groups that are not. A group is the n solutions of one prompt (the
    # generator) or the n judgments of one solution (the verifier step). Enough groups: the
    # first ones are kept, the rest thrown away (veRL's trim); the round cap hit first: topped
    # up with the earliest equal-reward groups, so the batch keeps its size. Every prompt
    # sampled, dropped ones included, advances the data position (exact resume).
    # Metrics `<role>/dynamic_sampling/{zero_var_groups,rounds,padded_groups}`, logged off too.
    dynamic_sampling: bool = False
    # Sampling rounds per step, the first included (veRL's max_num_gen_batches; its DAPO
    # recipe: 10). Each round is a whole batch of data.prompts_per_step prompts.
    dynamic_sampling_max_rounds: int = 4

    def __post_init__(self):
        ds = self.dynamic_sampling  # needs a second round and groups of 2+ samples
        check_fields(
            self,
            {
                "dynamic_sampling_max_rounds": at_least(
                    2,
                    " with dynamic_sampling=True (the first round is the batch itself, so 1 "
                    "never samples more); raise it, or set dynamic_sampling=False",
                )
                if ds
                else at_least(1),
                "overlong_buffer": within(
                    0, self.max_tokens, why=" (max_tokens; 0 turns the soft overlong penalty off)"
                ),
                "overlong_penalty": within(0.0, math.inf, open_hi=True),
                "n": at_least(
                    2,
                    " with dynamic_sampling=True (a group of one sample always has equal "
                    "rewards); raise n, or set dynamic_sampling=False",
                )
                if ds
                else at_least(1),
                "temperature": above(0, " for training rollouts (evaluation is greedy anyway)"),
                "top_p": within(0.0, 1.0, open_lo=True, why="; 1.0 turns nucleus sampling off"),
                "top_k": Rule(lambda k: k == -1 or k >= 1, "must be -1 (off) or >= 1."),
                "max_tokens": at_least(1, ": a rollout needs room for a response"),
            },
        )


@dataclasses.dataclass(frozen=True)
class RoleConfig:
    """One model (generator or verifier): weights, numerics, sampler, rollouts, trainer."""

    model: ModelSource = ModelSource()
    dtype: str = "bfloat16"  # compute dtype (float32 on CPUs)
    param_dtype: str = "float32"  # master weights
    remat: bool = True  # rematerialise each layer in the backward pass
    # full-sequence attention kernel: "auto" (cuDNN flash attention on NVIDIA GPUs in bf16,
    # else XLA einsums), "xla", "xla_blocked" (causal einsums 64 queries at a time; 3-10%
    # faster train steps on CPUs) or "cudnn" (see tango_jax.models.ModelConfig.attention)
    attention: str = "auto"
    # how the sampler's one-token decode steps attend over the KV cache: "auto" ("sum" on
    # CPUs, else "dot"), "dot" (batched matrix products) or "sum" (products summed in one
    # fused loop; faster on CPUs) (see tango_jax.models.ModelConfig.decode_attention)
    decode_attention: str = "auto"
    # Fused layer variants, same numbers up to float rounding, off until a GPU measurement says
    # they help (tango_jax.models.ModelConfig documents each; scripts/bench/gpu_check.py A/Bs
    # them): RMSNorm with a hand-written float32 backward, SwiGLU's gate and up as one matmul,
    # rope's cos/sin once per forward, and padding passed to attention as per-row lengths.
    fused_norm: bool = False
    fused_mlp: bool = False
    fused_rope: bool = False
    padding_as_lengths: bool = False
    enable: bool = True  # verifier only: False = plain rule-reward RL (no verifier at all)
    # False: the model is never updated (the verifier: the fixed-verifier ablation; the
    # generator: the fixed-generator ablation, every step a verifier step)
    trainable: bool = True
    # Prompts longer than this: generator prompts are filtered out when the data loads,
    # verifier prompts right-truncated (the official verifier).
    max_prompt_len: int = 2048
    # Every prompt of this role (RL, evaluation, its SFT stage) as the user turn of its
    # tokenizer's chat template, with the assistant cue (templates.chat_prompt); the response
    # ends with the tokenizer's EOS, for a chat model the end-of-turn token. False: plain text,
    # as the official code (its models are base or math models prompted in plain text).
    chat_template: bool = False
    # Training batches pad responses to a multiple of this (one compiled train step per
    # distinct width): the rollout's max_tokens gives a single program, smaller values less
    # padding compute.
    response_bucket: int = 256
    sampler: SamplerSettings = SamplerSettings()
    rollout: RolloutSettings = RolloutSettings()
    # LoRA in RL (models/lora.py; docs/lora.md): rank > 0 trains adapters on the named
    # projections only, the base weights frozen (param_dtype may then be bfloat16) and the
    # optimizer state adapter-sized; the SFT stage stays full fine-tuning. rank 0: off.
    lora: LoraConfig = LoraConfig()
    eval_max_tokens: int = 0  # greedy evaluation budget; 0: rollout.max_tokens
    # The verifier's only (run/verifier_health.py): what a verifier collapsed to one verdict
    # does to the run, pooled over its last 3 updates (>= 95% of its verdicts one class while
    # right and wrong solutions are each >= 10%): warn (one warning with the numbers) | stop
    # (save the step, exit with status 76) | off.
    collapse_guard: GuardAction = GuardAction.WARN
    trainer: TrainerConfig = dataclasses.field(
        default=TrainerConfig(),
        metadata=derived(
            **{
                "loss.norm_tokens": ("rollout.max_tokens", lambda c: c.rollout.max_tokens),
                # ratios, KL, entropy and drift are of the sampling distribution
                "loss.temperature": ("rollout.temperature", lambda c: c.rollout.temperature),
            }
        ),
    )

    def __post_init__(self):
        apply_derived(self)
        dtypes = one_of(("float32", "bfloat16", "float16"))  # models.config.dtype_from_name's
        check_fields(
            self,
            {
                "dtype": dtypes,
                "param_dtype": dtypes,
                "attention": one_of(ATTENTION_KERNELS),
                "decode_attention": one_of(DECODE_ATTENTION),
                "max_prompt_len": at_least(1),
                "response_bucket": at_least(1),
                "eval_max_tokens": at_least(0, " (0: rollout.max_tokens)"),
            },
        )

    def model_numerics(self) -> dict:
        """The ModelConfig fields this role sets on its checkpoint's architecture (the keyword
        arguments of `models.hf.from_pretrained` / `read_config`), except remat."""
        return dict(
            dtype=dtype_from_name(self.dtype),
            param_dtype=dtype_from_name(self.param_dtype),
            attention=self.attention,
            decode_attention=self.decode_attention,
            fused_norm=self.fused_norm,
            fused_mlp=self.fused_mlp,
            fused_rope=self.fused_rope,
            padding_as_lengths=self.padding_as_lengths,
        )

    @property
    def max_sequence_len(self) -> int:
        """Prompt + completion tokens of the longest sequence this role samples (training
        rollouts or greedy evaluation): what a vLLM server's max_model_len must hold."""
        return self.max_prompt_len + max(self.rollout.max_tokens, self.eval_max_tokens)
