"""Which model trains at each global step (TANGO_SPEC §1.2).

Global steps count from 1. Each is exactly one of a generator step (G) or a verifier step (V):

    1 .. Wg                 generator warm-up: G steps on the rule-based reward only
    Wg+1 .. Wg+Wv           verifier warm-up: V steps on the frozen initial generator
    then                    [G x N_g, V x N_v] repeated (or [V x N_v, G x N_g] if the
                            initial mode is the verifier)

With the verifier disabled (plain GRPO) or frozen (the "fixed verifier" ablation) every step
after the generator warm-up is a G step; with the generator frozen (the "fixed generator"
ablation, paper Fig. 4) every step is a V step on the initial generator. The α schedule's
horizon (`alpha_horizon`) follows the official `_calculate_training_steps`.
"""

from __future__ import annotations

import dataclasses

from tango_jax.tango.kind import Kind


@dataclasses.dataclass(frozen=True)
class Phase:
    kind: Kind
    warmup: bool  # generator warm-up (rule reward only) or verifier warm-up


@dataclasses.dataclass(frozen=True)
class Schedule:
    total_steps: int
    verifier_warmup_steps: int = 40
    generator_warmup_steps: int = 0
    n_generator_steps: int = 3
    n_verifier_steps: int = 1
    initial_mode: Kind = Kind.GENERATOR
    verifier_trainable: bool = True  # False: verifier disabled or frozen -> no V steps
    generator_trainable: bool = True  # False: generator frozen -> only V steps

    def __post_init__(self):
        if self.total_steps < 0:
            raise ValueError(
                f"schedule.total_steps ({self.total_steps}) must be >= 0 (0: SFT only)."
            )
        for name in ("verifier_warmup_steps", "generator_warmup_steps"):
            if getattr(self, name) < 0:
                raise ValueError(f"schedule.{name} ({getattr(self, name)}) must be >= 0.")
        if self.verifier_trainable and (self.n_generator_steps < 1 or self.n_verifier_steps < 1):
            raise ValueError(
                f"schedule.n_generator_steps ({self.n_generator_steps}) and n_verifier_steps "
                f"({self.n_verifier_steps}) must both be >= 1 when the verifier trains."
            )
        if not self.generator_trainable:
            if not self.verifier_trainable:
                raise ValueError(
                    "generator.trainable=False with no trainable verifier: nothing would train; "
                    "set verifier.enable=True and verifier.trainable=True (the fixed-generator "
                    "ablation trains only the verifier)."
                )
            if self.generator_warmup_steps:
                raise ValueError(
                    f"schedule.generator_warmup_steps ({self.generator_warmup_steps}) must be 0 "
                    "when the generator is frozen (generator.trainable=False)."
                )
        warmups = self.generator_warmup_steps + self.verifier_warmup_steps
        if self.generator_trainable and self.total_steps and self.total_steps <= warmups:
            raise ValueError(self._inside_warmups())
        if not self.verifier_trainable and self.verifier_warmup_steps:
            raise ValueError(
                f"schedule.verifier_warmup_steps ({self.verifier_warmup_steps}) must be 0 when the "
                "verifier is disabled or frozen (there is no verifier to warm up); otherwise those "
                "steps would silently shrink the generator's budget."
            )

    def _inside_warmups(self) -> str:
        """Why a run that ends within its warm-ups is refused, and the fixes (a short run of
        a Tango config meets this first: the paper's 40 verifier warm-up steps)."""
        g, v = self.generator_warmup_steps, self.verifier_warmup_steps

        def span(first: int, n: int, role: str) -> str:
            steps = f"step {first} is" if n == 1 else f"steps {first}-{first + n - 1} are"
            return f"{steps} {role} warm-up (schedule.{role}_warmup_steps)"

        spans = [span(1, g, "generator")] if g else []
        spans += [span(g + 1, v, "verifier")] if v else []
        t = self.total_steps  # the fix: the longest warm-ups that leave the last step a G step
        if g < t:
            fix = f"--config.schedule.verifier_warmup_steps={t - g - 1}"
        else:
            fix = f"--config.schedule.generator_warmup_steps={t - 1}"
            fix += " --config.schedule.verifier_warmup_steps=0" if v else ""
        return (
            f"schedule.total_steps ({self.total_steps}) must exceed the warm-ups: "
            f"{' and '.join(spans)}, so the generator is not trained "
            f"{'past its warm-up ' if g else ''}in this run; for a short run lower the warm-up "
            f"too ({fix}), give more than {g + v} steps, or 0 for an SFT-only run."
        )

    def phase(self, step: int) -> Phase:
        """The phase of global step `step` (1-based)."""
        if not 1 <= step <= self.total_steps:
            raise ValueError(f"step {step} is outside 1..{self.total_steps}.")
        if step <= self.generator_warmup_steps:
            return Phase(Kind.GENERATOR, warmup=True)
        if step <= self.generator_warmup_steps + self.verifier_warmup_steps:
            return Phase(Kind.VERIFIER, warmup=True)
        if not self.verifier_trainable:
            return Phase(Kind.GENERATOR, warmup=False)
        if not self.generator_trainable:
            return Phase(Kind.VERIFIER, warmup=False)
        pos = step - self.generator_warmup_steps - self.verifier_warmup_steps - 1
        cycle = self.n_generator_steps + self.n_verifier_steps
        first, first_len = (
            (Kind.GENERATOR, self.n_generator_steps)
            if self.initial_mode is Kind.GENERATOR
            else (Kind.VERIFIER, self.n_verifier_steps)
        )
        second = Kind.VERIFIER if first is Kind.GENERATOR else Kind.GENERATOR
        return Phase(first if pos % cycle < first_len else second, warmup=False)

    def count(self, kind: Kind, upto: int | None = None) -> int:
        """Number of `kind` steps among global steps 1..upto (default: all)."""
        upto = self.total_steps if upto is None else upto
        return sum(self.phase(s).kind is kind for s in range(1, upto + 1))

    @property
    def alpha_horizon(self) -> int:
        """T_g of the α schedule, by the official formula (T:175-232): the alternating steps'
        generator share, int(remaining · N_g / (N_g + N_v)), or all remaining steps without
        verifier updates. It equals the number of scheduled generator steps after the warm-up
        when the alternating steps are whole cycles (440 steps: 300) and can be one short
        otherwise (307 steps: 200 vs 201 scheduled), as in the official code. >= 1."""
        remaining = self.total_steps - self.generator_warmup_steps - self.verifier_warmup_steps
        if not self.verifier_trainable:
            return max(1, remaining)
        cycle = self.n_generator_steps + self.n_verifier_steps
        return max(1, remaining * self.n_generator_steps // cycle)
