"""configs/tiny_letters.py: every arm loads, and arms differ only where the arm says so (the
same SFT start, data, evaluation, optimiser, generator steps and α schedule)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tango_jax.config.files import load_config_file
from tango_jax.config.run import StepSource, load_run_config
from tango_jax.tango.kind import Kind

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def _cfg(arg: str):
    return load_run_config(load_config_file(CONFIGS / "tiny_letters.py").get_config(arg))


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


def _arm(arg: str, study: bool):
    """The arm `arg` (VARIANT[,OPTION...]), at the study's length or the plain command's."""
    variant, *opts = arg.split(",")
    return _cfg(",".join([variant, *(["study"] * study), *opts]))


@pytest.mark.parametrize("study", [True, False], ids=["study", "quick"])
def test_arms_differ_only_where_they_should(study):
    def cfg(arg: str):
        return _arm(arg, study)

    g_steps = 36 if study else 18
    grpo, oracle = cfg("grpo"), cfg("oracle")
    assert _diff(grpo, oracle) - ALWAYS == {
        "algorithm.step_rewards",
        "algorithm.step_source",
        "algorithm.oracle_closing_step",
    }
    # setting 3: RL on 4-6 words, the oracle judges the closing tokens (docs/last_letter.md)
    assert (grpo.data.letters.min_words, grpo.data.letters.max_words) == (4, 6)
    assert oracle.algorithm.oracle_closing_step and not grpo.algorithm.oracle_closing_step
    noisy = cfg("noisy_oracle,q=0.3")
    assert _diff(oracle, noisy) - ALWAYS == {"algorithm.oracle_flip_prob"}
    assert noisy.algorithm.oracle_flip_prob == 0.3 and oracle.algorithm.oracle_flip_prob == 0.0
    assert _diff(oracle, cfg("oracle,alpha0=0.5")) - ALWAYS == {"algorithm.alpha.alpha0"}
    tango, fixed = cfg("tango"), cfg("fixed_verifier")
    assert oracle.algorithm.step_source is StepSource.ORACLE
    assert tango.algorithm.step_source is StepSource.VERIFIER and fixed.verifier.enable
    assert not fixed.verifier.trainable and not grpo.verifier.enable
    for c in (grpo, oracle, noisy, tango, fixed):  # one α horizon: the generator steps
        assert c.algorithm.alpha.total_steps == g_steps
        assert c.schedule.count(Kind.GENERATOR) == g_steps
        assert c.generator == grpo.generator and c.data == grpo.data and c.eval == grpo.eval
    assert tango.schedule.total_steps == 10 + g_steps * 4 // 3
    assert tango.schedule.verifier_warmup_steps == 10
    assert tango.eval.every_generator_steps == (12 if study else g_steps)
    # the fixed generator: tango's verifier updates, no generator update
    frozen = cfg("fixed_generator")
    assert _diff(tango, frozen) - ALWAYS == {
        "generator.trainable",
        "schedule.total_steps",
        "schedule.generator_trainable",
        "algorithm.alpha.total_steps",
        "eval.every_verifier_steps",
        "eval.sampled",
    }
    v_updates = 10 + g_steps // 3
    assert frozen.schedule.count(Kind.VERIFIER) == tango.schedule.count(Kind.VERIFIER) == v_updates
    assert frozen.schedule.count(Kind.GENERATOR) == 0


def test_bad_config_strings():
    with pytest.raises(ValueError, match="unknown variant 'orcle'"):
        _cfg("orcle")
    with pytest.raises(ValueError, match="q=Q \\(noisy_oracle only\\)"):
        _cfg("oracle,q=0.1")
    with pytest.raises(ValueError, match="unknown option 'scrath'"):
        _cfg("grpo,scrath")


def test_the_plain_command_is_the_study_run_halved():
    """Without `study`, each arm is its study run with half the generator updates, evaluated at
    the start and the end only; the study's runs are what docs/last_letter.md reports."""
    for arm in ("tango", "grpo", "oracle", "noisy_oracle,q=0.3", "fixed_generator"):
        study, quick = _arm(arm, True), _arm(arm, False)
        assert _diff(study, quick) - ALWAYS == {
            "schedule.total_steps",
            "eval.every_generator_steps",
            "eval.after_verifier_warmup",
            "algorithm.alpha.total_steps",
        }
        assert quick.name.endswith("_quick") and not study.name.endswith("_quick")


def test_the_fast_length_is_the_study_shortened_and_evaluated_on_trained_lengths():
    """`fast`: each arm is its study run with a third of the generator updates, evaluated every
    4 on 250 problems of the trained lengths (1,000 sampled answers), not after the warm-up;
    everything else, the arms' differences included, is the study's."""
    for arm in ("tango", "grpo", "oracle", "noisy_oracle,q=0.3", "fixed_verifier"):
        variant, *opts = arm.split(",")
        study, fast = _arm(arm, True), _cfg(",".join([variant, "fast", *opts]))
        assert _diff(study, fast) - ALWAYS == {
            "schedule.total_steps",
            "eval.every_generator_steps",
            "eval.after_verifier_warmup",
            "algorithm.alpha.total_steps",
            "data.eval_size",
            "data.letters.unseen_max_words",
        }
        assert fast.name.endswith("_fast") and fast.schedule.count(Kind.GENERATOR) == 12
        assert fast.algorithm.alpha.total_steps == 12 and fast.eval.every_generator_steps == 4
        letters = fast.data.letters
        assert letters.unseen_max_words == letters.max_words == 6  # every problem is 'in'
        assert fast.data.eval_size * fast.eval.sampled_n == 1000
    tango = _cfg("tango,fast")
    assert tango.schedule.total_steps == 10 + 16 and not tango.eval.after_verifier_warmup
    assert _cfg("fixed_generator,fast").schedule.count(Kind.VERIFIER) == 10 + 4
    with pytest.raises(ValueError, match="'study' and 'fast' .* two lengths: choose one"):
        _cfg("grpo,study,fast")


def test_the_letters_study_runs_every_arm_at_the_study_length():

    from tango_jax.study import letters as sl

    for arm in ("tango", "oracle,alpha0=0.5"):
        cmd = sl.study.command(Path("r"), arm, 3, [], "", sl.CONFIG, sl.OPTIONS)
        config = cmd[cmd.index("--config") + 1]
        assert config == f"{sl.CONFIG}:{arm},study"
        assert _cfg(config.split(":", 1)[1]).algorithm.alpha.total_steps == 36
