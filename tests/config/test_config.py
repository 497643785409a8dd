"""Config files -> typed RunConfig: every shipped config loads; bad fields fail by name."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from ml_collections import config_dict

from tango_jax.config.files import load_config_file
from tango_jax.config.roles import SamplerBackend
from tango_jax.config.run import (
    RunConfig,
    check_micro_batches,
    load_run_config,
    load_saved_run_config,
)
from tango_jax.rl.advantages import AdvantageEstimator
from tango_jax.schema import ConfigError, from_dict, to_dict
from tango_jax.tango.kind import Kind
from tango_jax.text.formats import StepSplit

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def _load(name: str, variant: str | None = None):
    module = load_config_file(CONFIGS / f"{name}.py")
    return module.get_config() if variant is None else module.get_config(variant)


ALL = (
    [("tiny_arith", v) for v in ("tango", "grpo", "fixed_verifier")]
    + [("smollm2_arith", v) for v in ("tango", "grpo", "zero_shot")]
    + [("smollm2_addition", v) for v in ("grpo", "tango")]
    + [
        ("tiny_chains", v)
        for v in (
            *("tango", "grpo", "oracle", "noisy_oracle,q=0.2", "fixed_verifier"),
            *("fixed_generator", "tango,scratch", "oracle,alpha0=0.5"),
        )
    ]
    + [("tango_qwen2_5_math_7b", None), ("tango_qwen2_5_math_7b", "lora")]
    + [("tango_llama3_1_8b", None), ("sft_qwen2_5_math_7b", None)]
    + [
        ("baselines_qwen2_5_math_7b", v)
        for v in (
            "grpo",
            "fixed_verifier",
            "rloo",
            "rloo_tango",
            "reinforce_pp",
            "reinforce_pp_tango",
        )
    ]
)


# The run configs committed with run records (config.json beside their metrics.jsonl).
RECORDS = sorted(
    p for p in (CONFIGS.parent / "docs").rglob("config.json") if "generator" in p.read_text()
)


@pytest.mark.parametrize("record", RECORDS, ids=lambda p: p.parent.name)
def test_committed_run_records_configs_still_load(record):
    """A config written by an older version (fields added since take their defaults)."""
    cfg = load_saved_run_config(record)
    assert cfg.data.task == "" and cfg.data.source.value in ("jsonl", "synthetic", "line_chains")


@pytest.mark.parametrize("name, variant", ALL)
def test_every_shipped_config_validates(name, variant):
    cfg = load_run_config(_load(name, variant))
    assert from_dict(RunConfig, to_dict(cfg)) == cfg  # round trip through plain data


def test_baseline_variants_mean_what_they_say():
    grpo = load_run_config(_load("baselines_qwen2_5_math_7b", "grpo"))
    assert not grpo.verifier.enable and grpo.schedule.count(Kind.GENERATOR) == 300
    tango = load_run_config(_load("tango_qwen2_5_math_7b"))
    assert tango.schedule.count(Kind.GENERATOR) == 300
    assert tango.generator.sampler.backend is SamplerBackend.VLLM
    rpp = load_run_config(_load("baselines_qwen2_5_math_7b", "reinforce_pp_tango"))
    assert rpp.algorithm.estimator is AdvantageEstimator.REINFORCE_PP
    assert rpp.algorithm.alpha.alpha0 == 0.5 and rpp.generator.trainer.loss.entropy_coef == 0
    fixed = load_run_config(_load("baselines_qwen2_5_math_7b", "fixed_verifier"))
    assert fixed.verifier.enable and not fixed.verifier.trainable and fixed.algorithm.step_rewards


def test_smollm2_variants_mean_what_they_say():
    """The real-model config: chat template and format SFT for both roles; grpo has the same
    generator steps without a verifier; zero_shot trains nothing."""
    tango = load_run_config(_load("smollm2_arith"))
    for role in (tango.generator, tango.verifier):
        assert role.chat_template and role.model.path.endswith("SmolLM2-135M-Instruct")
        assert role.dtype == "float32" and role.trainer.loss.kl_coef == 0
    assert tango.sft.generator.enable and tango.sft.verifier.enable
    assert not tango.sft.verifier.start_from_generator
    grpo = load_run_config(_load("smollm2_arith", "grpo"))
    assert not grpo.verifier.enable and not grpo.sft.verifier.enable
    assert grpo.schedule.count(Kind.GENERATOR) == tango.schedule.count(Kind.GENERATOR)
    zero = load_run_config(_load("smollm2_arith", "zero_shot"))
    assert zero.schedule.total_steps == 0 and zero.eval.before_train
    assert not (zero.sft.generator.enable or zero.sft.verifier.enable)


def test_chain_arms_share_the_task_and_the_generator_updates():
    """configs/tiny_chains.py: every arm on 5-8-step chains, the same generator updates and α
    schedule start; the oracle arms use the task's step truth, grpo no step term; a bad option
    is refused naming it."""
    arms = {
        v: load_run_config(_load("tiny_chains", v))
        for v in ("tango", "grpo", "oracle", "noisy_oracle", "fixed_verifier")
    }
    for cfg in arms.values():
        assert (cfg.data.arith.min_steps, cfg.data.arith.max_steps) == (5, 8)
        assert cfg.schedule.count(Kind.GENERATOR) == 36
        assert cfg.algorithm.alpha.alpha0 == 0.1
    assert arms["tango"].verifier.trainable and arms["tango"].schedule.verifier_warmup_steps == 10
    assert not arms["grpo"].verifier.enable and not arms["grpo"].algorithm.step_rewards
    assert arms["oracle"].algorithm.oracle_flip_prob == 0.0
    assert arms["noisy_oracle"].algorithm.oracle_flip_prob == 0.35
    assert arms["fixed_verifier"].verifier.enable and not arms["fixed_verifier"].verifier.trainable
    with pytest.raises(ValueError, match="unknown option 'q=0.2'"):
        _load("tiny_chains", "oracle,q=0.2")


def _tiny():
    return _load("tiny_arith", "tango,scratch").to_dict()


def test_smollm2_addition_is_sized_and_matched_as_documented():
    """The GRPO run that scripts/bench/compare_trl/trl_grpo.py repeats under TRL: 30 steps of 64
    rollouts, TRL's settings where the two differ (docs/real_model.md)."""
    grpo = load_run_config(_load("smollm2_addition", "grpo"))
    g = grpo.generator
    assert not grpo.verifier.enable and grpo.schedule.count(Kind.GENERATOR) == 30
    assert grpo.data.prompts_per_step * g.rollout.n == 64 and g.rollout.max_tokens == 64
    assert g.chat_template and g.trainer.loss.kl_coef == 0 and g.trainer.loss.entropy_coef == 0
    assert g.trainer.loss.agg_mode.value == "token-mean" and grpo.algorithm.eps == 1e-4
    assert g.trainer.optimizer.weight_decay == 0 and g.trainer.optimizer.schedule.value == (
        "constant"
    )
    assert grpo.data.reward == "tango_jax.data.addition:last_integer_reward"
    tango = load_run_config(_load("smollm2_addition", "tango"))
    assert tango.verifier.enable and tango.schedule.count(Kind.GENERATOR) == 30
    # the GRPO run's generator and data; its replies' lines are the steps
    assert tango.data.step_split is StepSplit.LINES
    assert (tango.generator, dataclasses.replace(tango.data, step_split=StepSplit.TAGS)) == (
        g, grpo.data)  # fmt: skip
    assert tango.sft.verifier.enable and not tango.sft.generator.enable
    assert (CONFIGS.parent / tango.sft.verifier.data_path).is_file()


def test_unknown_field_is_named_with_suggestion():
    d = _tiny()
    d["generator"]["rollout"]["temprature"] = 0.5
    with pytest.raises(
        ConfigError,
        match="config.generator.rollout.temprature: unknown field. Did you mean 'temperature'",
    ):
        load_run_config(d)


def _assert_rejected(path, value, message):
    """The tiny config with `path` set to `value` fails at load with `message`."""
    d = _tiny()
    node = d
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(ConfigError, match=message):
        load_run_config(d)


@pytest.mark.parametrize(
    "path, value, message",
    [
        (("algorithm", "estimator"), "ppo", "config.algorithm.estimator: 'ppo' is not one of"),
        (("schedule", "total_steps"), 2.5, "config.schedule.total_steps: expected an integer"),
        (("generator", "remat"), "yes", "config.generator.remat: expected true/false"),
        (("verifier", "trainer", "loss", "dual_clip"), "x", "dual_clip"),
        (("data", "arith", "ops"), ["add", "pow"], "config.data.arith.ops\\[1\\]: 'pow'"),
        (("algorithm", "advantage_scaling"), "std", "config.algorithm.advantage_scaling: 'std'"),
        (("generator", "trainer", "loss", "ratio_level"), "seq", "loss.ratio_level: 'seq'"),
        (
            ("verifier", "rollout", "overlong_buffer"),
            10**6,
            r"config.verifier.rollout.overlong_buffer \(1000000\) must be in \[0, ",
        ),
        (("generator", "trainer", "loss", "norm_tokens"), 8, "set from rollout.max_tokens"),
        (("verifier", "trainer", "loss", "temperature"), 0.7, "set from rollout.temperature"),
    ],
)
def test_bad_values_are_named(path, value, message):
    _assert_rejected(path, value, message)


def test_cross_field_errors():
    d = _tiny()
    d["verifier"]["enable"] = False
    with pytest.raises(ConfigError, match="verifier.trainable"):
        load_run_config(d)
    d = _tiny()
    d["generator"]["model"]["path"] = "/some/dir"  # and preset is set too
    with pytest.raises(ConfigError, match="exactly one of path"):
        load_run_config(d)


def test_advantage_scaling_is_grpo_only_and_the_loss_follows_the_rollouts():
    d = _tiny()
    d["algorithm"]["estimator"] = "rloo"
    d["algorithm"]["advantage_scaling"] = "none"
    with pytest.raises(ConfigError, match="config.algorithm.advantage_scaling .* GRPO's option"):
        load_run_config(d)
    d = _tiny()
    d["verifier"]["rollout"]["max_tokens"] = 96
    cfg = load_run_config(d)  # Dr. GRPO's constant is the role's generation budget
    assert cfg.verifier.trainer.loss.norm_tokens == 96
    assert cfg.generator.trainer.loss.norm_tokens == cfg.generator.rollout.max_tokens
    d = _tiny()
    d["verifier"]["rollout"]["temperature"] = 0.7
    cfg = load_run_config(d)  # the loss scores the sampling distribution's log-probs
    assert cfg.verifier.trainer.loss.temperature == 0.7
    assert cfg.generator.trainer.loss.temperature == cfg.generator.rollout.temperature == 1.0


def test_command_line_overrides_reach_the_typed_config():
    c = _load("tiny_arith")
    c.generator.rollout.n = 8
    c.verifier.trainer.loss.tis_cap = 2.0
    cfg = load_run_config(c)
    assert cfg.generator.rollout.n == 8 and cfg.verifier.trainer.loss.tis_cap == 2.0
    assert isinstance(c, config_dict.ConfigDict)


@pytest.mark.parametrize(
    "override, message",
    [
        (
            "--config.generator.rollout.temprature=0.5",
            "config error: --config.generator.rollout.temprature: unknown field; did you mean "
            "'temperature'?",
        ),
        (
            "--config.algorithm.estimator=ppo",
            "config error: config.algorithm.estimator: 'ppo' is not one of",
        ),
    ],
)
def test_train_entry_point_rejects_bad_overrides_before_loading_anything(override, message):
    import subprocess
    import sys

    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "tango_jax.train",
            "--config",
            str(CONFIGS / "tiny_arith.py"),
            override,
            "--config.run_dir=/nonexistent/never/created",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1
    assert message in run.stderr + run.stdout
    assert not Path("/nonexistent/never/created").exists()


@pytest.mark.parametrize(
    "path, value, message",
    [
        (
            ("generator", "trainer", "micro_batch_size"),
            48,
            "generator.trainer.micro_batch_size \\(48\\) must divide the generator's batch",
        ),
        (("algorithm", "ground_truth_weight"), 1.5, "ground_truth_weight \\(1.5\\) must be in"),
        (("algorithm", "verifications_per_response"), 0, "verifications_per_response \\(0\\)"),
        (("schedule", "total_steps"), 10, "total_steps \\(10\\) must exceed the warm-ups"),
        (("data", "source"), "jsonl", "data.train_path \\(''\\) is required"),
        (("data", "source"), "custom", "data.task \\(''\\) names a task of your own"),
        (("data", "task"), "toy_task:make", "data.task \\('toy_task:make'\\) names a task"),
        (("checkpoint", "keep"), 0, "checkpoint.keep \\(0\\)"),
        (("generator", "collapse_guard"), "stop", "generator.collapse_guard .* verifier only"),
    ],
)
def test_cross_field_rules_fail_at_start_up(path, value, message):
    _assert_rejected(path, value, message)


@pytest.mark.parametrize(
    "path, value, message",
    [  # the examples first: each used to fail late, with a traceback, or never
        (("generator", "rollout", "max_tokens"), 0, r"generator.rollout.max_tokens \(0\) must be"),
        (("verifier", "rollout", "top_p"), 0.0, r"verifier.rollout.top_p \(0.0\) must be in \(0"),
        (
            ("generator", "trainer", "optimizer", "learning_rate"),
            -1.0,
            r"config.generator.trainer.optimizer.learning_rate \(-1.0\) must be a finite number",
        ),
        (("generator", "rollout", "top_k"), 0, r"top_k \(0\) must be -1 \(off\) or >= 1"),
        (("sft", "generator", "steps"), 0, r"config.sft.generator.steps \(0\) must be >= 1"),
        (("verifier", "model", "preset"), "tiny-qwen9", r"preset \('tiny-qwen9'\) must be one of"),
        (("generator", "dtype"), "fp32", r"config.generator.dtype \('fp32'\) must be one of"),
        (("generator", "trainer", "loss", "clip_low"), 1.5, r"clip_low \(1.5\) must be in"),
        (("verifier", "trainer", "optimizer", "b2"), 1.0, r"optimizer.b2 \(1.0\) must be in"),
        (("eval", "sampled_n"), 0, r"config.eval.sampled_n \(0\) must be >= 1"),
        (("data", "eval_size"), 0, r"config.data.eval_size \(0\) must be >= 1"),
        (("scorer_workers",), 0, r"config.scorer_workers \(0\) must be >= 1"),
        (("run_dir",), "", r"config.run_dir \(''\) must not be empty"),
        (("resume_may_change",), ["schedule.total_step"], "Did you mean 'total_steps'"),
    ],
)
def test_every_field_is_checked_when_the_config_loads(path, value, message):
    _assert_rejected(path, value, message)


def _float_fields(tree, prefix=()):
    for k, v in tree.items():
        if isinstance(v, dict):
            yield from _float_fields(v, (*prefix, k))
        elif isinstance(v, float):
            yield (*prefix, k)


@pytest.mark.parametrize("path", list(_float_fields(_tiny())), ids=".".join)
def test_no_float_field_accepts_nan(path):
    """NaN passes any `x < bound` check by failing it silently; every float field refuses it."""
    _assert_rejected(path, float("nan"), f"config.{'.'.join(path)}: expected a number, got nan")


def test_tis_with_sampler_ratio_is_rejected():
    d = _tiny()
    loss = d["generator"]["trainer"]["loss"]
    loss["tis_cap"], loss["use_sampler_logprobs"] = 2.0, True
    with pytest.raises(ConfigError, match="redundant with use_sampler_logprobs"):
        load_run_config(d)


def test_micro_batches_are_checked_against_the_data_parallel_size():
    """train.py checks every trainer's micro-batch against the mesh once it is built."""
    cfg = load_run_config(_load("tiny_arith"))  # micro-batches of 8 (RL and SFT)
    check_micro_batches(cfg, 8)
    with pytest.raises(
        ConfigError,
        match=r"config.generator.trainer.micro_batch_size \(8\) must be divisible by the "
        r"data-parallel size \(16 = mesh data x fsdp\)",
    ):
        check_micro_batches(cfg, 16)


def test_the_verifiers_own_batch_needs_its_own_stream_and_sizes_its_micro_batches():
    """`data.verifier_prompts_per_step` sizes the verifier steps' batch of their own stream:
    without data.verifier_stream it is refused, and the verifier's micro-batch must divide
    its batch (the generator's still divides data.prompts_per_step's)."""
    _assert_rejected(
        ("data", "verifier_prompts_per_step"),
        12,
        r"config.data.verifier_prompts_per_step \(12\) sizes the verifier's own prompt stream: "
        r"add --config.data.verifier_stream=True",
    )
    _assert_rejected(("data", "verifier_prompts_per_step"), -1, r"must be >= 0")
    d = _tiny()  # 32 prompts x 4 verifications, micro-batches of 8
    d["data"]["verifier_stream"], d["data"]["verifier_prompts_per_step"] = True, 3
    with pytest.raises(
        ConfigError,
        match=r"config.verifier.trainer.micro_batch_size \(8\) must divide the verifier's batch "
        r"of data.verifier_prompts_per_step x verifier.rollout.n = \d+ sequences",
    ):
        load_run_config(d)
    d["data"]["verifier_prompts_per_step"] = 16
    cfg = load_run_config(d)
    assert (cfg.data.verifier_batch, cfg.data.prompts_per_step) == (16, 32)
