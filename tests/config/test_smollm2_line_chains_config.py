"""configs/smollm2_line_chains.py: every arm loads and passes the pre-run checks, and the arms
differ only where the arm says so (the same generator, SFT, data, evaluation and α horizon)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tango_jax.config import preflight
from tango_jax.config.files import load_config_file
from tango_jax.config.run import RunConfig, StepSource, load_run_config
from tango_jax.data.task import DataSource
from tango_jax.schema import from_dict, to_dict
from tango_jax.tango.kind import Kind
from tango_jax.text.formats import StepSplit

ROOT = Path(__file__).resolve().parents[2]
MODULE = load_config_file(ROOT / "configs" / "smollm2_line_chains.py")


def _flat(obj, prefix=""):
    if dataclasses.is_dataclass(obj):
        out = {}
        for f in dataclasses.fields(obj):
            out |= _flat(getattr(obj, f.name), f"{prefix}{f.name}.")
        return out
    return {prefix[:-1]: obj}


def _diff(a, b) -> set[str]:
    fa, fb = _flat(a), _flat(b)
    return {k for k in fa if fa[k] != fb.get(k)} - {"name", "run_dir"}


@pytest.mark.parametrize("variant", MODULE.VARIANTS)
def test_every_arm_passes_the_pre_run_checks(variant, smollm2_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the config's paths are relative to the repository root
    c = MODULE.get_config(variant)
    c.run_dir = str(tmp_path / variant)
    cfg = load_run_config(c)
    assert from_dict(RunConfig, to_dict(cfg)) == cfg  # round trip through plain data
    preflight.check(cfg)  # model folders, prompt template, run_dir; writes nothing
    assert not (tmp_path / variant).exists()


def test_arms_differ_only_where_they_should():
    grpo, oracle, tango = (load_run_config(MODULE.get_config(v)) for v in MODULE.VARIANTS)
    assert _diff(grpo, oracle) == {
        "algorithm.step_rewards",
        "algorithm.step_source",
        "algorithm.oracle_closing_step",
    }
    assert oracle.algorithm.step_source is StepSource.ORACLE and not oracle.verifier.enable
    assert not grpo.algorithm.step_rewards and not grpo.verifier.enable
    assert tango.verifier.enable and tango.verifier.trainable and tango.sft.verifier.enable
    assert tango.algorithm.step_source is StepSource.VERIFIER
    for c in (grpo, oracle, tango):  # paired: one generator, SFT, data, evaluation, α horizon
        assert (c.generator, c.sft.generator, c.data, c.eval, c.seed) == (
            grpo.generator, grpo.sft.generator, grpo.data, grpo.eval, grpo.seed
        )  # fmt: skip
        assert c.schedule.count(Kind.GENERATOR) == MODULE.GENERATOR_STEPS
        assert c.algorithm.alpha.total_steps == MODULE.GENERATOR_STEPS
    assert tango.schedule.verifier_warmup_steps == MODULE.VERIFIER_WARMUP
    d = grpo.data
    assert d.source is DataSource.LINE_CHAINS and d.step_split is StepSplit.LINES
    assert (d.arith.min_steps, d.arith.max_steps) == (3, 5)
    assert d.reward == "tango_jax.data.line_chains:final_number_reward"
    assert grpo.sft.generator.enable and grpo.generator.chat_template
    with pytest.raises(ValueError, match="unknown variant"):
        MODULE.get_config("noisy_oracle")
