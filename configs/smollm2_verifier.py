"""Claim 1 on a real model: SmolLM2-135M-Instruct as a verifier that learns from outcome rewards
alone, on the replies of a fixed generator, with the paper's verifier recipe as far as a 2-core
CPU allows.

    python -m tango_jax.train --config configs/smollm2_verifier.py:rl --config.seed=0
    python -m tango_jax.train --config configs/smollm2_verifier.py:rl --config.seed=1 \
        --config.data.seed=1                        # a study seed: its own data order

The task is configs/smollm2_addition.py's (small additions, the reply's last integer graded),
with the generator frozen at the instruct model (the `fixed_generator` arm: verifier RL only).
It samples at T = 0.7, where it is right on ~0.3-0.4 of its replies (T = 1: 0.20), so right and
wrong replies are both common; the verifier samples at T = 1 as in the paper.

The verifier: a format SFT with balanced batches (`sft.verifier.balance_verdicts`) on
transcripts that read the reply's answer back before comparing it with the sum
("Step 1 Analysis: The reply says 11. 5 + 8 = 13, not 11.":
tango_jax/assets/addition/verifier_sft_restated.jsonl, SFT_STEPS batches of 8), then RL with
the paper's recipe (TANGO_SPEC §1.4, §3.4, §6) where the CPU allows:
  * 5 verifications per solution (the paper's ROLLOUT_N);
  * KL to the SFT verifier 1e-3 (k3, low_var_kl) and an entropy bonus of 1e-3;
  * AdamW with weight decay 0.01, constant learning rate;
  * 32 solutions per update (paper 256): 160 verifications;
  * every update is a verifier-only update on the frozen generator's replies, as the paper's
    40 warm-up updates are.
What differs from the paper, and why, is in docs/verifier.md ("Claim 1 on SmolLM2").

Variant `tango`: the same verifier inside configs/smollm2_addition.py:tango, Tango against the
GRPO records of the TRL comparison, paired: the generator, its data order and its schedule are
that config's (2 verifier warm-up updates, then [G, G, G, V] for 30 generator updates), and the
verifier's updates take SOLUTIONS prompts each from a stream of their own
(`data.verifier_stream`, `data.verifier_prompts_per_step`), so that every generator update
takes the batch of the GRPO run's update of the same number (docs/real_model.md).

    python -m tango_jax.train --config configs/smollm2_verifier.py:tango --config.seed=1 \
        --config.run_dir=runs/smollm2_verifier_tango_s1

Measured at every evaluation on a balanced probe (`eval.verifier_probe_size`): 64 held-out
replies of the generator, 32 right and 32 wrong, judged greedily (`eval/probe/...`).
Every field is documented where its dataclass is defined (tango_jax/config/run.py).
"""

from tango_jax.config.run import sibling_config

VARIANTS = ("rl", "tango")
UPDATES = 9  # verifier updates, ~6 min each on 2 cores: a run inside an hour
SOLUTIONS = 32  # generator replies per verifier update (one per prompt)
VERIFICATIONS = 5  # per reply (paper: 5)
GENERATOR_T = 0.7  # the frozen generator's sampling temperature (see above)
PROBE = 64  # balanced held-out replies, half right and half wrong
LEARNING_RATE = 1e-5  # chosen on seed 0 (docs/verifier.md)
# The seed-0 pilot's three settings (docs/verifier.md). The first, configs/smollm2_addition.py's
# SFT (16 steps on transcripts that only recompute the sum), started at chance and drifted to
# INCORRECT; reproduce it with
# --config.sft.verifier.data_path=tango_jax/assets/addition/verifier_sft.jsonl
# --config.verifier.rollout.max_tokens=128 --config.verifier.response_bucket=128
# The second, 48 steps of the transcripts below (--config.sft.verifier.steps=48), started good
# and RL left it flat. The third, 16 steps of them (this config), starts weaker and RL improves it.
SFT_DATA = "tango_jax/assets/addition/verifier_sft_restated.jsonl"
SFT_STEPS = 16  # 128 of its 576 transcripts: a start that leaves RL room
VERIFIER_TOKENS = 192  # the SFT's longest transcript is 160 tokens (a 3-line reply, restated)


def verifier_recipe(c) -> None:
    """The claim-1 verifier (both variants): its format SFT and its RL recipe."""
    c.sft.verifier.balance_verdicts = True
    c.sft.verifier.data_path = SFT_DATA
    c.sft.verifier.steps = SFT_STEPS
    c.eval.verifier_probe_size = PROBE
    v = c.verifier
    v.rollout.n = VERIFICATIONS
    v.rollout.max_tokens = v.response_bucket = VERIFIER_TOKENS
    v.sampler.max_rows = SOLUTIONS * VERIFICATIONS // 2  # two batches of 80: memory
    v.trainer.micro_batch_size = 8  # memory (the KL reference is a third copy)
    v.trainer.optimizer.learning_rate = LEARNING_RATE
    v.trainer.optimizer.weight_decay = 0.01
    v.trainer.loss.kl_coef = 1e-3
    v.trainer.loss.entropy_coef = 1e-3


def get_config(variant: str = "rl"):
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose one of {VARIANTS}.")
    c = sibling_config(__file__, "smollm2_addition").get_config("tango")
    verifier_recipe(c)
    if variant == "tango":
        # configs/smollm2_addition.py:tango's generator, data order and schedule, unchanged; the
        # verifier's updates draw SOLUTIONS prompts each from a stream of their own, so the
        # generator's 30 updates take exactly the GRPO runs' batches (data.seed as theirs: 1)
        c.data.verifier_stream = True
        c.data.verifier_prompts_per_step = SOLUTIONS
    else:
        c.generator.trainable = False
        c.generator.rollout.temperature = GENERATOR_T
        c.generator.rollout.n = 1  # a verifier update judges one reply per prompt
        c.data.prompts_per_step = SOLUTIONS
        c.schedule.verifier_warmup_steps = UPDATES  # every update verifier-only, frozen replies
        c.schedule.total_steps = UPDATES
        c.eval.every_verifier_steps = 3
        c.eval.after_verifier_warmup = False  # the end-of-run evaluation is that one
        c.eval.sampled = False  # the generator does not change
        c.log_rollouts.every_steps = 1
        c.log_rollouts.max_rows = SOLUTIONS * VERIFICATIONS
    c.name = f"smollm2_verifier_{variant}"
    c.run_dir = f"runs/smollm2_verifier_{variant}"
    return c
