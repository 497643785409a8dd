"""configs/smollm2_verifier.py (claim 1 on SmolLM2): it loads and passes the pre-run checks, and
it is the paper's verifier recipe where the CPU allows (TANGO_SPEC §1.4, §3.4, §6), on a frozen
generator, with every update a verifier update and the balanced probe on."""

from __future__ import annotations

from pathlib import Path

from tango_jax.config import preflight
from tango_jax.config.files import load_config_file
from tango_jax.config.run import RunConfig, load_run_config, trained_roles
from tango_jax.schema import from_dict, to_dict
from tango_jax.tango.kind import Kind

ROOT = Path(__file__).resolve().parents[2]
MODULE = load_config_file(ROOT / "configs" / "smollm2_verifier.py")


def test_it_passes_the_pre_run_checks(smollm2_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the config's paths are relative to the repository root
    c = MODULE.get_config("rl")
    c.run_dir = str(tmp_path / "rl")
    cfg = load_run_config(c)
    assert from_dict(RunConfig, to_dict(cfg)) == cfg
    preflight.check(cfg)
    assert not (tmp_path / "rl").exists()


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
