"""Entry point: `python -m tango_jax.train --config configs/NAME.py [--config.a.b=value ...]`.

Parses the ml_collections config, converts it once into the typed `RunConfig` (a wrong field
name or value fails here, before any model loads), runs the pre-run checks (paths, data
records, model architectures, the run directory: nothing is written before they pass), builds
the device mesh, and runs the Tango loop. `--help`, `--list_fields` and `--dry_run` stop
before the loop (config/cli.py; docs/config.md).

Only light modules are imported at the top, so that `--help` answers at once and the first
line (naming the config) comes before JAX loads.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from absl import app, flags
from ml_collections import config_flags

from tango_jax.config import cli
from tango_jax.schema import ConfigError

if TYPE_CHECKING:
    from tango_jax.config.run import RunConfig

_CONFIG = config_flags.DEFINE_config_file(
    "config",
    None,
    "Path to a config file in configs/ (e.g. configs/tiny_arith.py), optionally :VARIANT.",
    lock_config=True,
)
_LIST_FIELDS = flags.DEFINE_bool(
    "list_fields",
    False,
    "List every config field with its type, value, default and meaning, then exit.",
)
_DRY_RUN = flags.DEFINE_bool(
    "dry_run",
    False,
    "Run every pre-run check, print the resolved config as JSON, write nothing, exit.",
)
log = logging.getLogger("tango_jax")


def _configure_logging(stream) -> None:
    logging.basicConfig(
        level=logging.WARNING,
        format="%(asctime)s %(levelname)s %(message)s",
        stream=stream,
        force=True,
    )
    # Our progress at INFO (tango_jax.* loggers); libraries (orbax, jax, absl) only warnings.
    logging.getLogger("tango_jax").setLevel(logging.INFO)
    logging.getLogger("absl").setLevel(logging.WARNING)


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        sys.exit(
            f"config error: unexpected arguments {argv[1:]}; override a field with "
            "--config.a.b=value (python -m tango_jax.train --help)."
        )
    dry = _DRY_RUN.value
    _configure_logging(sys.stderr if dry else sys.stdout)  # again: absl's start-up reset it
    from tango_jax.config import preflight
    from tango_jax.config.run import RunConfig, base_config, check_micro_batches, load_run_config
    from tango_jax.parallel.distributed import initialize, is_primary
    from tango_jax.parallel.mesh import data_parallel_size, make_mesh
    from tango_jax.schema import to_dict

    if _LIST_FIELDS.value:  # the given config's values, or the schema's defaults
        defaults = base_config().to_dict()
        values = defaults if _CONFIG.value is None else _CONFIG.value.to_dict()
        print("\n".join(cli.field_lines(RunConfig, values, defaults)))
        return
    if _CONFIG.value is None:
        sys.exit(
            "config error: no --config; pass --config configs/NAME.py (python -m "
            "tango_jax.train --help lists the config files)."
        )
    try:
        cfg = load_run_config(_CONFIG.value)
        resuming = cfg.resume and preflight.holds_run(Path(cfg.run_dir))
        state = "resuming" if resuming else "new run"
        log.info(
            "run %s in %s (%s, %d steps)", cfg.name, cfg.run_dir, state, cfg.schedule.total_steps
        )
        if not (dry and cfg.distributed.enable):  # a dry run joins no other processes
            initialize(cfg.distributed)  # before any device is touched; a no-op unless enabled
            _check_processes(cfg)
            mesh = make_mesh(cfg.mesh)  # a shape that does not fit the devices: ValueError
            check_micro_batches(cfg, data_parallel_size(mesh))
        # Paths, data, models, run_dir; nothing is written before this. Its notes are said
        # once: by the dry run here, by the loop's own check in a run.
        notes = preflight.check(cfg)
    except ValueError as e:  # ConfigError included
        sys.exit(f"config error: {e}")
    if dry:
        for note in notes:
            log.warning("%s", note)
        print(json.dumps(to_dict(cfg), indent=2))
        skipped = " (the mesh unchecked: distributed.enable)" if cfg.distributed.enable else ""
        log.info("dry run: every pre-run check passed%s; nothing was written", skipped)
        return
    from tango_jax.checkpoint.divergence import DivergenceError
    from tango_jax.checkpoint.guards import NonFiniteError, NoReadableCheckpointError
    from tango_jax.run.lock import RunDirLocked, RunLockAllProcesses
    from tango_jax.run.loop import TangoLoop  # heavy imports only after the config is valid
    from tango_jax.run.signals import ExitStatus, StopSignals

    try:  # one run per run_dir; a signal stops it with a checkpoint (docs/cluster.md)
        with RunLockAllProcesses(cfg.run_dir), StopSignals() as stop:
            loop = TangoLoop(cfg, mesh, stop=stop)
            final = loop.run()
    except RunDirLocked as e:
        print(f"run refused: {e}", file=sys.stderr)
        sys.exit(ExitStatus.RUN_DIR_LOCKED)
    except (NonFiniteError, DivergenceError, NoReadableCheckpointError) as e:  # says what to do
        sys.exit(f"run stopped: {e}")
    except ConfigError as e:  # found once the data is tokenized: before anything is written
        sys.exit(f"config error: {e}")
    if loop.stopped_at is not None:  # saved; the same command resumes it
        sys.exit(ExitStatus.STOPPED)
    if loop.collapsed_at is not None:  # saved; change the verifier's settings, then resume
        sys.exit(ExitStatus.VERIFIER_COLLAPSED)
    if not is_primary():
        return
    log.info(
        "finished %s: %s",
        cfg.name,
        " ".join(f"{k}={v:.4f}" for k, v in sorted(final.items()) if k.startswith("eval/")),
    )
    from tango_jax.eval import analysis

    run = analysis.load_runs({cfg.name: cfg.run_dir})[cfg.name]
    for line in analysis.before_after_lines(run):
        log.info("before -> after RL: %s", line)
    if loop.process_items:  # a generated task's miniature ProcessBench
        labels = [it.label for it in loop.process_items]
        steps = [it.num_steps for it in loop.process_items]
        for line in analysis.location_lines(run, labels, steps):
            log.info("verifier location skill: %s", line)
        for line in _ranking_lines(cfg):
            log.info("verifier step ranking: %s", line)


def _ranking_lines(cfg: RunConfig) -> list[str]:
    """Claim 1 without the threshold: how well the verifier's step scores single out the first
    error before and after RL (`step_probe`, teacher-forced in PyTorch), on the run's own
    miniature-ProcessBench items. Empty when the run has no final verifier checkpoint or
    `eval.step_ranking` is off, and when PyTorch or a tokenizer with single-token judgment words
    is missing (said in a line)."""
    from tango_jax.eval import step_probe

    if not (cfg.verifier.enable and cfg.eval.step_ranking):
        return []
    final = Path(cfg.run_dir) / "hf" / "verifier"
    start = step_probe.start_verifier(cfg.run_dir, cfg.verifier.model.path)
    if start is None or not (final / "config.json").exists():
        return []
    try:
        solutions, task = step_probe.bench(cfg.data, cfg.eval.process_bench_size)
    except ValueError as e:  # a task without step truth
        return [f"not measured: {e}"]
    try:
        return step_probe.ranking_lines(start, final, solutions, task, style=cfg.data.templates)
    except ImportError as e:  # PyTorch is an optional extra
        return [f"not measured: {e} (install PyTorch to see it)"]
    except ValueError as e:  # a tokenizer that splits CORRECT / INCORRECT
        return [f"not measured: {e}"]


def _check_processes(cfg: RunConfig) -> None:
    """Several trainer processes sample with the embedded JAX sampler only: a vLLM role's
    servers and weight broadcast are driven by one process (run the trainer as one process per
    node group, docs/scaling.md)."""
    import jax

    from tango_jax.config.run import SamplerBackend

    vllm = [
        k
        for k in ("generator", "verifier")
        if getattr(cfg, k).sampler.backend is SamplerBackend.VLLM
        and (k == "generator" or cfg.verifier.enable)
    ]
    if jax.process_count() > 1 and vllm:
        raise ConfigError(
            f"config.{vllm[0]}.sampler.backend ('vllm') with {jax.process_count()} trainer "
            "processes: the vLLM sampler is driven by a single trainer process; use "
            "sampler.backend=jax, or one trainer process (distributed.enable=False)."
        )


def _parse_flags(argv: list[str]) -> list[str]:
    """`--help` (exit 0), then the command line checked and parsed by `cli.parse_config_flags`
    (the config file, every override's field path, list values, value types): each mistake is
    one line naming the fix (config/cli.py)."""
    if any(a in cli.HELP_FLAGS for a in argv[1:]):
        print(cli.usage())
        sys.exit(0)
    dry = "--dry_run" in argv[1:]
    _configure_logging(sys.stderr if dry else sys.stdout)  # a dry run's stdout: the JSON only
    spec = cli.config_spec(argv)
    if spec is not None:
        log.info("tango_jax.train: reading %s (loading JAX and the config)", spec)
    try:
        return cli.parse_config_flags(argv)
    except ConfigError as e:
        sys.exit(f"config error: {e}")


if __name__ == "__main__":
    app.run(main, flags_parser=_parse_flags)
