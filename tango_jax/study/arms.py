"""The arms of a claim-2 study, as config transforms: one Tango config in, one arm out.

    c = apply_study_arm(base, "oracle", generator_steps=36, verifier_warmup=2, q=0.0)

Arms of one seed share the generator's start, prompts and evaluation, so their differences are
paired (docs/last_letter.md, docs/chains.md).
"""

from __future__ import annotations

from ml_collections import config_dict as mlc

STUDY_ARMS = ("tango", "grpo", "fixed_verifier", "oracle", "noisy_oracle", "fixed_generator")


def apply_study_arm(
    c: mlc.ConfigDict, variant: str, *, generator_steps: int, verifier_warmup: int, q: float
) -> mlc.ConfigDict:
    """Turns a Tango config (`verifier_warmup` verifier steps, then [G, G, G, V] cycles for
    `generator_steps` generator updates) into one arm of a claim-2 study (configs/tiny_letters.py,
    configs/tiny_chains.py): tango as it is; fixed_generator, the verifier's updates on a frozen
    generator (as many as tango makes); the other arms, the same generator updates with no
    verifier updates: fixed_verifier with the frozen verifier's step judgments, grpo without a
    step term, oracle with the task's step truth (the closing tokens judged too), noisy_oracle
    with those labels flipped with probability `q`."""
    if variant not in STUDY_ARMS:
        raise ValueError(f"unknown arm {variant!r}; choose one of {STUDY_ARMS}.")
    if variant == "fixed_generator":  # tango's verifier updates, the generator never updated
        c.generator.trainable = False
        c.schedule.total_steps = verifier_warmup + generator_steps // 3
        c.eval.every_verifier_steps = 4
        c.eval.sampled = False  # the generator does not change: its step-0 numbers stand
        return c
    if variant != "tango":  # the same generator steps, no verifier updates
        c.verifier.trainable = False
        c.schedule.total_steps = generator_steps
        c.schedule.verifier_warmup_steps = 0
    if variant in ("grpo", "oracle", "noisy_oracle"):
        c.verifier.enable = False
        c.sft.verifier.enable = False
    if variant == "grpo":
        c.algorithm.step_rewards = False
    if variant in ("oracle", "noisy_oracle"):
        c.algorithm.step_source = "oracle"
        c.algorithm.oracle_flip_prob = q if variant == "noisy_oracle" else 0.0
        c.algorithm.oracle_closing_step = True
    return c
