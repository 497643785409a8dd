"""The run configuration: one set of frozen dataclasses, the only schema of every field.

    c = base_config()                    # configs/*.py: the ConfigDict of RunConfig's defaults
    c.generator.rollout.n = 8            # ... changed where the experiment differs
    cfg = load_run_config(c)             # train.py: validated once, before anything loads

Each field is defined once, here, in config_roles.py (`RoleConfig`: a model, its sampler and
rollouts), in config_stages.py (SFT, evaluation, checkpoints) or in the component whose
dataclass is embedded (the trainer's `TrainerConfig`, the schedule's `Schedule`, the α
schedule's `AlphaSchedule`, the vLLM sampler's `VLLMConfig`, the data's `DataConfig`, the
`MeshConfig`), with a comment; `base_config()` builds the ConfigDict from them. The defaults
are the paper's (TANGO_SPEC §6); where to find models and data has none. A wrong field name
or value fails in `load_run_config`, naming the field.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from pathlib import Path
from types import ModuleType
from typing import Any

from ml_collections import config_dict as mlc

from tango_jax.checkpoint.divergence import DivergenceConfig, GuardAction
from tango_jax.config.files import load_config_file
from tango_jax.config.roles import RoleConfig, RolloutSettings, SamplerBackend
from tango_jax.config.stages import CheckpointConfig, EvalConfig, SFTConfig
from tango_jax.data.prompts import DataConfig, DataSource
from tango_jax.metrics.rollouts import RolloutLogConfig
from tango_jax.metrics.wandb import WandbConfig
from tango_jax.parallel.distributed import DistributedConfig
from tango_jax.parallel.mesh import MeshConfig
from tango_jax.rl.advantages import AdvantageEstimator, AdvantageOptions, AdvantageScaling
from tango_jax.schema import (
    ConfigError,
    Rule,
    above,
    apply_derived,
    at_least,
    check_fields,
    check_path,
    config_dict,
    derived,
    finite,
    from_dict,
    within,
)
from tango_jax.tango.class_balance import ReweightMethod
from tango_jax.tango.kind import Kind
from tango_jax.tango.process_advantages import AlphaSchedule
from tango_jax.tango.schedule import Schedule


class StepSource(enum.Enum):
    """Where the generator's step judgments come from (they enter one path either way)."""

    VERIFIER = "verifier"  # the verifier's sampled step judgments (Tango)
    # The task's step truth (+1 before the first wrong step, -1 from it on), each flipped with
    # probability algorithm.oracle_flip_prob: the control that bounds what any verifier gives
    # (synthetic tasks only; tango/oracle_feedback.py).
    ORACLE = "oracle"


@dataclasses.dataclass(frozen=True)
class AlgorithmConfig:
    """Advantages and rewards (TANGO_SPEC §2, §3)."""

    estimator: AdvantageEstimator = AdvantageEstimator.GRPO  # grpo | rloo | reinforce_plus_plus
    step_rewards: bool = True  # Tango's process term; False = outcome only even with a verifier
    # α of the step advantage: exp (paper) | linear | cosine | none (fixed weights); alpha0 0.1
    # for GRPO and RLOO, 0.5 for REINFORCE++.
    alpha: AlphaSchedule = AlphaSchedule()
    eps: float = 1e-6
    # What GRPO divides r - (group mean) by: group (the group's std, the paper) | batch (the
    # std of all the step's rewards) | none (Dr. GRPO, Liu et al. 2025, arXiv 2503.20783).
    # GRPO only; Tango's step advantage keeps its own group std (process_advantages.py).
    advantage_scaling: AdvantageScaling = AdvantageScaling.GROUP
    rloo_step_scale: float = 10.0  # the official hard-coded x10 on RLOO's step advantage
    reinforce_pp_baseline: bool = False  # subtract the group mean before whitening
    # Weight of the rule-based reward vs the verifier's final verdict in the generator's outcome
    # reward where the verdict parses (official 1.0: the verdict is unused).
    ground_truth_weight: float = 1.0
    generator_format_weight: float = 0.0  # official 0.0: format only via SFT
    verifier_format_weight: float = 0.8  # γ in r_v = 1[verdict correct] + γ·format
    verifications_per_response: int = 1  # verifier samples per generator rollout in G steps
    # Miniature option (off in the paper): the verifier's verdict is rewarded only when its step
    # judgments agree with it (an INCORRECT step exactly when the verdict is INCORRECT), so the
    # outcome reward reaches the step judgments of a verifier that does not couple them itself
    # (docs/miniature.md). Still outcome-level: no step labels.
    verifier_consistent_verdict: bool = False
    class_reweight: ReweightMethod | None = ReweightMethod.SQRT_INVERSE  # | inverse | None
    class_ema_decay: float = 0.8
    step_source: StepSource = StepSource.VERIFIER  # verifier | oracle (needs no verifier)
    oracle_flip_prob: float = 0.0  # oracle only: probability q that a step label is flipped
    # oracle only: also judge the closing tokens after the last step (the decision to answer)
    # as one more step, -1 unless the solution is right; a solution that stops early is then
    # wrong at its closing, not at its last (correct) step (run/oracle_feedback.py)
    oracle_closing_step: bool = False

    def __post_init__(self):
        check_fields(
            self,
            {
                "eps": above(0),
                "rloo_step_scale": finite(),
                "generator_format_weight": within(0.0, math.inf, open_hi=True),
                "verifier_format_weight": within(0.0, math.inf, open_hi=True),
                "oracle_flip_prob": within(0.0, 1.0),
            },
        )
        grpo = self.estimator is AdvantageEstimator.GRPO
        check_fields(
            self,
            {
                "advantage_scaling": Rule(
                    lambda a: grpo or a is AdvantageScaling.GROUP,
                    f"is GRPO's option, not {self.estimator.value}'s (RLOO divides by nothing, "
                    "REINFORCE++ by the batch std): set it to group or the estimator to grpo.",
                )
            },
        )

    @property
    def advantage_options(self) -> AdvantageOptions:
        """The estimator and its options, as the advantage functions take them."""
        return AdvantageOptions(
            estimator=self.estimator,
            eps=self.eps,
            scaling=self.advantage_scaling,
            reinforce_pp_baseline=self.reinforce_pp_baseline,
            rloo_step_scale=self.rloo_step_scale,
        )


def _verifier_trains(c: RunConfig) -> bool:
    """Whether the run trains a verifier (derives the schedule, so checked first)."""
    if c.verifier.trainable and not c.verifier.enable:
        _fail(
            "verifier.trainable",
            True,
            "needs verifier.enable=True; set "
            "verifier.trainable=False too for the rule-reward baseline.",
        )
    return c.verifier.enable and c.verifier.trainable


@dataclasses.dataclass(frozen=True)
class RunConfig:
    name: str = "tango"
    run_dir: str = "runs/tango"
    seed: int = 0  # sampling seeds, SFT data order
    resume: bool = True  # continue from the latest checkpoint in run_dir if there is one
    # Fields (dotted paths or groups) that may differ from run_dir/config.json on resume, beyond
    # those that never change a training step (preflight.RESUME_MAY_CHANGE: logging,
    # evaluation, checkpointing, server urls); e.g. ("schedule.total_steps",).
    resume_may_change: tuple[str, ...] = ()
    mesh: MeshConfig = MeshConfig()  # -1 fills the remaining devices
    # Multi-process training (jax.distributed; docs/scaling.md): the mesh then spans the
    # devices of every process.
    distributed: DistributedConfig = DistributedConfig()
    generator: RoleConfig = RoleConfig()
    # The paper's verifier: 4096 new tokens on prompts right-truncated at 4096.
    verifier: RoleConfig = RoleConfig(max_prompt_len=4096, rollout=RolloutSettings(max_tokens=4096))
    # Global steps (tango/schedule.py); the paper's script: 440 = 40 verifier warm-up steps,
    # then 100 cycles of [G, G, G, V] (300 generator steps).
    schedule: Schedule = dataclasses.field(
        default=Schedule(total_steps=440),
        metadata=derived(
            verifier_trainable=("verifier.enable and verifier.trainable", _verifier_trains),
            generator_trainable=("generator.trainable", lambda c: c.generator.trainable),
        ),
    )
    algorithm: AlgorithmConfig = dataclasses.field(  # after `schedule`: α's horizon is its
        default=AlgorithmConfig(),
        metadata=derived(
            **{"alpha.total_steps": ("schedule.alpha_horizon", lambda c: c.schedule.alpha_horizon)}
        ),
    )
    data: DataConfig = DataConfig()
    sft: SFTConfig = SFTConfig()
    eval: EvalConfig = EvalConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    # Signs that an update wrecked a model with finite numbers (checkpoint/divergence.py); any
    # non-finite metric always stops the run.
    divergence: DivergenceConfig = DivergenceConfig()
    tensorboard: bool = True
    # What the models wrote (prompts, solutions, rewards, the verifier's judgments), every k
    # steps, in run_dir/rollouts/ (and W&B tables); bounded in size (metrics/rollouts.py).
    log_rollouts: RolloutLogConfig = RolloutLogConfig()
    # Weights & Biases logging beside metrics.jsonl and TensorBoard (off by default;
    # metrics/wandb.py, docs/outputs.md).
    wandb: WandbConfig = WandbConfig()
    # Sampler-vs-trainer log-prob drift is logged for every trained batch; True also scores
    # the untrained rollout batches (the verifier's feedback in generator steps, the
    # generator's samples in verifier steps) with an extra forward pass.
    drift_all_batches: bool = True
    scorer_workers: int = 8  # processes scoring answers (math-verify) under a time limit
    scorer_timeout_s: float = 5.0  # per answer; a pathological one scores 0 and is counted
    # Collect each step's rollouts during the previous step's update (one step off-policy; off
    # in the paper). Needs trainer.loss.tis_cap (or use_sampler_logprobs) on every trained
    # role. Concurrent only when every role samples with vLLM; see run/overlap.py.
    overlap_rollouts: bool = False

    def __post_init__(self):
        """Derived fields, then the cross-field checks: everything that would otherwise fail
        (or silently misbehave) only after models load, SFT runs or the first generator step
        comes."""
        apply_derived(self)
        check_fields(
            self,
            {
                "name": Rule(bool, "must not be empty."),
                "run_dir": Rule(bool, "must not be empty."),
                "scorer_workers": at_least(1),
                "scorer_timeout_s": above(0),
            },
        )
        for field in self.resume_may_change:
            try:
                check_path(RunConfig, field)
            except ConfigError as e:
                raise ConfigError(f"config.resume_may_change ({field!r}): {e}") from None
        checks = (
            _check_roles,
            _check_trainers,
            _check_data,  # before the micro-batches, which divide the data's batches
            check_micro_batches,
            _check_algorithm,
            _check_overlap,
            _check_dynamic_sampling,
        )
        for check in checks:
            check(self)

    def role(self, role: Kind) -> RoleConfig:
        return self.generator if role is Kind.GENERATOR else self.verifier

    def step_prompts(self, role: Kind) -> int:
        """Prompts in a training step of the role: the verifier's own batch where it has one."""
        return self.data.verifier_batch if role is Kind.VERIFIER else self.data.prompts_per_step


def _fail(field: str, value: Any, rule: str) -> None:
    raise ConfigError(f"config.{field} ({value!r}) {rule}")


def _check_roles(c: RunConfig) -> None:
    if c.generator.collapse_guard is not GuardAction.WARN:
        _fail(
            "generator.collapse_guard",
            c.generator.collapse_guard.value,
            "guards the verifier only; set verifier.collapse_guard instead.",
        )
    for kind in Kind:
        name, role = kind.value, c.role(kind)
        m = role.model
        if bool(m.path) == bool(m.preset):
            raise ConfigError(
                f"config.{name}.model: set exactly one of path ({m.path!r}) and preset "
                f"({m.preset!r})."
            )
        if role.sampler.backend is SamplerBackend.VLLM:
            need = role.max_sequence_len
            max_len = role.sampler.vllm.server.max_model_len
            if max_len is not None and max_len < need:
                _fail(
                    f"{name}.sampler.vllm.server.max_model_len",
                    max_len,
                    f"must hold max_prompt_len + max(rollout.max_tokens, eval_max_tokens) "
                    f"({need}).",
                )
            try:  # the sampler's own checks, at start-up
                role.sampler.vllm.sampler_config("<the role's checkpoint>", need)
            except ValueError as e:
                raise ConfigError(f"config.{name}.sampler.vllm: {e}") from e


def enabled_roles(c: RunConfig) -> list[Kind]:
    """The roles the run loads: the generator, and the verifier unless it is disabled."""
    return [k for k in Kind if k is Kind.GENERATOR or c.verifier.enable]


def trained_roles(c: RunConfig) -> list[Kind]:
    """The roles whose RL trainer the run builds (and checkpoints)."""
    return [k for k in enabled_roles(c) if c.role(k).trainable]


def _check_trainers(c: RunConfig) -> None:
    for kind in trained_roles(c):
        name, role = kind.value, c.role(kind)
        loss = role.trainer.loss
        if loss.tis_cap is not None and (loss.tis_cap <= 0 or loss.use_sampler_logprobs):
            _fail(
                f"{name}.trainer.loss.tis_cap",
                loss.tis_cap,
                "must be > 0, and is redundant with use_sampler_logprobs=True (the ratio "
                "already corrects for the sampler).",
            )


def _check_overlap(c: RunConfig) -> None:
    """Overlapped rollouts train on samples one update old: the loss must correct for it."""
    if not c.overlap_rollouts:
        return
    for kind in trained_roles(c):
        loss = c.role(kind).trainer.loss
        if loss.tis_cap is None and not loss.use_sampler_logprobs:
            _fail(
                "overlap_rollouts",
                True,
                f"trains the {kind.value} on samples one update old, which needs an importance "
                f"correction against the sampler's log-probs: set {kind.value}.trainer.loss."
                "tis_cap (e.g. 2.0) or use_sampler_logprobs=True, or overlap_rollouts=False.",
            )


def _check_dynamic_sampling(c: RunConfig) -> None:
    """A role's dynamic sampling acts in its own training steps: a role that is never trained
    has none."""
    for kind in Kind:
        if c.role(kind).rollout.dynamic_sampling and kind not in trained_roles(c):
            _fail(
                f"{kind.value}.rollout.dynamic_sampling",
                True,
                f"acts in {kind.value} steps, and this run never trains the {kind.value} "
                f"({kind.value}.enable / trainable); set it False.",
            )


def check_micro_batches(c: RunConfig, data_parallel: int = 1) -> None:
    """Every trainer's micro-batch divides its batch and is a multiple of the data-parallel
    size (mesh data x fsdp: checked again by train.py once the devices are known)."""
    batches = []
    for k in trained_roles(c):
        own = k is Kind.VERIFIER and c.data.verifier_prompts_per_step
        prompts = "data.verifier_prompts_per_step" if own else "data.prompts_per_step"
        rows = c.step_prompts(k) * c.role(k).rollout.n
        what = f"the {k.value}'s batch of {prompts} x {k.value}.rollout.n = {rows} sequences."
        batches.append((f"{k.value}.trainer", c.role(k).trainer, rows, what))
    for kind in Kind:
        stage, name = c.sft.stage(kind), kind.value
        if stage.enable:
            what = f"sft.{name}.batch_size ({stage.batch_size})."
            batches.append((f"sft.{name}.trainer", stage.trainer, stage.batch_size, what))
    for field, trainer, batch, what in batches:
        mb = trainer.micro_batch_size
        if mb < 1 or batch % mb:
            _fail(f"{field}.micro_batch_size", mb, f"must divide {what}")
        if mb % data_parallel:
            _fail(
                f"{field}.micro_batch_size",
                mb,
                f"must be divisible by the data-parallel size ({data_parallel} = mesh data x "
                "fsdp).",
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
    if a.step_source is StepSource.ORACLE and (c.verifier.enable or not a.step_rewards):
        _fail(
            "algorithm.step_source",
            a.step_source.value,
            "takes the step judgments from the task's truth: set verifier.enable=False and "
            "algorithm.step_rewards=True.",
        )
    if a.oracle_flip_prob and a.step_source is not StepSource.ORACLE:
        _fail(
            "algorithm.oracle_flip_prob",
            a.oracle_flip_prob,
            "flips oracle step labels; set algorithm.step_source='oracle' or leave it 0.",
        )
    if a.oracle_closing_step and a.step_source is not StepSource.ORACLE:
        _fail(
            "algorithm.oracle_closing_step",
            a.oracle_closing_step,
            "judges the closing tokens with the oracle; set algorithm.step_source='oracle' or "
            "leave it False.",
        )


def _check_data(c: RunConfig) -> None:
    d = c.data
    if d.prompts_per_step < 1:
        _fail("data.prompts_per_step", d.prompts_per_step, "must be >= 1.")
    if d.verifier_prompts_per_step < 0:
        _fail(
            "data.verifier_prompts_per_step",
            d.verifier_prompts_per_step,
            "must be >= 0 (0: data.prompts_per_step).",
        )
    if d.verifier_prompts_per_step and not d.verifier_stream:
        _fail(
            "data.verifier_prompts_per_step",
            d.verifier_prompts_per_step,
            "sizes the verifier's own prompt stream: add --config.data.verifier_stream=True, "
            "or leave it 0 (the shared stream's batches are data.prompts_per_step).",
        )
    if (d.source is DataSource.CUSTOM) != bool(d.task):
        _fail(
            "data.task",
            d.task,
            "names a task of your own ('module:factory', data/tasks.py) exactly when "
            "data.source='custom'; set both, or neither.",
        )
    if d.source.generated:  # file settings would be silently ignored
        defaults = DataConfig()
        for field in ("train_path", "eval_path", "question_field", "answer_field"):
            if getattr(d, field) != getattr(defaults, field):
                _fail(
                    f"data.{field}",
                    getattr(d, field),
                    f"is set, but data.source is {d.source.value!r} (generated problems, no "
                    "files), which would ignore it: pass --config.data.source=jsonl to train on "
                    "your file (docs/data.md).",
                )
    else:
        what = {"train_path": "training", "eval_path": "held-out"}
        for field in ("train_path", "eval_path"):
            if not getattr(d, field):
                _fail(
                    f"data.{field}",
                    getattr(d, field),
                    f"is required with data.source={d.source.value!r}: pass "
                    f"--config.data.{field}=FILE (the {what[field]} problems; docs/data.md).",
                )
    if d.eval_size < 1:
        _fail("data.eval_size", d.eval_size, "must be >= 1.")


def base_config() -> mlc.ConfigDict:
    """RunConfig's defaults as the ConfigDict that configs/*.py start from."""
    return config_dict(RunConfig)


def sibling_config(config_file: str | Path, name: str) -> ModuleType:
    """configs/<name>.py next to `config_file`, loaded (`files.load_config_file`): how a config
    file builds on another (`sibling_config(__file__, "tango_qwen2_5_math_7b")`)."""
    return load_config_file(Path(config_file).with_name(f"{name}.py"))


def load_run_config(config: Any) -> RunConfig:
    """ConfigDict / dict -> RunConfig, with errors naming the field."""
    data = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    return from_dict(RunConfig, data)


def saved_run_config(data: dict, source: str) -> dict:
    """A run's saved config (`source`: its config.json) without the fields that are derived
    now: `<role>.trainer.loss.temperature`, set from `<role>.rollout.temperature`. A saved
    value equal to the one it is derived from goes (as does a role's without a trainer, which
    never read it); a different one is a ConfigError naming the field, both values and the
    fix."""
    defaults = {f.name: f.default for f in dataclasses.fields(RunConfig)}
    out = dict(data)
    for kind in Kind:
        name = kind.value
        role = data.get(name)
        loss = role.get("trainer", {}).get("loss", {}) if isinstance(role, dict) else {}
        if not isinstance(loss, dict) or "temperature" not in loss:
            continue
        value = loss["temperature"]
        sampling = role.get("rollout", {}).get("temperature", defaults[name].rollout.temperature)
        trained = role.get("trainable", defaults[name].trainable) and role.get(
            "enable", defaults[name].enable
        )
        if value != sampling and trained:
            raise ConfigError(
                f"{source}: {name}.trainer.loss.temperature ({value!r}) differs from "
                f"{name}.rollout.temperature ({sampling!r}), which sets it: delete that field "
                f"from {source} to train on at {sampling!r}, or start a new run_dir."
            )
        kept = {k: v for k, v in loss.items() if k != "temperature"}
        out[name] = role | {"trainer": role["trainer"] | {"loss": kept}}
    return out


def load_saved_run_config(file: Path) -> RunConfig:
    """The RunConfig of a run's config.json (`saved_run_config` first)."""
    return load_run_config(saved_run_config(json.loads(Path(file).read_text()), str(file)))
