"""The global-step schedule against the official script's numbers (TANGO_SPEC §1.2)."""

from __future__ import annotations

import pytest

from tango_jax.tango.kind import Kind
from tango_jax.tango.schedule import Schedule


def test_official_440_steps():
    s = Schedule(total_steps=440, verifier_warmup_steps=40)
    assert s.count(Kind.GENERATOR) == 300 and s.count(Kind.VERIFIER) == 140
    assert s.alpha_horizon == 300
    assert [s.phase(i).kind for i in (1, 40)] == [Kind.VERIFIER] * 2
    assert all(s.phase(i).warmup for i in range(1, 41))
    cycle = [s.phase(i).kind for i in range(41, 49)]
    assert cycle == [Kind.GENERATOR] * 3 + [Kind.VERIFIER] + [Kind.GENERATOR] * 3 + [Kind.VERIFIER]
    assert not s.phase(41).warmup


def test_paper_default_200_generator_steps():
    s = Schedule(total_steps=307, verifier_warmup_steps=40)  # 40 + 200 * 4/3 ≈ 307
    assert s.count(Kind.GENERATOR) == 201  # the cycle starts with G: 66 cycles + G, G, G
    assert s.alpha_horizon == 200  # the official int(267 * 3 / 4)


def test_initial_mode_verifier_and_generator_warmup():
    s = Schedule(
        total_steps=12,
        verifier_warmup_steps=2,
        generator_warmup_steps=2,
        initial_mode=Kind.VERIFIER,
    )
    kinds = [s.phase(i).kind.value[0] for i in range(1, 13)]
    assert "".join(kinds) == "ggvv" + "vggg" + "vggg"
    assert s.phase(1).warmup and s.phase(3).warmup and not s.phase(5).warmup
    assert s.alpha_horizon == s.count(Kind.GENERATOR) - 2


def test_no_verifier_updates_means_all_generator_steps():
    s = Schedule(total_steps=10, verifier_warmup_steps=0, verifier_trainable=False)
    assert s.count(Kind.GENERATOR) == 10


def test_frozen_generator_means_all_verifier_steps():
    # the fixed-generator ablation: the warm-up and every later step are verifier updates
    s = Schedule(total_steps=12, verifier_warmup_steps=10, generator_trainable=False)
    assert s.count(Kind.VERIFIER) == 12 and s.count(Kind.GENERATOR) == 0
    assert s.phase(10).warmup and not s.phase(11).warmup
    assert (
        Schedule(total_steps=5, verifier_warmup_steps=0, generator_trainable=False).count(
            Kind.VERIFIER
        )
        == 5
    )
    with pytest.raises(ValueError, match="nothing would train"):
        Schedule(
            total_steps=5,
            verifier_warmup_steps=0,
            verifier_trainable=False,
            generator_trainable=False,
        )
    with pytest.raises(ValueError, match="generator_warmup_steps \\(2\\) must be 0"):
        Schedule(
            total_steps=5,
            verifier_warmup_steps=0,
            generator_warmup_steps=2,
            generator_trainable=False,
        )


def test_errors_name_the_field():
    with pytest.raises(ValueError, match="verifier_warmup_steps \\(40\\) must be 0"):
        Schedule(total_steps=50, verifier_warmup_steps=40, verifier_trainable=False)
    with pytest.raises(ValueError, match="n_verifier_steps \\(0\\)"):
        Schedule(total_steps=50, n_verifier_steps=0)
    with pytest.raises(ValueError, match="outside 1..50"):
        Schedule(total_steps=50).phase(51)
    with pytest.raises(ValueError, match="total_steps \\(30\\) must exceed the warm-ups"):
        Schedule(total_steps=30, verifier_warmup_steps=40)
    assert Schedule(total_steps=0).alpha_horizon == 1  # SFT-only runs are allowed
