"""configs/tiny_letters.py: every arm loads, and arms differ only where the arm says so (the
same SFT start, data, evaluation, optimiser, generator steps and α schedule)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tango_jax.config.run import StepSource, load_run_config, sibling_config
from tango_jax.tango.kind import Kind

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def _cfg(arg: str):
    return load_run_config(sibling_config(str(CONFIGS / "x.py"), "tiny_letters").get_config(arg))


def _flat(obj, prefix=""):
    if dataclasses.is_dataclass(obj):
        out = {}
        for f in dataclasses.fields(obj):
            out |= _flat(getattr(obj, f.name), f"{prefix}{f.name}.")
        return out
    return {prefix[:-1]: obj}


def _diff(a, b) -> set[str]:
    fa, fb = _flat(a), _flat(b)
    return {k for k in fa if fa[k] != fb.get(k)}


ALWAYS = {"name", "run_dir"}


def test_arms_differ_only_where_they_should():
    grpo, oracle = _cfg("grpo"), _cfg("oracle")
    assert _diff(grpo, oracle) - ALWAYS == {
        "algorithm.step_rewards",
        "algorithm.step_source",
        "algorithm.oracle_closing_step",
    }
    # setting 3: RL on 4-6 words, the oracle judges the closing tokens (docs/last_letter.md)
    assert (grpo.data.letters.min_words, grpo.data.letters.max_words) == (4, 6)
    assert oracle.algorithm.oracle_closing_step and not grpo.algorithm.oracle_closing_step
    noisy = _cfg("noisy_oracle,q=0.3")
    assert _diff(oracle, noisy) - ALWAYS == {"algorithm.oracle_flip_prob"}
    assert noisy.algorithm.oracle_flip_prob == 0.3 and oracle.algorithm.oracle_flip_prob == 0.0
    assert _diff(oracle, _cfg("oracle,alpha0=0.5")) - ALWAYS == {"algorithm.alpha.alpha0"}
    tango, fixed = _cfg("tango"), _cfg("fixed_verifier")
    assert oracle.algorithm.step_source is StepSource.ORACLE
    assert tango.algorithm.step_source is StepSource.VERIFIER and fixed.verifier.enable
    assert not fixed.verifier.trainable and not grpo.verifier.enable
    for cfg in (grpo, oracle, noisy, tango, fixed):  # one α horizon: the 36 generator steps
        assert cfg.algorithm.alpha.total_steps == 36
        assert cfg.generator == grpo.generator and cfg.data == grpo.data and cfg.eval == grpo.eval
    assert tango.schedule.total_steps == 10 + 48 and tango.schedule.verifier_warmup_steps == 10
    # the fixed generator: tango's 22 verifier updates, no generator update
    frozen = _cfg("fixed_generator")
    assert _diff(tango, frozen) - ALWAYS == {
        "generator.trainable",
        "schedule.total_steps",
        "schedule.generator_trainable",
        "algorithm.alpha.total_steps",
        "eval.every_verifier_steps",
        "eval.sampled",
    }
    assert frozen.schedule.count(Kind.VERIFIER) == tango.schedule.count(Kind.VERIFIER) == 22
    assert frozen.schedule.count(Kind.GENERATOR) == 0


def test_bad_config_strings():
    with pytest.raises(ValueError, match="unknown variant 'orcle'"):
        _cfg("orcle")
    with pytest.raises(ValueError, match="q=Q \\(noisy_oracle only\\)"):
        _cfg("oracle,q=0.1")
    with pytest.raises(ValueError, match="unknown option 'scrath'"):
        _cfg("grpo,scrath")
