"""The co-evolution loop: SFT (optional), verifier warm-up, then [G x N_g, V x N_v] cycles.

    TangoLoop(run_config, mesh).run()

Run directory layout:
    config.json            the validated config of the run
    initial/<role>/        HF checkpoints of randomly initialised presets (tiny configs)
    sft/<role>/            HF checkpoints after the SFT stage (RL starts from these)
    checkpoints/<step>/    orbax checkpoints (both trainers, host state), last k kept
    metrics.jsonl          one line per global step (and step 0: evaluation before training)
    tensorboard/           the same metrics for TensorBoard
    hf/<role>/             HF export of the final models

Resume: with `resume=True` and a checkpoint in run_dir, the loop restores both trainers, the
schedule position, the class-balance EMA and the data position; sampling seeds are a function
of (seed, step), so the following steps reproduce an uninterrupted run's metrics exactly (the
JAX backend; vLLM's own kernels are not bit-reproducible across restarts). With
`overlap_rollouts` the pipeline is drained at every checkpoint step (tango/overlap.py), so the
same holds.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import jax
from jax.experimental import multihost_utils

from tango_jax import preflight
from tango_jax.checkpoint import CHECKPOINT_SUBDIR, ModelInfo, RunCheckpointer
from tango_jax.checkpoint_guards import check_finite, last_good
from tango_jax.config import RunConfig, enabled_roles, trained_roles
from tango_jax.config_roles import SamplerBackend
from tango_jax.data import last_letter, last_letter_labels, synthetic_labels
from tango_jax.data.datasets import StreamPosition
from tango_jax.data.prompts import DataSource, load_prompts
from tango_jax.data.tokenizer import load_tokenizer
from tango_jax.metrics import MetricsWriter, NoMetrics, PhaseTimer, Progress
from tango_jax.models import save_pretrained
from tango_jax.tango.class_balance import ClassBalanceState
from tango_jax.tango.divergence import DivergenceError, GuardAction, divergence_signs
from tango_jax.tango.evaluation import evaluate
from tango_jax.tango.overlap import Prefetch
from tango_jax.tango.process_bench import ProcessItem
from tango_jax.tango.roles import Role, build_role
from tango_jax.tango.schedule import Kind
from tango_jax.tango.scoring_pool import OutcomeScorer
from tango_jax.tango.sft import initial_path, rl_start_path
from tango_jax.tango.steps import StepContext, collect, generator_step, verifier_step
from tango_jax.tracking import wandb_sink

if TYPE_CHECKING:
    from jax.sharding import Mesh

log = logging.getLogger("tango_jax")


class TangoLoop:
    """`mesh`: the devices both models train and (with the JAX sampler) sample on; train.py
    builds it from `cfg.mesh` and checks the micro-batches against it."""

    def __init__(self, cfg: RunConfig, mesh: Mesh):
        self.cfg, self.mesh = cfg, mesh
        self.run_dir = Path(cfg.run_dir)
        self.schedule = cfg.schedule
        self.process_items: list[ProcessItem] = []  # set by _data (synthetic task only)
        self.timer = PhaseTimer()  # phases of a training step
        self.eval_timer = PhaseTimer()

    # --- set-up ------------------------------------------------------------------------------

    def _data(self, position: StreamPosition | None):
        """(training prompt stream at `position`, held-out evaluation problems)."""
        d = self.cfg.data
        if d.source is DataSource.SYNTHETIC and self.cfg.eval.process_bench_size:
            self.process_items = synthetic_labels.process_items(
                d.arith, self.cfg.eval.process_bench_size, seed=d.seed
            )
        if d.source is DataSource.LAST_LETTER and self.cfg.eval.process_bench_size:
            self.process_items = last_letter_labels.process_items(
                d.letters, self.cfg.eval.process_bench_size, seed=d.seed
            )
        return load_prompts(
            self.cfg.data,
            max_prompt_len=self.cfg.generator.max_prompt_len,
            position=position,
            tokenizer=lambda: load_tokenizer(initial_path(self.cfg, Kind.GENERATOR, self.run_dir)),
            chat_template=self.cfg.generator.chat_template,
        )

    def _build_roles(self) -> dict[Kind, Role]:
        """Every enabled role from its RL starting checkpoint: all SFT stages first (each
        writes a checkpoint), then the models, trainers and samplers."""
        cfg, mesh = self.cfg, self.mesh
        paths = {k: rl_start_path(cfg, k, self.run_dir, mesh=mesh) for k in enabled_roles(cfg)}
        trained = trained_roles(cfg)
        return {
            k: build_role(k, cfg.role(k), path, mesh, with_trainer=k in trained)
            for k, path in paths.items()
        }

    # --- the run -----------------------------------------------------------------------------

    def run(self) -> dict[str, float]:
        cfg = self.cfg
        preflight.check(cfg)  # refuses before anything is written (train.py checked it too)
        if jax.process_count() > 1:  # every process checked the run_dir before it is written
            multihost_utils.sync_global_devices("tango_jax preflight")
        if jax.process_index() == 0:  # several trainer processes: process 0 writes files
            preflight.write_config(cfg)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        ckpt_dir = self.run_dir / CHECKPOINT_SUBDIR
        host = None
        if cfg.resume and ckpt_dir.exists():
            reader = RunCheckpointer(ckpt_dir, keep=cfg.checkpoint.keep)
            if reader.latest_step() is not None:
                host = reader.host()["host_state"]
            reader.close()
        # Data first: a missing or unusable file fails before SFT or any model loads.
        stream, eval_problems = self._data(None if host is None else StreamPosition(**host["data"]))
        built = self._build_roles()
        gen, ver = built[Kind.GENERATOR], built.get(Kind.VERIFIER)
        trained = {kind: built[kind] for kind in trained_roles(cfg)}
        ckpt = RunCheckpointer(
            ckpt_dir,
            keep=cfg.checkpoint.keep,
            models={
                k.value: ModelInfo.from_model(r.model, r.init_path) for k, r in trained.items()
            },
        )
        scorer = OutcomeScorer(num_workers=cfg.scorer_workers, timeout_s=cfg.scorer_timeout_s)
        ctx = StepContext(cfg, gen, ver, scorer)
        state = {
            "step": 0,
            "updates": {kind.value: 0 for kind in Kind},
            "class_balance": ClassBalanceState().to_dict(),
        }
        metrics = None
        try:
            if host is not None:
                state = self._restore(ckpt, trained)
                if state["step"] != host["step"]:  # the latest was unreadable: an older one
                    stream, _ = self._data(StreamPosition(**state["data"]))
                log.info("resumed from step %d", state["step"])
            metrics = self._metrics_writer(None if host is None else state["step"])
            if host is None and cfg.eval.before_train:
                metrics.write(0, self._evaluate(ctx, eval_problems), phase="eval")
            final = self._train(ctx, trained, stream, eval_problems, ckpt, metrics, state)
            if cfg.checkpoint.export_hf_at_end:
                for r in built.values():
                    if r.model is not None:  # a frozen vLLM role: unchanged
                        out = self.run_dir / "hf" / r.name
                        save_pretrained(r.model, out, tokenizer=r.tokenizer, overwrite=True)
            return final
        finally:
            ckpt.close()
            if metrics is not None:
                metrics.close()
            scorer.close()
            for r in built.values():
                r.sampler.close()

    def _length_bucket(self):
        """The held-out problems' length bucket (last-letter task: 'in' / 'unseen'), or None."""
        d = self.cfg.data
        if d.source is not DataSource.LAST_LETTER:
            return None
        return lambda p: d.letters.bucket(len(last_letter.parse_question(p.question).words))

    def _evaluate(self, ctx: StepContext, problems) -> dict[str, float]:
        out = evaluate(
            ctx.generator,
            ctx.verifier,
            problems,
            ctx.scorer,
            timeout_s=self.cfg.scorer_timeout_s,
            timer=self.eval_timer,
            style=self.cfg.data.templates,
            format_weight=self.cfg.algorithm.verifier_format_weight,
            sampled_seed=self.cfg.seed if self.cfg.eval.sampled else None,
            sampled_n=self.cfg.eval.sampled_n,
            process_items=self.process_items,
            bucket=self._length_bucket(),
        )
        # Its own timer: evaluation time is reported as perf/eval_*, never as the step's time.
        timings = self.eval_timer.metrics()
        timings["perf/eval_s"] = timings.pop("perf/step_s")
        return out | timings

    def _metrics_writer(self, resume_step: int | None) -> MetricsWriter | NoMetrics:
        """Appends after `resume_step`; a run restarted before its first checkpoint starts its
        metrics over (an existing run with resume=False never gets here: `preflight.check`)."""
        exists = (self.run_dir / "metrics.jsonl").exists()
        if resume_step is None and exists:
            resume_step = -1  # no checkpoint yet: drop the crashed attempt's lines, start over
        if jax.process_index() != 0:  # several trainer processes: process 0 writes metrics
            return NoMetrics()
        return MetricsWriter(
            self.run_dir,
            tensorboard=self.cfg.tensorboard,
            resume_step=resume_step,
            wandb=wandb_sink(self.cfg, self.run_dir),
        )

    def _restore(self, ckpt: RunCheckpointer, trained: dict[Kind, Role]) -> dict:
        trainers, host = ckpt.restore(None, _trainer_states(trained))
        for r in trained.values():
            r.trainer.load_state_dict(trainers[r.name])
            r.version = host["updates"][r.name]
            r.sync()  # a vLLM server starts from the checkpoint on disk: send it these weights
        return host

    def _train(self, ctx, trained, stream, eval_problems, ckpt, metrics, state) -> dict[str, float]:
        sched = self.schedule
        final: dict[str, float] = {}
        class_state = ClassBalanceState.from_dict(state["class_balance"])
        updates = dict(state["updates"])
        norms = {kind: r.trainer.param_norm() for kind, r in trained.items()}  # before updates
        ahead: Prefetch | None = None  # the next step's rollouts, collected beside an update
        with Progress("tango steps", total=sched.total_steps - state["step"]) as bar:
            for step in range(state["step"] + 1, sched.total_steps + 1):
                phase = sched.phase(step)
                problems = ahead.problems if ahead is not None else stream.next_batch()
                rollouts = ahead.rollouts if ahead is not None else None
                prefetched = rollouts is not None
                if rollouts is None:
                    rollouts = collect(
                        ctx, problems, global_step=step, phase=phase, timer=self.timer
                    )
                ahead = self._prefetch(ctx, step, stream) if self._prefetch_due(step) else None
                if phase.kind is Kind.GENERATOR:
                    out = generator_step(
                        ctx,
                        rollouts,
                        update_index=updates[Kind.GENERATOR.value] - sched.generator_warmup_steps,
                        timer=self.timer,
                        during_update=ahead,
                    )
                else:
                    out, class_state = verifier_step(
                        ctx,
                        rollouts,
                        class_state=class_state,
                        timer=self.timer,
                        during_update=ahead,
                    )
                if self.cfg.overlap_rollouts:
                    out["rollout/prefetched"] = float(prefetched)
                    out |= ahead.metrics() if ahead is not None else {}
                role = phase.kind.value
                updates[role] += 1
                # Before anything of this step is written or saved: a saved step is a good one.
                check_finite(out, role=role, step=step, checkpointer=ckpt)
                self._check_divergence(out, trained[phase.kind], step, norms, ckpt)
                for r in (ctx.generator, ctx.verifier):  # vLLM: restarts, retries, drops
                    if r is not None:
                        out |= {f"{r.name}/{k}": v for k, v in r.sampler.metrics().items()}
                out |= self.timer.metrics()
                out |= {f"schedule/{k}_updates": n for k, n in updates.items()}
                if self._eval_due(step, phase, updates):
                    final = self._evaluate(ctx, eval_problems)
                    out |= final
                metrics.write(step, out, phase=role + ("_warmup" if phase.warmup else ""))
                log.info("step %d %s %s", step, role, _summary(out, phase.kind))
                if self._save_due(step):
                    ckpt.save(
                        step,
                        _trainer_states(trained),
                        {
                            "step": step,
                            "updates": dict(updates),  # a copy: saved in the background
                            "class_balance": class_state.to_dict(),
                            "data": dataclasses.asdict(stream.position),
                        },
                    )
                bar.update(1)
        return final

    def _check_divergence(self, out, role: Role, step: int, norms: dict, ckpt) -> None:
        """Stops (or warns) on a sign that the update destroyed the model (tango/divergence.py);
        `norms` holds each role's parameter norm before its update and is advanced here."""
        cfg = self.cfg.divergence
        signs = divergence_signs(
            out,
            role=role.name,
            prev_param_norm=norms[role.kind],
            vocab_size=role.model.config.vocab_size,
            cfg=cfg,
        )
        norms[role.kind] = out[f"{role.name}/train/param_norm"]
        if not signs:
            return
        message = f"{role.name} step {step} looks diverged: {'; '.join(signs)}"
        if cfg.action is GuardAction.WARN:
            log.warning("%s (divergence.action=warn: going on)", message)
            return
        raise DivergenceError(
            f"{message}. The run stops before saving this step; {last_good(ckpt)}. Lower the "
            "learning rate, or set divergence.action=warn (or a looser threshold) if this is "
            "expected, then resume from that checkpoint."
        )

    def _eval_due(self, step: int, phase, updates) -> bool:
        e, sched = self.cfg.eval, self.schedule
        if step == sched.total_steps:
            return e.at_end
        warmups = sched.generator_warmup_steps + sched.verifier_warmup_steps
        if e.after_verifier_warmup and warmups and step == warmups:  # the end of the warm-ups
            return True
        return (
            phase.kind is Kind.GENERATOR
            and e.every_generator_steps > 0
            and updates[Kind.GENERATOR.value] % e.every_generator_steps == 0
        )

    def _prefetch_due(self, step: int) -> bool:
        """Overlap: the next step is collected beside this step's update, except at the last
        step and at checkpoint steps (the drain that keeps resume exact, tango/overlap.py)."""
        return (
            self.cfg.overlap_rollouts
            and step < self.schedule.total_steps
            and not self._save_due(step)
        )

    def _prefetch(self, ctx: StepContext, step: int, stream) -> Prefetch:
        """Step `step + 1`'s collection, planned now (its problems taken from the stream).
        In a background thread when every sampler is a vLLM service; else right before the
        update (the embedded sampler shares the trainer's arrays and devices)."""
        nxt, phase = step + 1, self.schedule.phase(step + 1)
        roles = [r for r in (ctx.generator, ctx.verifier) if r is not None]
        background = all(r.config.sampler.backend is SamplerBackend.VLLM for r in roles)
        return Prefetch(
            nxt,
            stream.next_batch(),
            lambda problems, timer: collect(
                ctx, problems, global_step=nxt, phase=phase, timer=timer
            ),
            background=background,
            samplers=[r.sampler for r in roles] if background else (),
        )

    def _save_due(self, step: int) -> bool:
        c = self.cfg.checkpoint
        return (step == self.schedule.total_steps and c.at_end) or (
            c.every_steps > 0 and step % c.every_steps == 0
        )


def _trainer_states(trained: dict[Kind, Role]) -> dict:
    return {r.name: r.trainer.state_dict() for r in trained.values()}


def _summary(out: dict[str, float], role: Kind) -> str:
    keys = {
        Kind.GENERATOR: (
            "generator/accuracy",
            "generator/reward/mean",
            "generator/alpha",
            "generator/train/loss",
        ),
        Kind.VERIFIER: (
            "verifier/verdict_accuracy",
            "verifier/reward/mean",
            "verifier/f1",
            "verifier/train/loss",
        ),
    }[role] + ("eval/generator/accuracy", "eval/verifier/verdict_accuracy", "perf/step_s")
    return " ".join(f"{k.split('/', 1)[1]}={out[k]:.3f}" for k in keys if k in out)
