"""Claim 2 on a real model: SmolLM2-135M-Instruct on arithmetic chains answered one operation per
line, each line checkable where it stands, on a 2-core CPU.

    python -m tango_jax.train --config configs/smollm2_line_chains.py:grpo     # outcome only
    python -m tango_jax.train --config configs/smollm2_line_chains.py:oracle   # true line labels
    python -m tango_jax.train --config configs/smollm2_line_chains.py:tango    # + a verifier

The task (tango_jax/data/line_chains.py, `data.source = "line_chains"`): "Start with 7. Add 5,
then multiply by 2, then subtract 3. What is the result? Write one calculation per line, like
"7 + 5 = 12"." as the user turn of the chat template, 3-5 operations (data.arith: start 1..9,
add or subtract 1..5, multiply by 2..3, every value within 0..20), rewarded 1 when the reply's
last integer is the answer (`final_number_reward`). Every non-blank line of a reply is a step
(`data.step_split = "lines"`, in every arm, so the arms share their data settings); the
oracle's line labels are exact (`line_chains.first_error`: the line's arithmetic is right and
it uses the previous line's result).

Room to learn (docs/claim2_real.md; 256 answers each at T = 1, the project's JAX sampler):
zero-shot the instruct model is right on 0.03-0.08 of its replies and writes ~2 lines, below
the band the design asks for (accuracy 0.1-0.4, at least 2.5 lines a reply), so every arm
starts with the same short generator format SFT on reference solutions written one operation
per line (`sft.generator`: the task's own SFT set, 16 steps of 8, the chat template around the
prompts; ~2.5 min). After it: sampled accuracy 0.26, 4.0 lines a reply, first errors spread
over lines 1-4, 44% of groups of 4 all wrong.

Arms (tango_jax/study/arms.py; every arm runs the same SFT from the same seed, samples the same
prompt stream and is evaluated on the same held-out samples, so differences are paired):
  * grpo: the outcome reward only;
  * oracle: the task's line truth (+1 before the first wrong line, -1 from it on, the closing
    tokens judged too) through exactly the step advantage Tango's verifier labels take
    (run/oracle_feedback.py): the control that says whether step rewards can help here at all;
  * tango: SmolLM2 also as the verifier, shown one <step> per line, after a format SFT on the
    task's verification transcripts; VERIFIER_WARMUP updates, then [G, G, G, V].
Every arm makes GENERATOR_STEPS generator updates with the same α schedule over them.
The other hyperparameters are configs/smollm2_addition.py's (TRL's GRPO defaults where they
exist), on which GRPO takes SmolLM2 from 0.28 to 0.93 held-out sampled accuracy in 30 updates.
Every field is documented where its dataclass is defined (tango_jax/config/run.py).
"""

from tango_jax.config.run import base_config
from tango_jax.study.arms import apply_study_arm

VARIANTS = ("grpo", "oracle", "tango")
MODEL = "models/SmolLM2-135M-Instruct"  # relative to the repository root, where runs start
PROMPT = "tango_jax/assets/addition/generator_prompt.json"  # the bare question
REWARD = "tango_jax.data.line_chains:final_number_reward"
PROMPTS_PER_STEP = 8
GROUP = 8  # TRL's default num_generations, as smollm2_addition
GENERATOR_STEPS = 30  # smollm2_addition's: GRPO's whole rise there
EVAL_EVERY = 10  # generator updates between held-out evaluations
EVAL_PROBLEMS, EVAL_SAMPLES = 64, 4  # 256 sampled answers per evaluation (s.e. ~0.03)
MAX_TOKENS = 96  # 5 lines of "12 * 2 = 24" are ~40 tokens; room for the model's own words
# The generator's format SFT (docs/claim2_real.md measured its room): 1e-4 as smollm2_arith's
# format SFT, batches of 8, every example seen once; reference solutions only (the model's own
# slips give the room: 0.26 sampled after it on 3-5 operations; 0.47 on 2-4, above the band).
GENERATOR_SFT_STEPS = 16
MIN_OPS, MAX_OPS = 3, 5  # operations per chain (data.arith.min_steps, max_steps)
SFT_SLIPS = 0.0  # share of SFT solutions with one slip (data.arith.slip_fraction)
VERIFIER_WARMUP = 2  # tango: verifier updates on the start generator's rollouts (paper: 40)
VERIFIER_TOKENS = 192  # a verification of ~6 lines: ~25 tokens a step and the verdict


def get_config(variant: str = "grpo"):
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose one of {VARIANTS}.")
    c = base_config()
    c.name = f"smollm2_line_chains_{variant}"
    c.run_dir = f"runs/smollm2_line_chains_{variant}"
    c.scorer_workers = 1  # the reward is a regex; a second process only competes for the cores
    c.drift_all_batches = False
    c.checkpoint.every_steps = 0
    c.checkpoint.at_end = False  # the HF export at the end is what is kept (not Adam's state)

    d = c.data
    d.source = "line_chains"
    d.arith.min_steps, d.arith.max_steps = MIN_OPS, MAX_OPS
    d.arith.slip_fraction = SFT_SLIPS
    d.arith.verifier_sft_labels = "random_step"  # the tango verifier's SFT (smollm2_arith's)
    d.arith.verifier_sft_analysis = "recompute"
    d.reward = REWARD
    d.step_split = "lines"  # the model writes no <step> tags: each line is a step
    d.prompts_per_step = PROMPTS_PER_STEP
    d.verifier_stream = True  # tango's verifier updates draw their own prompts: paired arms
    d.eval_size = EVAL_PROBLEMS
    d.prompt_style = "compact"  # the verifier's (tango); the generator's is the file below
    d.template_files.generator_train = PROMPT

    c.eval.every_generator_steps = EVAL_EVERY
    c.eval.after_verifier_warmup = False
    c.eval.sampled = True  # held-out accuracy at the training temperature (what RL optimises)
    c.eval.sampled_n = EVAL_SAMPLES
    c.eval.process_bench_size = 0  # a synthetic-task measurement
    c.eval.step_ranking = False  # SmolLM2's tokenizer splits CORRECT / INCORRECT

    c.algorithm.eps = 1e-4  # TRL's floor under the group std, as smollm2_addition
    g = c.generator
    g.model.path = MODEL
    g.chat_template = True
    g.dtype = "float32"  # a CPU has no fast bf16
    g.remat = False  # 135M parameters, short sequences: activations fit
    g.max_prompt_len = 96  # 71-86 tokens in the chat template, its system turn included
    g.rollout.n = GROUP
    g.rollout.max_tokens = MAX_TOKENS
    g.response_bucket = 16  # train batches padded to a multiple of 16 tokens
    g.sampler.prompt_bucket = 16
    g.sampler.max_rows = 64
    g.trainer.optimizer.learning_rate = 1e-5
    g.trainer.optimizer.weight_decay = 0.0  # HF Trainer's default
    g.trainer.loss.kl_coef = 0.0  # TRL's beta = 0: no reference model
    g.trainer.loss.entropy_coef = 0.0
    g.trainer.loss.agg_mode = "token-mean"  # TRL's loss_type="dapo"
    g.trainer.micro_batch_size = 16
    sft = c.sft.generator
    sft.enable = True
    sft.steps = GENERATOR_SFT_STEPS
    sft.batch_size = 8
    sft.num_examples = GENERATOR_SFT_STEPS * 8
    sft.trainer.optimizer.learning_rate = 1e-4
    sft.trainer.micro_batch_size = 8

    v = c.verifier
    v.model.path = MODEL
    v.chat_template = True
    v.dtype = "float32"
    v.remat = False
    v.rollout.n = 2  # verifications per solution in verifier updates (paper 5: CPU time)
    v.rollout.max_tokens = VERIFIER_TOKENS
    v.max_prompt_len = 256  # the question and a 96-token reply as <step> lines, chat template
    v.response_bucket = VERIFIER_TOKENS
    v.sampler.prompt_bucket = 32
    v.sampler.max_rows = 64
    v.trainer.optimizer.learning_rate = 1e-5
    v.trainer.optimizer.weight_decay = 0.0
    v.trainer.loss.kl_coef = 0.0
    v.trainer.loss.entropy_coef = 0.0
    v.trainer.micro_batch_size = 16
    vsft = c.sft.verifier
    vsft.enable = True  # the task's verification transcripts (data.arith's labels, analyses)
    vsft.steps = 16
    vsft.batch_size = 8
    vsft.num_examples = 16 * 8
    vsft.trainer.optimizer.learning_rate = 1e-4  # smollm2_arith's format SFT
    vsft.trainer.micro_batch_size = 8
    c.log_rollouts.every_steps = 1  # every rollout and its step labels, for the analysis
    c.log_rollouts.max_rows = PROMPTS_PER_STEP * GROUP
    c.schedule.verifier_warmup_steps = VERIFIER_WARMUP
    c.schedule.total_steps = VERIFIER_WARMUP + GENERATOR_STEPS * 4 // 3  # [G, G, G, V]
    return apply_study_arm(
        c, variant, generator_steps=GENERATOR_STEPS, verifier_warmup=VERIFIER_WARMUP, q=0.0
    )
