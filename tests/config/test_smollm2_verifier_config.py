"""configs/smollm2_verifier.py (claim 1 on SmolLM2): it loads and passes the pre-run checks, and
it is the paper's verifier recipe where the CPU allows (TANGO_SPEC §1.4, §3.4, §6), on a frozen
generator, with every update a verifier update and the balanced probe on."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tango_jax.config import preflight
from tango_jax.config.files import load_config_file
from tango_jax.config.run import RunConfig, load_run_config, trained_roles
from tango_jax.schema import from_dict, to_dict
from tango_jax.tango.kind import Kind
from tango_jax.text.formats import StepSplit

ROOT = Path(__file__).resolve().parents[2]
MODULE = load_config_file(ROOT / "configs" / "smollm2_verifier.py")


@pytest.mark.parametrize("variant", ["rl", "tango"])
def test_it_passes_the_pre_run_checks(variant, smollm2_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the config's paths are relative to the repository root
    c = MODULE.get_config(variant)
    c.run_dir = str(tmp_path / variant)
    cfg = load_run_config(c)
    assert from_dict(RunConfig, to_dict(cfg)) == cfg
    preflight.check(cfg)
    assert not (tmp_path / variant).exists()


def test_the_papers_recipe_on_a_frozen_generator():
    cfg = load_run_config(MODULE.get_config("rl"))
    assert trained_roles(cfg) == [Kind.VERIFIER]
    assert cfg.schedule.verifier_warmup_steps == cfg.schedule.total_steps  # all verifier updates
    v = cfg.verifier
    assert v.rollout.n == 5 and v.rollout.temperature == 1.0
    assert (v.trainer.loss.kl_coef, v.trainer.loss.entropy_coef) == (1e-3, 1e-3)
    assert v.trainer.optimizer.weight_decay == 0.01
    assert cfg.data.prompts_per_step >= 32 and cfg.generator.rollout.n == 1
    assert cfg.sft.verifier.enable and cfg.sft.verifier.balance_verdicts
    assert cfg.sft.verifier.data_path.endswith("verifier_sft_restated.jsonl")
    assert (ROOT / cfg.sft.verifier.data_path).is_file()
    assert cfg.eval.verifier_probe_size == 64


def test_the_tango_variant_is_the_addition_runs_generator_with_this_verifier():
    """Tango against the GRPO records, paired: the GRPO runs' generator, data order and
    generator updates (configs/smollm2_addition.py), the claim-1 verifier and its recipe, and
    the verifier's updates on SOLUTIONS prompts of their own stream."""
    addition = load_config_file(ROOT / "configs" / "smollm2_addition.py")
    grpo = load_run_config(addition.get_config("grpo"))
    tango = load_run_config(MODULE.get_config("tango"))
    rl = load_run_config(MODULE.get_config("rl"))
    assert tango.generator == grpo.generator and tango.generator.trainable
    assert tango.data.verifier_stream and tango.data.verifier_batch == 32
    own = dict(step_split=StepSplit.TAGS, verifier_stream=False, verifier_prompts_per_step=0)
    assert dataclasses.replace(tango.data, **own) == grpo.data  # data.seed, order, batch
    assert tango.schedule == load_run_config(addition.get_config("tango")).schedule
    assert tango.schedule.count(Kind.GENERATOR) == 30
    assert (tango.verifier, tango.sft.verifier) == (rl.verifier, rl.sft.verifier)
    assert tango.eval.verifier_probe_size == 64 and tango.eval.sampled
