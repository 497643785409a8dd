"""Tiny Tango on long arithmetic chains (5-8 steps), the claim-2 setting, on a 2-core CPU.

    python -m tango_jax.train --config configs/tiny_chains.py                   # Tango
    python -m tango_jax.train --config configs/tiny_chains.py:grpo              # outcome only
    python -m tango_jax.train --config configs/tiny_chains.py:oracle            # true step labels
    python -m tango_jax.train --config configs/tiny_chains.py:noisy_oracle,q=0.35
    python -m tango_jax.train --config configs/tiny_chains.py:oracle,alpha0=0.5
    python -m tango_jax.train --config configs/tiny_chains.py:fixed_verifier
    python -m tango_jax.train --config configs/tiny_chains.py:fixed_generator
    python -m tango_jax.train --config configs/tiny_chains.py:tango,scratch     # SFT in the run

The config string is VARIANT[,OPTION...]; OPTION is `scratch` (random init and the SFT inside
the run instead of the SFT checkpoints in tango_jax/assets/tiny_chains_sft/), `q=Q`
(noisy_oracle's flip probability, default 0.35) or `alpha0=A` (the α schedule's start, default
the paper's 0.1 for GRPO).

The task is the arithmetic miniature's (tango_jax/data/synthetic.py, configs/tiny_arith.py) with
longer chains: 5-8 operations instead of 3. Every step still states its operands and its result
(`12 * 3 = 36`), so a 2-layer verifier can check it where it stands (claim 1 holds on the
3-step chains: step-ranking AUROC 0.732 -> 0.822 over 10 seeds), while a sampled solution now
has 5-8 places to go wrong: more groups are all wrong, and outcome-only credit is spread over
more steps, the conditions under which step rewards are expected to help
(docs/last_letter.md, "What to try next"; docs/chains.md).

Arms, as on last letters (every arm starts from the same SFT checkpoints, samples the same
prompt stream and is evaluated on the same held-out samples per seed, so differences are
paired):
  * tango: the verifier's step judgments; 10 verifier warm-up steps, then [G, G, G, V];
  * grpo: outcome reward only, no verifier;
  * fixed_verifier: the SFT verifier's step judgments, the verifier never updated;
  * oracle: the task's step truth (+1 before the first wrong step, -1 from it on) through the
    same step-advantage path (run/oracle_feedback.py), no verifier, the closing tokens judged
    too (algorithm.oracle_closing_step);
  * noisy_oracle: the oracle's labels, each flipped with probability q;
  * fixed_generator: the verifier's RL on the frozen SFT generator (its step-F1 curve).
Every arm that trains the generator makes GENERATOR_STEPS generator updates, evaluated every
EVAL_EVERY, with the same α schedule over them.

SFT checkpoints: not shipped yet. `python scripts/assets/make_tiny_sft.py --config
configs/tiny_chains.py --out tango_jax/assets/tiny_chains_sft` makes them (the miniature's three
phases on these chains, hours on 2 cores; the generator's SFT is shorter, so that it keeps room
to learn), `,scratch` runs the SFT inside the run, and a generator of one's own is
`--config.generator.model.path=...`. The seed-0 gate on this setting failed: no arm learns in 36
updates at lr 1e-4 (docs/chains.md).
"""

from pathlib import Path

import tango_jax
from tango_jax.config.run import base_config
from tango_jax.config.tiny import tiny_role
from tango_jax.study.arms import STUDY_ARMS, apply_study_arm

VARIANTS = STUDY_ARMS
SFT_ASSETS = Path(tango_jax.__file__).resolve().parent / "assets" / "tiny_chains_sft"
GENERATOR_STEPS = 36  # generator updates of every arm that trains the generator
EVAL_EVERY = 12  # generator updates between held-out evaluations
VERIFIER_WARMUP = 10  # tango only: verifier steps before the first generator step
MIN_STEPS, MAX_STEPS = 5, 8
# The generator's SFT, stopped early so that RL has room (make_tiny_sft.py phase 1). Seed 0,
# held-out greedy / sampled accuracy after 300, 600, 800, 950 and 1200 steps (cosine lr 3e-3 over
# each length): 0.06 / 0.05, 0.18 / 0.08, 0.59 / 0.39, 1.00 / 0.81, 1.00 / 0.82 (docs/chains.md).
# The verifier's phases are the miniature's (configs/tiny_arith.py, make_tiny_sft.py).
GENERATOR_SFT_STEPS = 800
VERIFIER_SFT_STEPS = 2000


def _options(arg: str) -> tuple[str, bool, float, float]:
    """(variant, scratch, q, alpha0) from 'VARIANT[,scratch][,q=Q][,alpha0=A]'."""
    variant, *options = arg.split(",")
    if variant not in VARIANTS:
        raise ValueError(
            f"unknown variant {variant!r} in config string {arg!r}; choose one of {VARIANTS}."
        )
    scratch, q, alpha0 = False, 0.35, 0.1
    for option in options:
        key, eq, value = option.partition("=")
        if option == "scratch":
            scratch = True
        elif eq and key == "q" and variant == "noisy_oracle":
            q = float(value)
        elif eq and key == "alpha0":
            alpha0 = float(value)
        else:
            raise ValueError(
                f"unknown option {option!r} in config string {arg!r}: write scratch, "
                "alpha0=A, or q=Q (noisy_oracle only)."
            )
    return variant, scratch, q, alpha0


def get_config(arg: str = "tango"):
    variant, scratch, q, alpha0 = _options(arg)
    c = base_config()
    suffix = "" if variant == "tango" else f"_{variant}"
    suffix += f"_q{q:g}" if variant == "noisy_oracle" else ""
    suffix += f"_a{alpha0:g}" if alpha0 != 0.1 else ""
    c.name = f"tiny_chains{suffix}"
    c.run_dir = f"runs/tiny_chains{suffix}"
    c.scorer_workers = 1  # integer answers: nothing to parallelise
    c.data.prompt_style = "compact"
    c.data.prompts_per_step = 32
    arith = c.data.arith
    arith.min_steps, arith.max_steps = MIN_STEPS, MAX_STEPS
    # The verifier's SFT data: the miniature's (configs/tiny_arith.py, make_tiny_sft.py).
    arith.verifier_sft_labels = "unlabelled"
    arith.verifier_sft_analysis = "compare"
    arith.verifier_sft_facts = 0.5
    # 256 held-out problems x 4 samples: 1,024 sampled answers per evaluation
    c.data.eval_size = 256
    c.eval.sampled = True
    c.eval.sampled_n = 4
    c.eval.every_generator_steps = EVAL_EVERY
    c.eval.after_verifier_warmup = True
    c.eval.process_bench_size = 128
    c.checkpoint.every_steps = 20
    c.checkpoint.keep = 2
    # 8 steps: solutions up to ~145 tokens, verifications up to ~345 after a ~250-token prompt
    for name, seed, max_tokens, max_prompt_len in (
        ("generator", 1, 160, 128),
        ("verifier", 2, 352, 288),
    ):
        sft_assets = None if scratch else SFT_ASSETS
        tiny_role(c, name, seed=seed, max_tokens=max_tokens, max_prompt_len=max_prompt_len,
                  sft_assets=sft_assets, learning_rate=1e-4)  # the miniature's  # fmt: skip
    c.schedule.total_steps = VERIFIER_WARMUP + GENERATOR_STEPS * 4 // 3  # [G, G, G, V] cycles
    c.schedule.verifier_warmup_steps = VERIFIER_WARMUP
    c.algorithm.alpha.alpha0 = alpha0
    c.algorithm.verifier_consistent_verdict = True  # the miniature's (docs/miniature.md)
    c.algorithm.class_reweight = "inverse"
    for stage, steps in (
        (c.sft.generator, GENERATOR_SFT_STEPS),
        (c.sft.verifier, VERIFIER_SFT_STEPS),
    ):
        stage.enable = scratch
        stage.steps = steps
        stage.batch_size = 32
        stage.trainer.optimizer.learning_rate = 3e-3
        stage.trainer.micro_batch_size = 8
        stage.num_examples = steps * 32  # every example seen about once
    if variant not in ("tango", "fixed_generator"):
        c.eval.after_verifier_warmup = False  # these arms have no verifier warm-up
    return apply_study_arm(
        c, variant, generator_steps=GENERATOR_STEPS, verifier_warmup=VERIFIER_WARMUP, q=q
    )
