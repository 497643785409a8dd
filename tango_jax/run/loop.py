"""The co-evolution loop: SFT (optional), verifier warm-up, then [G x N_g, V x N_v] cycles.

    TangoLoop(run_config, mesh).run()

Run directory layout:
    config.json            the validated config of the run
    initial/<role>/        HF checkpoints of randomly initialised presets (tiny configs)
    sft/<role>/            HF checkpoints after the SFT stage (RL starts from these)
    sft_checkpoints/<role>/  an SFT stage's progress (signal, every_minutes; gone once sft/ is)
    run.lock               held by the live run (run/lock.py): one run per directory
    checkpoints/<step>/    orbax checkpoints (both trainers, host state), last k kept
    metrics.jsonl          one line per global step (and step 0: evaluation before training)
    rollouts/              every log_rollouts.every_steps steps, what the models wrote
    tensorboard/           the same metrics for TensorBoard
    hf/<role>/             HF export of the final models

Resume: with `resume=True` and a checkpoint in run_dir, the loop restores both trainers, the
schedule position, the class-balance EMA and the data position; sampling seeds are a function
of (seed, step), so the following steps reproduce an uninterrupted run's metrics exactly (the
JAX backend; vLLM's own kernels are not bit-reproducible across restarts). With
`overlap_rollouts` the pipeline is drained at every checkpoint step (run/overlap.py), so the
same holds.

Signals (run/signals.py, docs/cluster.md): SIGTERM, SIGINT or SIGUSR1 end the run after the
step in flight, saved as a checkpoint like a periodic one; `checkpoint.every_minutes` saves at
the end of a step when that much time has passed since the last save. All processes agree on
both at the end of every step (`StopPoint.agree`).
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import jax
from jax.experimental import multihost_utils

from tango_jax.checkpoint.divergence import DivergenceError, GuardAction, divergence_signs
from tango_jax.checkpoint.run import (
    CHECKPOINT_SUBDIR,
    ModelInfo,
    RunCheckpointer,
    check_finite,
    last_good,
)
from tango_jax.config import preflight
from tango_jax.config.roles import SamplerBackend
from tango_jax.config.run import RunConfig, enabled_roles, trained_roles
from tango_jax.data.datasets import Problem, StreamPosition
from tango_jax.data.prompts import DataConfig, load_prompts
from tango_jax.data.tasks import task_of
from tango_jax.metrics.rollouts import RolloutLog
from tango_jax.metrics.wandb import wandb_sink
from tango_jax.metrics.writer import MetricsWriter, NoMetrics, PhaseTimer, StepClock
from tango_jax.models import save_pretrained
from tango_jax.run import feedback
from tango_jax.run.dynamic_sampling import StepBatches
from tango_jax.run.evaluation import EvalSettings, evaluate
from tango_jax.run.host_state import HostState
from tango_jax.run.overlap import Prefetch
from tango_jax.run.prompt_streams import VERIFIER_SEED_OFFSET, PhaseStreams
from tango_jax.run.roles import Role, build_role, start_samplers
from tango_jax.run.sft import initial_tokenizer, prepare_rl_start
from tango_jax.run.sft_progress import SFTStopped
from tango_jax.run.signals import StopPoint, StopSignals
from tango_jax.run.steps import StepContext, collect, generator_step, verifier_step
from tango_jax.run.verifier_health import CollapseGuard, UpdateVerdicts
from tango_jax.run.verifier_probe import VerifierProbe, one_sided
from tango_jax.schema import to_dict
from tango_jax.tango.class_balance import ClassBalanceState
from tango_jax.tango.kind import Kind
from tango_jax.text.process_bench import ProcessItem
from tango_jax.text.scoring_pool import OutcomeScorer

if TYPE_CHECKING:
    from jax.sharding import Mesh

log = logging.getLogger("tango_jax")


@dataclasses.dataclass
class RunState:
    """What the training steps of one run work on and carry from step to step
    (`TangoLoop._train`): the roles and their contexts, the data, the writers, and the state a
    checkpoint saves."""

    ctx: StepContext  # the config, both roles, the scorer, the rollout log
    trained: dict[Kind, Role]  # the roles with a trainer
    streams: PhaseStreams  # the training prompts of each phase
    eval_problems: list[Problem]
    ckpt: RunCheckpointer
    metrics: MetricsWriter | NoMetrics
    host: HostState  # where the run starts (step 0, or the checkpoint it resumed)
    updates: dict[str, int]  # role name -> updates so far
    class_state: ClassBalanceState  # the verifier's class-balance EMA
    norms: dict[Kind, float]  # each trained role's parameter norm before its last update
    point: StopPoint  # signals and time-based checkpoints
    clock: StepClock  # the progress line's time left
    ahead: Prefetch | None = None  # the next step's rollouts, collected beside an update
    final: dict[str, float] = dataclasses.field(default_factory=dict)  # the last evaluation


class TangoLoop:
    """`mesh`: the devices both models train and (with the JAX sampler) sample on; train.py
    builds it from `cfg.mesh` and checks the micro-batches against it. `stop`: the signals
    that end the run early with a checkpoint (run/signals.py); after `run`, `stopped_at` is
    the step it stopped after (None: it ran to the end), and `collapsed_at` the step at which
    `verifier.collapse_guard=stop` ended it (run/verifier_health.py)."""

    def __init__(self, cfg: RunConfig, mesh: Mesh, *, stop: StopSignals | None = None):
        self.cfg, self.mesh, self.stop = cfg, mesh, stop
        self.stopped_at: int | None = None
        self.collapsed_at: int | None = None
        self.collapse_guard = CollapseGuard(cfg.verifier.collapse_guard)
        self.run_dir = Path(cfg.run_dir)
        self.schedule = cfg.schedule
        self.process_items: list[ProcessItem] = []  # set by _data (tasks with step truth)
        self.probe: VerifierProbe | None = None  # set by _verifier_probe (eval.verifier_probe_size)
        self.timer = PhaseTimer()  # phases of a training step
        self.eval_timer = PhaseTimer()

    # --- set-up ------------------------------------------------------------------------------

    def _data(self, host: HostState | None) -> tuple[PhaseStreams, list]:
        """(the training prompt streams where `host` left them, held-out evaluation problems)."""
        d = self.cfg.data
        if self.cfg.eval.process_bench_size:  # the task's miniature ProcessBench, if it has one
            self.process_items = task_of(d).process_items(
                self.cfg.eval.process_bench_size, seed=d.seed
            )

        def load(data: DataConfig, position: StreamPosition | None):
            return load_prompts(
                data,
                max_prompt_len=self.cfg.generator.max_prompt_len,
                position=position,
                tokenizer=lambda: initial_tokenizer(self.cfg, Kind.GENERATOR),  # writes nothing
                chat_template=self.cfg.generator.chat_template,
            )

        stream, eval_problems = load(d, None if host is None else host.data)
        verifier = None
        if d.verifier_stream:
            own = dataclasses.replace(
                d, seed=d.seed + VERIFIER_SEED_OFFSET, prompts_per_step=d.verifier_batch
            )
            verifier, _ = load(own, None if host is None else host.verifier_data)
        return PhaseStreams(stream, verifier), eval_problems

    def _build_roles(self) -> dict[Kind, Role]:
        """Every enabled role from its RL starting checkpoint: all SFT stages first (each
        writes a checkpoint), then the models, trainers and samplers."""
        cfg, mesh = self.cfg, self.mesh
        paths = {
            k: prepare_rl_start(cfg, k, self.run_dir, mesh=mesh, stop=self.stop)
            for k in enabled_roles(cfg)
        }
        trained = trained_roles(cfg)
        roles = {}
        for k, path in paths.items():  # no server runs yet: nothing to close if one fails
            log.info("loading the %s from %s (model, trainer, sampler)", k.value, path)
            roles[k] = build_role(
                k, cfg.role(k), path, mesh, with_trainer=k in trained, start_sampler=False
            )
        start_samplers(roles.values())  # both roles' vLLM servers come up side by side
        return roles

    # --- the run -----------------------------------------------------------------------------

    def run(self) -> dict[str, float]:
        cfg = self.cfg
        # Refuses before anything is written (train.py checked too, and left the notes to us).
        for note in preflight.check(cfg):
            log.warning("%s", note)
        if jax.process_count() > 1:  # every process checked the run_dir before it is written
            multihost_utils.sync_global_devices("tango_jax preflight")
        ckpt_dir = self.run_dir / CHECKPOINT_SUBDIR
        host = None
        if cfg.resume and ckpt_dir.exists():
            reader = RunCheckpointer(ckpt_dir, keep=cfg.checkpoint.keep)
            if reader.latest_step() is not None:
                host = HostState.from_dict(reader.host()["host_state"])
            reader.close()
        # Data first: a missing or unusable file fails before SFT or any model loads.
        log.info("loading data (%s)", cfg.data.source.value)
        streams, eval_problems = self._data(host)
        # Only now the first write: a refused run (data included) leaves run_dir as it was.
        if jax.process_index() == 0:  # several trainer processes: process 0 writes files
            preflight.write_config(cfg)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        try:
            built = self._build_roles()
        except SFTStopped as e:  # a signal during an SFT stage, which saved its progress
            log.warning("%s; launch the same command to resume", e)
            self.stopped_at = 0
            return {}
        gen, ver = built[Kind.GENERATOR], built.get(Kind.VERIFIER)
        trained = {kind: built[kind] for kind in trained_roles(cfg)}
        ckpt = RunCheckpointer(
            ckpt_dir,
            keep=cfg.checkpoint.keep,
            scheduled=self._save_due,  # time and signal checkpoints: only the newest is kept
            models={
                k.value: ModelInfo.from_model(r.model, r.init_path, base_dir=r.init_path)
                for k, r in trained.items()
            },
        )
        scorer = OutcomeScorer(
            num_workers=cfg.scorer_workers,
            timeout_s=cfg.scorer_timeout_s,
            reward_function=cfg.data.reward,
        )
        ctx = StepContext(cfg, gen, ver, scorer)
        state = HostState()
        metrics = None
        try:
            if host is not None:
                state = self._restore(ckpt, trained)
                if state.step != host.step:  # the latest was unreadable: an older one
                    streams, _ = self._data(state)
                log.info("resumed from step %d", state.step)
            metrics = self._metrics_writer(None if host is None else state.step)
            ctx.rollout_log = self._rollout_log(state.step, metrics)
            self.probe = self._verifier_probe(ctx, eval_problems)
            if host is None and cfg.eval.before_train:
                before = self._evaluate(ctx, eval_problems)
                metrics.write(0, before, phase="eval")
                log.info(
                    "step 0/%d before training: %s", cfg.schedule.total_steps, _eval_summary(before)
                )
                if line := one_sided(before):
                    log.warning("before training, %s", line)
            run = RunState(
                ctx=ctx,
                trained=trained,
                streams=streams,
                eval_problems=eval_problems,
                ckpt=ckpt,
                metrics=metrics,
                host=state,
                updates=dict(state.updates),
                class_state=state.class_balance,
                norms={k: r.trainer.param_norm() for k, r in trained.items()},  # before updates
                point=StopPoint(self.stop, cfg.checkpoint.every_minutes),
                clock=StepClock(cfg.schedule.total_steps),
            )
            final = self._train(run)
            ended_early = self.stopped_at is not None or self.collapsed_at is not None
            if cfg.checkpoint.export_hf_at_end and not ended_early:
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

    def _evaluate(self, ctx: StepContext, problems) -> dict[str, float]:
        log.info(
            "evaluating on %d held-out problems (greedy%s)",
            len(problems),
            f", and {self.cfg.eval.sampled_n} samples each" if self.cfg.eval.sampled else "",
        )
        out = evaluate(
            ctx.generator,
            ctx.verifier,
            problems,
            ctx.scorer,
            EvalSettings.from_config(self.cfg),  # the run's answer check, split, prompts
            timer=self.eval_timer,
            process_items=self.process_items,
        )
        if self.probe is not None:
            with self.eval_timer("eval_verify"):
                out |= self.probe.measure(
                    ctx.verifier,
                    style=self.cfg.data.templates,
                    format_weight=self.cfg.algorithm.verifier_format_weight,
                )
        # Its own timer: evaluation time is reported as perf/eval_*, never as the step's time.
        timings = self.eval_timer.metrics()
        timings["perf/eval_s"] = timings.pop("perf/step_s")
        return out | timings

    def _verifier_probe(self, ctx: StepContext, problems) -> VerifierProbe | None:
        """The balanced held-out replies the verifier is measured on at every evaluation
        (run/verifier_probe.py): drawn from the generator as the run starts, or read back from
        the run directory when it resumes."""
        size = self.cfg.eval.verifier_probe_size
        if not size or ctx.verifier is None:
            return None

        def score(picked, outs):
            return feedback.score_solutions(
                ctx.scorer,
                picked,
                outs,
                timeout_s=self.cfg.scorer_timeout_s,
                kind=self.cfg.data.reward_kind,
                split=self.cfg.data.step_split,
            )[0]

        with self.eval_timer("eval_generate"):
            probe = VerifierProbe.load_or_build(
                self.run_dir,
                ctx.generator,
                problems,
                score,
                size=size,
                seed=self.cfg.seed,
                style=self.cfg.data.templates,
                write=jax.process_index() == 0,
            )
        right, wrong = probe.counts
        log.info("verifier probe: %d right and %d wrong held-out replies", right, wrong)
        return probe

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
            wandb=wandb_sink(
                self.cfg.wandb, self.run_dir, run_name=self.cfg.name, config=to_dict(self.cfg)
            ),
        )

    def _rollout_log(self, after_step: int, metrics) -> RolloutLog | None:
        """Process 0's rollout log (run_dir/rollouts/), without the files of steps after
        `after_step` (a crashed attempt's); None on the other processes."""
        if jax.process_index() != 0:
            return None
        sink = metrics.wandb if isinstance(metrics, MetricsWriter) else None
        return RolloutLog(self.run_dir, self.cfg.log_rollouts, after_step=after_step, wandb=sink)

    def _restore(self, ckpt: RunCheckpointer, trained: dict[Kind, Role]) -> HostState:
        trainers, saved = ckpt.restore(None, _trainer_states(trained))
        host = HostState.from_dict(saved)
        for r in trained.values():
            r.trainer.load_state_dict(trainers[r.name])
            r.version = host.updates[r.name]
            r.sync()  # a vLLM server starts from the checkpoint on disk: send it these weights
        return host

    def _train(self, run: RunState) -> dict[str, float]:
        """Global steps after `run.host.step` to the schedule's end (or a stop); returns the
        last evaluation's metrics."""
        log.info(
            "training steps %d-%d; the first compiles the samplers and train steps (minutes "
            "for a 7B model)",
            run.host.step + 1,
            self.schedule.total_steps,
        )
        for step in range(run.host.step + 1, self.schedule.total_steps + 1):
            out, positions = self._step(run, step)
            if self._after_step(run, step, out, positions):
                break
        return run.final

    def _step(self, run: RunState, step: int):
        """One global step: its rollouts (collected now, or by the last step's prefetch), then
        its update; returns the step's metrics and where the prompt streams then stand."""
        phase = self.schedule.phase(step)
        ahead = run.ahead
        batches = ahead.problems if ahead is not None else StepBatches(run.streams.for_phase(phase))
        rollouts = ahead.rollouts if ahead is not None else None
        prefetched = rollouts is not None
        if rollouts is None:
            rollouts = collect(
                run.ctx,
                batches.first,
                more=batches.extra,  # dynamic sampling's extra rounds
                global_step=step,
                phase=phase,
                timer=self.timer,
            )
        # Where a checkpoint of this step resumes the data: after every batch it consumed.
        positions = run.streams.positions()
        run.ahead = ahead = self._prefetch(run, step) if self._prefetch_due(step) else None
        if phase.kind is Kind.GENERATOR:
            warmup = self.schedule.generator_warmup_steps
            update_index = run.updates[Kind.GENERATOR.value] - warmup
            out = generator_step(
                run.ctx, rollouts, update_index=update_index, timer=self.timer, during_update=ahead
            )
        else:
            out, run.class_state = verifier_step(
                run.ctx,
                rollouts,
                class_state=run.class_state,
                timer=self.timer,
                during_update=ahead,
            )
        if self.cfg.overlap_rollouts:
            out["rollout/prefetched"] = float(prefetched)
            out |= ahead.metrics() if ahead is not None else {}
        run.updates[phase.kind.value] += 1
        return out, positions

    def _after_step(self, run: RunState, step: int, out: dict[str, float], positions) -> bool:
        """The checks, evaluation, logging and saving that follow a step; True: stop here."""
        phase = self.schedule.phase(step)
        role = phase.kind.value
        # Before anything of this step is written or saved: a saved step is a good one.
        check_finite(out, role=role, step=step, checkpointer=run.ckpt)
        self._check_divergence(out, run.trained[phase.kind], step, run.norms, run.ckpt)
        collapsed = phase.kind is Kind.VERIFIER and self._collapsed(out, step)
        for r in (run.ctx.generator, run.ctx.verifier):  # vLLM: restarts, retries, drops
            if r is not None:
                out |= {f"{r.name}/{k}": v for k, v in r.sampler.metrics().items()}
        out |= self.timer.metrics()
        out |= {f"schedule/{k}_updates": n for k, n in run.updates.items()}
        if self._eval_due(step, phase, run.updates):
            run.final = self._evaluate(run.ctx, run.eval_problems)
            out |= run.final
        run.metrics.write(step, out, phase=role + ("_warmup" if phase.warmup else ""))
        total = self.schedule.total_steps
        summary = _summary(out, phase.kind)
        log.info("step %d/%d %s %s | %s", step, total, role, summary, run.clock.eta(step))
        stop, timed = run.point.agree()  # the same on every process
        if stop or timed or collapsed or self._save_due(step):
            # With a prefetch in flight (time or signal checkpoints only: scheduled steps
            # are drained), `positions` give its problems back to the resumed run.
            state = HostState(step, run.updates, run.class_state, *positions)
            run.ckpt.save(step, _trainer_states(run.trained), state.to_dict())
            run.point.saved()
        if collapsed:
            self.collapsed_at = step
            log.error("stopped after step %d and saved it (verifier.collapse_guard=stop)", step)
            return True
        if stop and step < total:  # at the last step: the run is done
            self.stopped_at = step
            log.warning(
                "stopped after step %d (%s) and saved it; launch the same command to resume",
                step,
                self.stop.signal_name or "a signal to another process",
            )
            return True
        return False

    def _collapsed(self, out: dict[str, float], step: int) -> bool:
        """Feeds the verifier step's verdicts to the collapse guard: warns when it trips (once
        until it clears); True when it tripped and the action is stop."""
        collapse = self.collapse_guard.observe(UpdateVerdicts.from_metrics(out))
        out["verifier/collapse_guard/tripped"] = float(self.collapse_guard.tripped)
        if collapse is None:
            return False
        action = self.collapse_guard.action
        log.warning("%s (verifier.collapse_guard=%s)", collapse.message(step), action.value)
        return self.collapse_guard.action is GuardAction.STOP

    def _check_divergence(self, out, role: Role, step: int, norms: dict, ckpt) -> None:
        """Stops (or warns) on a sign that the update destroyed the model
        (checkpoint/divergence.py); `norms` holds each role's parameter norm before its update
        and is advanced here."""
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
        every = {Kind.GENERATOR: e.every_generator_steps, Kind.VERIFIER: e.every_verifier_steps}
        k = every[phase.kind]
        return k > 0 and updates[phase.kind.value] % k == 0

    def _prefetch_due(self, step: int) -> bool:
        """Overlap: the next step is collected beside this step's update, except at the last
        step and at checkpoint steps (the drain that keeps resume exact, run/overlap.py)."""
        return (
            self.cfg.overlap_rollouts
            and step < self.schedule.total_steps
            and not self._save_due(step)
        )

    def _prefetch(self, run: RunState, step: int) -> Prefetch:
        """Step `step + 1`'s collection, planned now (its problems taken from the stream).
        In a background thread when every sampler is a vLLM service; else right before the
        update (the embedded sampler shares the trainer's arrays and devices)."""
        nxt, phase, ctx = step + 1, self.schedule.phase(step + 1), run.ctx
        roles = [r for r in (ctx.generator, ctx.verifier) if r is not None]
        background = all(r.config.sampler.backend is SamplerBackend.VLLM for r in roles)
        return Prefetch(
            nxt,
            StepBatches(run.streams.for_phase(phase)),
            lambda batches, timer: collect(
                ctx, batches.first, more=batches.extra, global_step=nxt, phase=phase, timer=timer
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


def _eval_summary(out: dict[str, float]) -> str:
    """The held-out values under their own `eval/...` names (never like training values)."""
    return " ".join(f"{k}={out[k]:.3f}" for k in _EVAL_KEYS if k in out)


_EVAL_KEYS = (
    "eval/generator/accuracy",
    "eval/generator/sampled_accuracy",
    "eval/verifier/verdict_accuracy",
    "eval/verifier/balanced_accuracy",
    "eval/verifier/predicted_correct",
    "eval/verifier/step_f1",
    "eval/verifier/f1",
    "eval/probe/balanced_accuracy",
    "eval/probe/predicted_correct",
    "eval/probe/answer_label_informedness",
)


def _summary(out: dict[str, float], role: Kind) -> str:
    """The step's training values (without the role's prefix), its time, then any held-out
    values under their full `eval/...` names."""
    keys = {
        Kind.GENERATOR: (
            "generator/accuracy",
            "generator/reward/mean",
            "generator/alpha",
            "generator/feedback/predicted_correct",
            "generator/feedback/balanced_accuracy",
            "generator/train/loss",
        ),
        Kind.VERIFIER: (
            "verifier/verdict_accuracy",
            "verifier/balanced_accuracy",
            "verifier/predicted_correct",
            "verifier/solutions_right",
            "verifier/parse_fail",
            "verifier/reward/mean",
            "verifier/train/loss",
        ),
    }[role] + ("perf/step_s",)
    train = " ".join(f"{k.split('/', 1)[1]}={out[k]:.3f}" for k in keys if k in out)
    held_out = _eval_summary(out)
    return f"{train} | {held_out}" if held_out else train
