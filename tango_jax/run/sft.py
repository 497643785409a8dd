"""Where each role's RL starts, and the SFT stage that may come first (TANGO_SPEC §5).

    path = prepare_rl_start(cfg, Kind.GENERATOR, run_dir, mesh=mesh)

A role starts from its `model.path`, or from a preset written to `run_dir/initial/<role>`
(the verifier from the generator's RL start with `sft.verifier.start_from_generator`);
with `sft.<role>.enable`, SFT runs once (cross-entropy on the response tokens, and the EOS that
ends them, of (prompt, response) text pairs, the prompt as plain text or, with the role's
`chat_template`, as the user turn of the chat template, as RL will see it) and writes
`run_dir/sft/<role>`, an ordinary HF checkpoint that RL starts from and both samplers load; a
resumed run finds it and skips the stage. SFT metrics go to `run_dir/sft_logs/<role>`. A stop
signal (run/signals.py) saves the stage's progress in `run_dir/sft_checkpoints/<role>`
(run/sft_progress.py), as does `checkpoint.every_minutes`; a relaunch continues the stage from
there, to the same weights as an uninterrupted stage.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import jax
import numpy as np
from jax.experimental import multihost_utils

from tango_jax.checkpoint.run import ModelInfo
from tango_jax.config.roles import RoleConfig
from tango_jax.config.run import RunConfig
from tango_jax.config.stages import SFTStage
from tango_jax.data.sft_records import read_sft_records
from tango_jax.data.tasks import task_of
from tango_jax.metrics.wandb import wandb_sink
from tango_jax.metrics.writer import MetricsWriter, NoMetrics, Progress, StepClock
from tango_jax.models import from_pretrained, save_pretrained
from tango_jax.models.tiny import write_tiny_checkpoint
from tango_jax.models.tokenizer import load_tokenizer, tiny_tokenizer
from tango_jax.rl.batch import make_batch
from tango_jax.rl.train_step import Objective
from tango_jax.rl.trainer import Trainer
from tango_jax.run.sft_progress import SFTProgress, saved_sft_step
from tango_jax.run.signals import StopSignals
from tango_jax.schema import to_dict
from tango_jax.tango.kind import Kind
from tango_jax.text import formats, templates

if TYPE_CHECKING:
    from jax.sharding import Mesh

log = logging.getLogger(__name__)


class SFTPair(NamedTuple):
    """One SFT example as text: the model sees `prompt` and learns `response`, except for the
    `no_loss` (start, end) character spans of it (`SFTExample.no_loss`)."""

    prompt: str
    response: str
    no_loss: tuple[tuple[int, int], ...] = ()


class EncodedPair(NamedTuple):
    """An `SFTPair` as token ids; `loss_mask` (None: every response token is learned) is 0 on
    the response tokens that overlap a `no_loss` span, 1 elsewhere (the EOS included)."""

    prompt_ids: list[int]
    response_ids: list[int]
    loss_mask: list[float] | None = None


def prepare_initial(cfg: RunConfig, role: Kind, run_dir: Path) -> Path:
    """Returns the role's initial HF checkpoint: model.path, or its preset, which this writes
    (once) to run_dir/initial/<role>."""
    src = cfg.role(role).model
    if src.path:
        return Path(src.path)
    path = run_dir / "initial" / role.value
    if not exists_on_process_0(path):
        write_tiny_checkpoint(path, src.preset, seed=src.init_seed)
    return path


def initial_tokenizer(cfg: RunConfig, role: Kind):
    """The tokenizer of the role's initial checkpoint, without writing that checkpoint:
    model.path's, or the tiny tokenizer every preset is saved with (`prepare_initial`)."""
    path = cfg.role(role).model.path
    return load_tokenizer(path) if path else tiny_tokenizer()


def exists_on_process_0(path: Path) -> bool:
    """Whether `path` exists, as process 0 sees it, on every trainer process (jax.distributed).
    What follows such a check is collective (save_pretrained gathers on all processes, process
    0 writes): with each process's own `exists()`, a slower process could find the directory
    process 0 has just written, skip the write, and leave process 0 waiting in its gathers."""
    exists = path.exists()
    if jax.process_count() == 1:
        return exists
    return bool(multihost_utils.broadcast_one_to_all(np.int32(exists)))


def prepare_rl_start(
    cfg: RunConfig, role: Kind, run_dir: Path, *, mesh: Mesh, stop: StopSignals | None = None
) -> Path:
    """Runs the role's SFT stage if `sft.<role>.enable` (once: a later call, or a resumed run,
    reuses its checkpoint, which is written atomically, so one that exists is complete) and
    returns the HF checkpoint RL starts from. A signal caught by `stop` ends the stage with
    its progress saved: SFTStopped."""
    stage = cfg.sft.stage(role)
    if role is Kind.VERIFIER and stage.start_from_generator:
        path = prepare_rl_start(cfg, Kind.GENERATOR, run_dir, mesh=mesh, stop=stop)
    else:
        path = prepare_initial(cfg, role, run_dir)
    if not stage.enable:
        return path
    name = role.value
    out = run_dir / "sft" / name
    if exists_on_process_0(out):
        return out
    log.info("SFT of the %s: %d steps, from %s", name, stage.steps, path)
    progress = SFTProgress(
        run_dir / "sft_checkpoints" / name,
        name,
        stop=stop,
        every_minutes=cfg.checkpoint.every_minutes,
    )
    saved = saved_sft_step(progress.directory)
    # SFT metrics: their own file (steps restart at 1); a crashed SFT starts over, a stopped
    # one continues after its saved step. Several trainer processes: process 0 writes them
    # (all compute the same).
    logs = run_dir / "sft_logs" / name
    writer = NoMetrics()
    if jax.process_index() == 0:
        exists = (logs / "metrics.jsonl").exists()
        writer = MetricsWriter(
            logs,
            tensorboard=cfg.tensorboard,
            resume_step=saved if saved is not None else (0 if exists else None),
            wandb=wandb_sink(
                cfg.wandb, logs, run_name=cfg.name, config=to_dict(cfg), job_type=f"sft_{name}"
            ),
        )

    clock = StepClock(stage.steps)

    def log_step(step, values):
        writer.write(step, values, phase=f"sft_{name}")
        if step == 1 or step % 20 == 0 or step == stage.steps:
            loss = values[f"sft/{name}/loss"]
            log.info(
                "SFT of the %s: step %d/%d loss %.4f | %s",
                name,
                step,
                stage.steps,
                loss,
                clock.eta(step),
            )

    try:
        examples = sft_examples(cfg, role)
        return run_sft(
            SFTJob(name, stage, cfg.role(role), path, out),
            examples,
            mesh=mesh,
            seed=cfg.seed,
            log=log_step,
            progress=progress,
        )
    finally:
        writer.close()


def sft_examples(cfg: RunConfig, role: Kind) -> list[SFTPair]:
    """The role's SFT pairs: sft.<role>.data_path, or the task's own SFT set (generated tasks;
    a file task has none and says so)."""
    stage, style = cfg.sft.stage(role), cfg.data.templates
    if stage.data_path:
        return sft_records(stage.data_path, role, style)
    examples = task_of(cfg.data).sft_examples(
        role is Kind.VERIFIER, stage.num_examples, seed=cfg.seed, style=style
    )
    return [SFTPair(e.prompt, e.response, e.no_loss) for e in examples]


def sft_records(path: str, role: Kind, style: templates.Templates) -> list[SFTPair]:
    """(prompt, response) pairs from a JSONL file (see `SFTStage.data_path`; the pre-run checks
    read it first, so its errors reach a run only if the file changed since)."""
    try:
        pairs = read_sft_records(path, verifier=role is Kind.VERIFIER, style=style)
    except (FileNotFoundError, ValueError) as e:
        raise type(e)(f"sft.{role.value}.data_path: {e}") from None
    return [SFTPair(prompt, response) for prompt, response in pairs]


def encode_examples(
    examples: Sequence[SFTPair | tuple[str, str]], tokenizer, *, chat_template: bool
) -> list[EncodedPair]:
    """(prompt ids, response ids + EOS, loss mask) of each pair: the prompt as the role encodes
    it in RL (`Role.encode`: plain, or the user turn of the chat template), the response as it
    would be sampled, ended by the EOS (a chat model's end-of-turn token); a token is exempt
    from the loss when its characters overlap one of the pair's `no_loss` spans."""
    eos = tokenizer.eos_token_id
    wrap = (lambda p: templates.chat_prompt(p, tokenizer)) if chat_template else str
    out = []
    for prompt, response, *rest in examples:
        no_loss = rest[0] if rest else ()
        prompt_ids = tokenizer(wrap(prompt), add_special_tokens=False)["input_ids"]
        if not no_loss:
            ids = tokenizer(response, add_special_tokens=False)["input_ids"]
            out.append(EncodedPair(prompt_ids, [*ids, eos]))
            continue
        enc = tokenizer(response, add_special_tokens=False, return_offsets_mapping=True)
        mask = [
            0.0 if any(s < b and a < e for a, b in no_loss) else 1.0
            for s, e in enc["offset_mapping"]
        ]
        out.append(EncodedPair(prompt_ids, [*enc["input_ids"], eos], [*mask, 1.0]))
    return out


def check_response_lengths(role: str, encoded: Sequence[EncodedPair], max_tokens: int) -> None:
    """Warns when SFT responses are longer than `<role>.rollout.max_tokens`: RL would cut such
    outputs before their end (a verifier's before its verdict, so they fail to parse). Not an
    error: shortened test configs and a few long outliers in a user's data are legitimate."""
    lengths = np.array([len(e.response_ids) for e in encoded])
    over = lengths > max_tokens
    if over.any():
        log.warning(
            "sft.%s: %.0f%% of the SFT responses are longer than %s.rollout.max_tokens (%d); "
            "the longest has %d tokens (EOS included), so RL will cut such outputs before "
            "their end: raise %s.rollout.max_tokens (and %s.response_bucket) to at least %d "
            "unless that is intended.",
            role,
            100 * over.mean(),
            role,
            max_tokens,
            lengths.max(),
            role,
            role,
            lengths.max(),
        )


def _draw(n: int) -> Callable[[np.random.Generator, int], np.ndarray]:
    """Batches drawn at random from all `n` examples (with replacement only when n < size)."""
    return lambda rng, size: rng.choice(n, size=size, replace=n < size)


def _balanced_draw(
    role: str, examples: Sequence[SFTPair | tuple[str, str]]
) -> Callable[[np.random.Generator, int], np.ndarray]:
    """Batches of half CORRECT-verdict and half INCORRECT-verdict examples (the odd row
    INCORRECT), each half drawn at random from its class (`sft.<role>.balance_verdicts`)."""
    verdicts = [formats.parse_verification(e[1]).verdict for e in examples]
    by_class = [
        np.flatnonzero([v == label for v in verdicts])
        for label in (formats.CORRECT, formats.INCORRECT)
    ]
    if any(len(c) == 0 for c in by_class):
        raise ValueError(
            f"sft.{role}.balance_verdicts: the SFT set has {len(by_class[0])} examples whose "
            f"verdict is CORRECT and {len(by_class[1])} INCORRECT ({verdicts.count(None)} "
            "without one); it needs both, or set balance_verdicts=False."
        )

    def draw(rng: np.random.Generator, size: int) -> np.ndarray:
        halves = (size // 2, size - size // 2)
        return np.concatenate([
            rng.choice(c, size=k, replace=len(c) < k) for c, k in zip(by_class, halves)
        ])  # fmt: skip

    return draw


@dataclasses.dataclass(frozen=True)
class SFTJob:
    """One role's SFT stage: what trains, how, from which checkpoint and to where."""

    role: str  # the role's name (in metric names and errors)
    stage: SFTStage
    role_cfg: RoleConfig
    init_path: Path  # the HF checkpoint it starts from
    out_path: Path  # where the trained model is saved


def run_sft(
    job: SFTJob,
    examples: Sequence[SFTPair | tuple[str, str]],
    *,
    mesh: Mesh,
    seed: int,
    log: Callable[[int, dict[str, float]], None],
    progress: SFTProgress | None = None,
) -> Path:
    """Trains `stage.steps` steps of `stage.batch_size` examples drawn (seeded) from `examples`
    and saves the result at `job.out_path`. `progress`: where a stopped stage saved its
    progress (continued from there) and saves it again on a signal or the clock."""
    role, stage, role_cfg, init_path = job.role, job.stage, job.role_cfg, job.init_path
    if stage.trainer.loss.objective is not Objective.SFT:
        raise ValueError(
            f"sft.{role}.trainer.loss.objective must be 'sft', got "
            f"{stage.trainer.loss.objective.value!r}."
        )
    if not examples:
        raise ValueError(f"sft.{role}: no SFT examples.")
    tokenizer = load_tokenizer(init_path)
    encoded = encode_examples(examples, tokenizer, chat_template=role_cfg.chat_template)
    check_response_lengths(role, encoded, role_cfg.rollout.max_tokens)
    model = from_pretrained(
        init_path,
        mesh=mesh,
        remat=role_cfg.remat,
        **role_cfg.model_numerics(),
    )
    trainer = Trainer(model, stage.trainer, mesh=mesh)  # cosine horizon: stage.steps (derived)
    rng = np.random.default_rng(seed)
    first = 1 if progress is None else progress.restore(trainer, rng)
    info = ModelInfo.from_model(model, init_path)
    pad = tokenizer.pad_token_id or 0
    draw = _balanced_draw(role, examples) if stage.balance_verdicts else _draw(len(encoded))
    with Progress(f"sft {role}", total=stage.steps - first + 1) as bar:
        for step in range(first, stage.steps + 1):
            rows = draw(rng, stage.batch_size)
            batch = make_batch(
                [encoded[i].prompt_ids for i in rows],
                [encoded[i].response_ids for i in rows],
                loss_masks=[encoded[i].loss_mask for i in rows],
                pad_id=pad,
                prompt_bucket=role_cfg.sampler.prompt_bucket,
                response_bucket=role_cfg.response_bucket,
                max_prompt_len=role_cfg.max_prompt_len,
            )
            metrics, _ = trainer.step(batch)
            if metrics["nonfinite"]:
                raise FloatingPointError(
                    f"sft.{role}: non-finite loss or gradient at SFT step {step}; lower "
                    f"sft.{role}.trainer.optimizer.learning_rate."
                )
            log(step, {f"sft/{role}/{k}": v for k, v in metrics.items()})
            bar.update(1)
            if progress is not None and step < stage.steps:  # the last one: saved below
                progress.after_step(step, trainer, rng, info)
    out = save_pretrained(model, job.out_path, tokenizer=tokenizer, overwrite=True)
    if progress is not None:
        progress.finished()
    return out
