"""Tiny Tango on last-letter concatenation (paper §4.3, App. D.2), end to end on a 2-core CPU.

    python -m tango_jax.train --config configs/tiny_letters.py                  # Tango, 13 min
    python -m tango_jax.train --config configs/tiny_letters.py:tango,study      # the study's run
    python -m tango_jax.train --config configs/tiny_letters.py:tango,fast       # the short study
    python -m tango_jax.train --config configs/tiny_letters.py:grpo             # outcome only
    python -m tango_jax.train --config configs/tiny_letters.py:oracle           # true step labels
    python -m tango_jax.train --config configs/tiny_letters.py:noisy_oracle,q=0.2
    python -m tango_jax.train --config configs/tiny_letters.py:oracle,alpha0=0.5
    python -m tango_jax.train --config configs/tiny_letters.py:fixed_verifier
    python -m tango_jax.train --config configs/tiny_letters.py:fixed_generator
    python -m tango_jax.train --config configs/tiny_letters.py:tango,scratch    # SFT in the run

The config string is VARIANT[,OPTION...]; OPTION is `study` or `fast` (the study's length,
below), `scratch` (random init and the SFT inside the run instead of the shipped SFT checkpoints),
`q=Q` (noisy_oracle's flip probability, default 0.2) or `alpha0=A` (the α schedule's start,
default the paper's 0.1 for GRPO).

Length: with `study`, every arm makes 36 generator updates, evaluated after 0, 12, 24 and 36
(the runs of `python -m tango_jax.study --task last_letter` and docs/last_letter.md; a Tango run
takes ~36 min alone on the 2-core CPU). With `fast`, the short study (study.py --length fast):
12 generator updates, evaluated after 0, 4, 8 and 12 on 250 held-out problems of the trained
lengths only (1,000 sampled answers; no unseen-length bucket, which is 0 at this scale), and
not after tango's warm-up; at this length the oracle's gain over GRPO is not above 0 (seeds
1-10), so the study's results are the `study` runs'. Without either, the same run halved so
that the plain command is a quick end-to-end look: 18 generator updates (tango: 6 verifier
updates after the 10 warm-up ones), evaluated at the start and the end only (not after
tango's warm-up).

The task (tango_jax/data/last_letter.py): words of 2-4 random letters; RL on 4-6 words, held-out
evaluation on 4-6 words (in-distribution) and 7-8 words (unseen lengths), each bucket reported
apart; the SFT on 2-6 words (make_letters_sft.py). The paper's lengths (RL 2-10, test 2-12,
SFT 2-4) scaled by about 0.6 for a 2-layer model on a CPU; RL leaves out the 2-3 word lists,
which the SFT generator mostly gets right, so that more groups are all wrong and a step signal
has more to add (setting 3, docs/last_letter.md).

Arms (every arm starts from the same SFT checkpoints, samples the same prompt stream and is
evaluated on the same held-out samples per seed, so differences are paired):
  * tango: the verifier's step judgments; 10 verifier warm-up steps, then [G, G, G, V];
  * grpo: outcome reward only, no verifier;
  * fixed_verifier: the SFT verifier's step judgments, the verifier never updated;
  * oracle: the task's step truth (+1 before the first wrong step, -1 from it on) through the
    same step-advantage path (run/oracle_feedback.py), no verifier; it also judges the closing
    tokens after the last step (algorithm.oracle_closing_step), so a solution that stops early
    is wrong where it stops;
  * noisy_oracle: the oracle's labels, each flipped with probability q;
  * fixed_generator: the verifier's RL on the frozen SFT generator, as many verifier updates as
    tango makes (its step-F1 curve; paper Fig. 4).
Every arm that trains the generator has the same number of generator steps (`GENERATOR_STEPS`,
`STUDY_GENERATOR_STEPS` with `study`) and the same α schedule over them.

SFT checkpoints: tango_jax/assets/tiny_letters_sft/, made by
`python scripts/assets/make_letters_sft.py` (a generator SFT and a verifier SFT from random
init). Results over seeds: `python -m tango_jax.study --task last_letter`, docs/last_letter.md.
"""

from pathlib import Path

import tango_jax
from tango_jax.config.run import base_config
from tango_jax.config.tiny import tiny_role
from tango_jax.study.arms import STUDY_ARMS, apply_study_arm

VARIANTS = STUDY_ARMS
SFT_ASSETS = Path(tango_jax.__file__).resolve().parent / "assets" / "tiny_letters_sft"
STUDY_GENERATOR_STEPS = 36  # generator updates of every arm, with `study`
STUDY_EVAL_EVERY = 12  # generator updates between evaluations, with `study`
FAST_GENERATOR_STEPS = 12  # with `fast`
FAST_EVAL_EVERY = 4
FAST_EVAL_SIZE = 250  # held-out problems of the trained lengths, with `fast`
GENERATOR_STEPS = 18  # without `study`: evaluated at the start and the end
VERIFIER_WARMUP = 10  # tango only: verifier steps before the first generator step
# the run name's suffix per length option ('' : neither, the quick run); the letters study
# (tango_jax/study/letters.py) reads a run's length back from it
LENGTH_SUFFIX = {"study": "", "fast": "_fast", "": "_quick"}


def _options(arg: str) -> tuple[str, bool, float, float, str]:
    """(variant, scratch, q, alpha0, length) from
    'VARIANT[,study|,fast][,scratch][,q=Q][,alpha0=A]'; length is 'study', 'fast' or ''."""
    variant, *options = arg.split(",")
    if variant not in VARIANTS:
        raise ValueError(
            f"unknown variant {variant!r} in config string {arg!r}; choose one of {VARIANTS}."
        )
    scratch, q, alpha0, length = False, 0.2, 0.1, ""
    for option in options:
        key, eq, value = option.partition("=")
        if option == "scratch":
            scratch = True
        elif option in ("study", "fast"):
            if length and length != option:
                raise ValueError(
                    f"options {length!r} and {option!r} in config string {arg!r} are two "
                    "lengths: choose one."
                )
            length = option
        elif eq and key == "q" and variant == "noisy_oracle":
            q = float(value)
        elif eq and key == "alpha0":
            alpha0 = float(value)
        else:
            raise ValueError(
                f"unknown option {option!r} in config string {arg!r}: write study, fast, "
                "scratch, alpha0=A, or q=Q (noisy_oracle only)."
            )
    return variant, scratch, q, alpha0, length


def get_config(arg: str = "tango"):
    variant, scratch, q, alpha0, length = _options(arg)
    study = length == "study"
    g_steps = {"study": STUDY_GENERATOR_STEPS, "fast": FAST_GENERATOR_STEPS}.get(
        length, GENERATOR_STEPS
    )
    c = base_config()
    suffix = "" if variant == "tango" else f"_{variant}"
    suffix += f"_q{q:g}" if variant == "noisy_oracle" else ""
    suffix += f"_a{alpha0:g}" if alpha0 != 0.1 else ""
    suffix += LENGTH_SUFFIX[length]
    c.name = f"tiny_letters{suffix}"
    c.run_dir = f"runs/tiny_letters{suffix}"
    c.scorer_workers = 1  # exact string match: nothing to parallelise
    c.data.source = "last_letter"
    c.data.prompt_style = "compact"
    c.data.prompts_per_step = 32
    # 350 held-out problems x 4 samples: 1400 sampled answers per evaluation, 876 of them on
    # the trained lengths (standard error of an accuracy near 0.35: ~0.016)
    # the SFT's word counts: the whole RL range (make_letters_sft.py: format SFT on 2-3 words,
    # then this length SFT on 2-6 words, then the verifier's SFT)
    c.data.letters.sft_max_words = 6
    c.data.letters.min_words = 4  # RL and evaluation; the SFT commands set 2
    c.data.eval_size = 350
    c.eval.sampled = True
    c.eval.sampled_n = 4
    # study: 4 evaluations, after 0, 12, 24 and 36 generator updates; fast: after 0, 4, 8 and
    # 12; else at the start and end
    c.eval.every_generator_steps = {"study": STUDY_EVAL_EVERY, "fast": FAST_EVAL_EVERY}.get(
        length, g_steps
    )
    c.eval.after_verifier_warmup = study  # quick and fast: no evaluation after tango's warm-up
    if length == "fast":  # 250 x 4 = 1,000 sampled answers, all on the trained lengths
        c.data.letters.unseen_max_words = c.data.letters.max_words
        c.data.eval_size = FAST_EVAL_SIZE
    c.eval.process_bench_size = 128
    c.checkpoint.every_steps = 20
    c.checkpoint.keep = 2
    # ~14 + k tokens for step k: 6 words ~125 tokens of solution, 8 words ~170
    # generator lr 3e-5: at 1e-4 (the arithmetic miniature's) GRPO first lost a fifth of the
    # SFT generator's accuracy (docs/last_letter.md); the verifier keeps 1e-4
    for name, seed, max_tokens, max_prompt_len, lr in (
        ("generator", 1, 192, 128, 3e-5),
        ("verifier", 2, 224, 384, 1e-4),
    ):
        sft_assets = None if scratch else SFT_ASSETS
        tiny_role(c, name, seed=seed, max_tokens=max_tokens, max_prompt_len=max_prompt_len,
                  sft_assets=sft_assets, learning_rate=lr)  # fmt: skip
    c.schedule.total_steps = VERIFIER_WARMUP + g_steps * 4 // 3  # [G, G, G, V] cycles
    c.schedule.verifier_warmup_steps = VERIFIER_WARMUP
    c.algorithm.alpha.alpha0 = alpha0
    c.algorithm.verifier_consistent_verdict = True  # what worked on arithmetic (docs/miniature.md)
    c.algorithm.class_reweight = "inverse"
    for stage, steps in ((c.sft.generator, 500), (c.sft.verifier, 1000)):
        stage.enable = scratch
        stage.steps = steps
        stage.batch_size = 32
        stage.trainer.optimizer.learning_rate = 3e-3
        stage.trainer.micro_batch_size = 8
        stage.num_examples = steps * 32
    c.sft.verifier.start_from_generator = scratch
    return apply_study_arm(
        c, variant, generator_steps=g_steps, verifier_warmup=VERIFIER_WARMUP, q=q
    )
