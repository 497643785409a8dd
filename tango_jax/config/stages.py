"""The run config's stages around RL (`RunConfig.sft`, `.eval`, `.checkpoint`): supervised
fine-tuning of each role before RL, evaluation, and checkpointing.

Part of the single schema with tango_jax/config/run.py (which embeds these); each field is defined
once, here, with its comment and default.
"""

from __future__ import annotations

import dataclasses

from tango_jax.rl.train_step import (
    LossConfig,
    LRSchedule,
    Objective,
    OptimizerConfig,
    TrainerConfig,
)
from tango_jax.schema import apply_derived, at_least, check_fields, derived
from tango_jax.tango.kind import Kind

# TANGO_SPEC §5: lr 5e-6, cosine with 10% warm-up, AdamW (0.9, 0.95), no KL or entropy term;
# micro-batch 2 per GPU x 8 GPUs.
_SFT_TRAINER = TrainerConfig(
    optimizer=OptimizerConfig(
        learning_rate=5e-6, schedule=LRSchedule.COSINE, warmup_ratio=0.1, b2=0.95
    ),
    loss=LossConfig(objective=Objective.SFT, kl_coef=0.0, entropy_coef=0.0),
    micro_batch_size=16,
)


@dataclasses.dataclass(frozen=True)
class SFTStage:
    """Supervised fine-tuning of one role before RL (cross-entropy on response tokens)."""

    enable: bool = False
    steps: int = 800  # optimiser steps (paper: 800 at batch 64)
    batch_size: int = 64  # examples per step
    trainer: TrainerConfig = dataclasses.field(
        default=_SFT_TRAINER,
        metadata=derived(**{"optimizer.total_steps": ("steps", lambda c: c.steps)}),
    )
    # JSONL of SFT records: {"prompt", "response"}, or {"question", "response"} (generator:
    # the prompt is the generator template) / {"question", "solution", "response"} (verifier).
    # Empty: the synthetic task's SFT set (data.source = synthetic).
    data_path: str = ""
    num_examples: int = 20_000  # synthetic SFT set size (tiny configs)
    # Verifier only: start from the generator's RL start checkpoint (its SFT result) instead of
    # verifier.model. A tiny random-init verifier learns to copy the solution's numbers rather
    # than recompute them; one that starts from a generator that can already do the arithmetic
    # recomputes (docs/miniature.md). Needs the two models to share architecture and tokenizer.
    start_from_generator: bool = False
    # Verifier only: every batch half examples whose verdict is CORRECT and half INCORRECT
    # (each half drawn at random from its class), so the SFT start is not tilted towards one
    # verdict by which examples a seed happens to draw (docs/verifier.md). False: drawn at
    # random from all examples.
    balance_verdicts: bool = False

    def __post_init__(self):
        apply_derived(self)
        check_fields(
            self, {"steps": at_least(1), "batch_size": at_least(1), "num_examples": at_least(1)}
        )


@dataclasses.dataclass(frozen=True)
class SFTConfig:
    generator: SFTStage = SFTStage()
    verifier: SFTStage = SFTStage()

    def __post_init__(self):
        if self.generator.start_from_generator:
            raise ValueError(
                "sft.generator.start_from_generator=True: only the verifier can start from the "
                "generator; set sft.verifier.start_from_generator instead."
            )
        if self.generator.balance_verdicts:
            raise ValueError(
                "sft.generator.balance_verdicts=True: only the verifier's SFT examples have "
                "verdicts; set sft.verifier.balance_verdicts instead."
            )

    def stage(self, role: Kind) -> SFTStage:
        return self.generator if role is Kind.GENERATOR else self.verifier


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    before_train: bool = True
    every_generator_steps: int = 10  # 0: only before/after (official test_freq = 10)
    # Also after every k-th verifier update (0: never); for runs where the verifier trains
    # alone (the fixed-generator ablation, or a long verifier warm-up)
    every_verifier_steps: int = 0
    at_end: bool = True
    after_verifier_warmup: bool = True
    # Also score one sample per problem at the training temperature (seeded): the held-out
    # counterpart of the rollouts' accuracy, which is what RL optimises; the paper reports
    # greedy pass@1 only.
    sampled: bool = False
    sampled_n: int = 1  # samples per problem for the sampled accuracy (more: less noise)
    # Synthetic task: the verifier's ProcessBench-style step F1 on this many held-out solutions
    # with a known first wrong step (half correct); 0 disables.
    process_bench_size: int = 128
    # The verifier's balanced probe: this many held-out replies of the start generator, half
    # right and half wrong (sampled at the training temperature, kept in the run directory),
    # judged greedily at every evaluation (`eval/probe/...`: balanced accuracy, the share
    # called CORRECT, the answer step's label; docs/verifier.md); 0 disables it.
    verifier_probe_size: int = 0
    # At the end of a run on a task with step truth: the verifier's step ranking before and
    # after RL (tango_jax/eval/step_probe.py), teacher-forced in PyTorch, float32, on the CPU,
    # which loads the start and the final verifier in turn; off for a verifier too large for
    # that (without PyTorch the run says "not measured" on its own).
    step_ranking: bool = True

    def __post_init__(self):
        check_fields(
            self,
            {
                "every_generator_steps": at_least(0, " (0: only before and after training)"),
                "every_verifier_steps": at_least(0, " (0: not on verifier updates)"),
                "sampled_n": at_least(1),
                "process_bench_size": at_least(0, " (0 disables it)"),
                "verifier_probe_size": at_least(0, " (0 disables it)"),
            },
        )


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
    every_steps: int = 50  # global steps; 0 disables periodic saves
    # Also save when this many minutes have passed since the last save (0: never), decided at
    # the end of a step, so a long step at 7B never leaves hours unsaved. Such a checkpoint is
    # kept until the next one is saved; `keep` counts only the every_steps / at_end ones.
    every_minutes: float = 30.0
    keep: int = 3
    at_end: bool = True
    export_hf_at_end: bool = True  # write run_dir/hf/<role> at the end

    def __post_init__(self):
        check_fields(
            self,
            {
                "every_steps": at_least(0, " (0 disables periodic saves)"),
                "every_minutes": at_least(0, " (0 disables time-based saves)"),
                "keep": at_least(1, " (the last good step must survive)"),
            },
        )
