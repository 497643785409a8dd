"""Baselines and ablations of the paper's Qwen setting, as variants of
configs/tango_qwen2_5_math_7b.py (TANGO_SPEC §8, Table 1 and "Other claims and ablations"):

    python -m tango_jax.train --config configs/baselines_qwen2_5_math_7b.py:VARIANT [...]

  grpo                 vanilla GRPO: rule-based reward only, no verifier (Table 1 "GRPO")
  fixed_verifier       Tango with the verifier frozen at its initial weights (§4.3 ablation)
  rloo / rloo_tango    RLOO without / with Tango (Table 1)
  reinforce_pp / reinforce_pp_tango
                       REINFORCE++ without / with Tango: KL mse, no entropy bonus, α0 0.5
                       (RUN:67-81); tango_jax computes REINFORCE++'s step advantage correctly
                       (the official code's is always zero, TANGO_SPEC §10.11, §11)

All variants train 300 generator steps, like the Tango config; those without verifier updates
have no warm-up and no verifier steps, so total_steps = 300.
"""

from tango_jax.config.run import sibling_config

VARIANTS = ("grpo", "fixed_verifier", "rloo", "rloo_tango", "reinforce_pp", "reinforce_pp_tango")


def get_config(variant: str = "grpo"):
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose one of {VARIANTS}.")
    c = sibling_config(__file__, "tango_qwen2_5_math_7b").get_config()
    c.name = f"{variant}_qwen2_5_math_7b"
    c.run_dir = f"runs/{c.name}"
    tango = variant.endswith("tango") or variant == "fixed_verifier"
    estimator = variant.removesuffix("_tango")
    if estimator in ("rloo", "reinforce_pp"):
        c.algorithm.estimator = {"rloo": "rloo", "reinforce_pp": "reinforce_plus_plus"}[estimator]
    if estimator == "reinforce_pp":
        c.algorithm.alpha.alpha0 = 0.5
        for role in (c.generator, c.verifier):
            role.trainer.loss.kl_estimator = "mse"
            role.trainer.loss.entropy_coef = 0.0
    if not tango:  # rule-based reward only: no verifier at all
        c.verifier.enable = False
        c.verifier.trainable = False
        c.algorithm.step_rewards = False
    if variant == "fixed_verifier":
        c.verifier.trainable = False
    if not (tango and c.verifier.trainable):
        c.schedule.verifier_warmup_steps = 0
        c.schedule.total_steps = 300
    return c
