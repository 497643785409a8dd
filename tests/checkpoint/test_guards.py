"""The run's guards: bad paths and run directories refused before anything is written, and
the divergence signs. Damaged checkpoints and non-finite steps: test_checkpoint/guards.py.

Real components only: the `python -m tango_jax.train` entry point (for exit codes and files
written), real HF checkpoint directories.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tango_jax.checkpoint.divergence import GuardAction
from tango_jax.config import preflight
from tango_jax.config.files import load_config_file
from tango_jax.config.run import load_run_config, load_saved_run_config, saved_run_config
from tango_jax.models.tiny import write_tiny_checkpoint
from tango_jax.parallel.mesh import make_mesh
from tango_jax.schema import ConfigError

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs"


def _tiny(run_dir: Path, **changes):
    c = load_config_file(CONFIGS / "tiny_arith.py").get_config("tango,scratch")
    c.run_dir = str(run_dir)
    for path, value in changes.items():
        *heads, last = path.split(".")
        node = c
        for h in heads:
            node = node[h]
        node[last] = value
    return load_run_config(c)


def _train(*overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "tango_jax.train",
            "--config",
            f"{CONFIGS / 'tiny_arith.py'}:tango,scratch",
            *overrides,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )


def _snapshot(run_dir: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under run_dir: its bytes and modification time."""
    return {
        str(p.relative_to(run_dir)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(run_dir.rglob("*"))
        if p.is_file()
    }


# --- paths: checked before anything heavy starts ------------------------------------------------


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    """A real HF checkpoint directory (the tiny preset, with the tiny tokenizer)."""
    path = tmp_path_factory.mktemp("model") / "tiny"
    write_tiny_checkpoint(path, "tiny-qwen2", seed=0)
    return path


def test_a_missing_verifier_model_fails_in_the_first_seconds_writing_nothing(tmp_path):
    """The issue's case: the verifier's bad path used to fail only after the generator's whole
    SFT (83 s) had run and written sft/generator, with a FileNotFoundError naming no field."""
    run_dir = tmp_path / "run"
    missing = tmp_path / "no_such_model"
    run = _train(
        f"--config.run_dir={run_dir}",
        f"--config.verifier.model.path={missing}",
        "--config.verifier.model.preset=",
        "--config.sft.verifier.start_from_generator=False",  # else that path is never read
    )
    assert run.returncode == 1
    assert run.stderr.strip().splitlines() == [
        f"config error: config.verifier.model.path ('{missing}') does not exist; point it at a "
        "Hugging Face checkpoint directory (config.json, *.safetensors, tokenizer files)."
    ]
    assert not run_dir.exists()


def test_a_wrong_type_on_the_command_line_is_one_line():
    run = _train("--config.schedule.total_steps=abc", "--config.run_dir=/nonexistent/x")
    assert run.returncode == 1
    assert run.stderr.strip().splitlines() == [
        "config error: flag --config.schedule.total_steps=abc: invalid literal for int() with "
        "base 10: 'abc'"
    ]


def _broken_copy(src: Path, dst: Path, change) -> Path:
    shutil.copytree(src, dst)
    change(dst)
    return dst


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: (d / "config.json").unlink(), "has no config.json"),
        (lambda d: (d / "config.json").write_text("{"), "has a config.json that is not JSON"),
        (lambda d: (d / "model.safetensors").unlink(), "has no \\*.safetensors weights"),
        (lambda d: (d / "model.safetensors").write_bytes(b""), "has empty weight files"),
        (
            lambda d: [(d / n).unlink() for n in ("tokenizer.json", "tokenizer_config.json")],
            "has no tokenizer.json or tokenizer_config.json",
        ),
    ],
    ids=["no-config", "bad-config", "no-weights", "empty-weights", "no-tokenizer"],
)
def test_a_model_directory_without_its_content_is_refused(model_dir, tmp_path, change, message):
    broken = _broken_copy(model_dir, tmp_path / "m", change)
    cfg = _tiny(
        tmp_path / "run", **{"generator.model.path": str(broken), "generator.model.preset": ""}
    )
    with pytest.raises(ConfigError, match=f"config.generator.model.path .* {message}"):
        preflight.check(cfg)
    assert not (tmp_path / "run").exists()


def test_a_model_path_the_run_would_not_read_is_refused(tmp_path):
    """A verifier that starts from the generator never reads its own model.path: a path set
    there is a user's mistake (it would be silently ignored), so it is refused by name."""
    unread = {"verifier.model.path": str(tmp_path / "none"), "verifier.model.preset": ""}
    with pytest.raises(
        ConfigError,
        match=r"config.verifier.model.path .* would not be read: "
        r"sft.verifier.start_from_generator=True",
    ):
        preflight.check(
            _tiny(tmp_path / "run", **unread, **{"sft.verifier.start_from_generator": True})
        )
    with pytest.raises(ConfigError, match="config.verifier.model.path .* does not exist"):
        preflight.check(
            _tiny(tmp_path / "run", **unread, **{"sft.verifier.start_from_generator": False})
        )


def test_a_complete_model_directory_passes(model_dir, tmp_path):
    cfg = _tiny(
        tmp_path / "run", **{"generator.model.path": str(model_dir), "generator.model.preset": ""}
    )
    preflight.check(cfg)


def test_data_files_are_checked(tmp_path):
    sft = _tiny(tmp_path / "run", **{"sft.verifier.data_path": str(tmp_path / "none.jsonl")})
    with pytest.raises(ConfigError, match=r"config.sft.verifier.data_path .* matches no file"):
        preflight.check(sft)
    (tmp_path / "empty.jsonl").write_text("")
    data = _tiny(
        tmp_path / "run",
        **{
            "data.source": "jsonl",
            "data.train_path": str(tmp_path / "*.jsonl"),
            "data.eval_path": str(tmp_path / "empty.jsonl"),
            "sft.generator.data_path": str(tmp_path / "empty.jsonl"),
            "sft.verifier.enable": False,
        },
    )
    with pytest.raises(ConfigError, match=r"config.sft.generator.data_path .* includes empty"):
        preflight.check(data)


# --- the run directory: refuse before writing; resume only the same experiment -----------------


def _started_run(run_dir: Path):
    """A run directory as a run leaves it: its config and a metrics line."""
    cfg = _tiny(run_dir)
    preflight.check(cfg)
    preflight.write_config(cfg)
    (run_dir / "metrics.jsonl").write_text('{"step": 0, "time": 0, "phase": "eval"}\n')
    return cfg


def test_resume_false_on_an_existing_run_writes_nothing(tmp_path):
    """The issue's case: the refusal came after config.json had been overwritten."""
    run_dir = tmp_path / "run"
    _started_run(run_dir)
    before = _snapshot(run_dir)
    run = _train(
        f"--config.run_dir={run_dir}", "--config.resume=False", "--config.generator.rollout.n=8"
    )
    assert run.returncode == 1
    assert "already holds a run and resume is False" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1
    assert _snapshot(run_dir) == before


def test_resume_with_a_different_config_lists_the_fields_and_writes_nothing(tmp_path):
    run_dir = tmp_path / "run"
    _started_run(run_dir)
    before = _snapshot(run_dir)
    run = _train(
        f"--config.run_dir={run_dir}",
        "--config.generator.rollout.n=8",
        "--config.generator.trainer.micro_batch_size=128",
        "--config.schedule.total_steps=100",
        "--config.eval.every_generator_steps=6",  # allowed: evaluation only
    )
    assert run.returncode == 1, run.stderr
    (line,) = run.stderr.strip().splitlines()
    assert (
        "in 3 field(s): generator.rollout.n: 4 -> 8; generator.trainer.micro_batch_size: " in line
    )
    assert "schedule.total_steps: 88 -> 100" in line and "eval." not in line.split("field(s)")[1]
    assert (
        '--config.resume_may_change=\'("generator.rollout.n", '
        '"generator.trainer.micro_batch_size", "schedule.total_steps",)' in line
    )
    assert _snapshot(run_dir) == before


def test_allowed_changes_resume_and_keep_the_previous_config(tmp_path):
    run_dir = tmp_path / "run"
    first = _started_run(run_dir)
    saved = (run_dir / "config.json").read_text()
    logging_only = dataclasses.replace(first, tensorboard=False)
    preflight.check(logging_only)  # always allowed
    moved = tmp_path / "moved"
    shutil.copytree(run_dir, moved)
    preflight.check(dataclasses.replace(first, run_dir=str(moved)))  # a run moved elsewhere
    longer = _tiny(run_dir, **{"schedule.total_steps": 100})
    with pytest.raises(ConfigError, match="schedule.total_steps: 88 -> 100"):
        preflight.check(longer)
    allowed = dataclasses.replace(longer, resume_may_change=("schedule",))
    preflight.check(allowed)
    preflight.write_config(allowed)
    assert json.loads((run_dir / "config.json").read_text())["schedule"]["total_steps"] == 100
    assert (run_dir / "config_history" / "1.json").read_text() == saved
    preflight.check(longer)  # the saved config is now the longer run's


def test_fields_added_to_the_schema_since_the_run_started_count_at_their_default(tmp_path):
    run_dir = tmp_path / "run"
    cfg = _started_run(run_dir)
    saved = json.loads((run_dir / "config.json").read_text())
    del saved["divergence"], saved["algorithm"]["class_ema_decay"]  # as if added since
    saved["generator"]["obsolete_field"] = 3  # and a field removed since
    (run_dir / "config.json").write_text(json.dumps(saved))
    preflight.check(cfg)
    other = dataclasses.replace(
        cfg, algorithm=dataclasses.replace(cfg.algorithm, class_ema_decay=0.9)
    )
    with pytest.raises(ConfigError, match=r"algorithm.class_ema_decay: 0.8 -> 0.9\."):
        preflight.check(other)
    # after a divergence stop, going on with a warning is a change of when to stop, not of a step
    preflight.check(
        dataclasses.replace(
            cfg, divergence=dataclasses.replace(cfg.divergence, action=GuardAction.WARN)
        )
    )


def test_a_saved_loss_temperature_resumes_when_it_is_the_rollouts_and_is_refused_otherwise(
    tmp_path,
):
    """A config.json written while `trainer.loss.temperature` was a field of its own (kept
    equal to the rollout's by a check): the same value resumes, the field gone from the
    rewritten config.json; a different one is one line naming the field, both values and the
    fix. A role without a trainer never read it: its value, whatever it is, goes."""
    run_dir = tmp_path / "run"
    cfg = _started_run(run_dir)
    file = run_dir / "config.json"
    saved = json.loads(file.read_text())
    assert "temperature" not in saved["generator"]["trainer"]["loss"]  # derived: not written
    assert cfg.generator.trainer.loss.temperature == cfg.generator.rollout.temperature
    saved["generator"]["trainer"]["loss"]["temperature"] = cfg.generator.rollout.temperature
    file.write_text(json.dumps(saved))
    preflight.check(cfg)
    preflight.write_config(cfg)
    assert "temperature" not in json.loads(file.read_text())["generator"]["trainer"]["loss"]
    loaded = load_saved_run_config(file)
    assert loaded.generator.trainer.loss.temperature == cfg.generator.rollout.temperature

    saved["verifier"]["trainer"]["loss"]["temperature"] = 0.5
    file.write_text(json.dumps(saved))
    before = _snapshot(run_dir)
    with pytest.raises(ConfigError) as e:
        preflight.check(cfg)
    (line,) = str(e.value).splitlines()
    assert line == (
        f"{file}: verifier.trainer.loss.temperature (0.5) differs from "
        f"verifier.rollout.temperature ({cfg.verifier.rollout.temperature!r}), which sets it: "
        f"delete that field from {file} to train on at {cfg.verifier.rollout.temperature!r}, "
        "or start a new run_dir."
    )
    assert _snapshot(run_dir) == before
    with pytest.raises(ConfigError, match="verifier.trainer.loss.temperature \\(0.5\\)"):
        load_saved_run_config(file)
    frozen = saved | {"verifier": saved["verifier"] | {"trainable": False}}
    assert "temperature" not in saved_run_config(frozen, "x")["verifier"]["trainer"]["loss"]


def test_the_loop_checks_before_writing_too(tmp_path):
    """TangoLoop.run (used without train.py) refuses before its first write as well."""
    from tango_jax.run.loop import TangoLoop

    run_dir = tmp_path / "run"
    _started_run(run_dir)
    before = _snapshot(run_dir)
    cfg = _tiny(run_dir, **{"generator.rollout.n": 8})
    with pytest.raises(ConfigError, match="generator.rollout.n: 4 -> 8"):
        TangoLoop(cfg, make_mesh(cfg.mesh)).run()
    assert _snapshot(run_dir) == before


# --- divergence --------------------------------------------------------------------------------


def test_divergence_signs_by_hand():
    from tango_jax.checkpoint.divergence import DivergenceConfig, GuardAction, divergence_signs

    healthy = {"generator/train/param_norm": 10.05, "generator/train/loss/entropy": 1.2}
    cfg = DivergenceConfig(max_entropy_frac=0.95)
    signs = dict(role="generator", vocab_size=512, cfg=cfg)
    assert divergence_signs(healthy, prev_param_norm=10.0, **signs) == []
    # The lr=1e6 step: max |w| 1.08 -> 1e10, entropy ln(V).
    wrecked = {"generator/train/param_norm": 3e12, "generator/train/loss/entropy": np.log(512)}
    jump, uniform = divergence_signs(wrecked, prev_param_norm=10.0, **signs)
    assert (
        "jumped from 10 to 3e+12 in one update (x3e+11 > divergence.max_param_norm_ratio 2" in jump
    )
    assert "is 1.000 of its maximum ln(512)" in uniform
    assert divergence_signs(wrecked, prev_param_norm=None, **signs) == [uniform]  # no reference
    off = DivergenceConfig(action=GuardAction.OFF, max_entropy_frac=0.95)
    assert (
        divergence_signs(wrecked, prev_param_norm=10.0, role="generator", vocab_size=512, cfg=off)
        == []
    )
    assert (
        divergence_signs(  # the other role's metrics are not this role's
            wrecked, prev_param_norm=10.0, role="verifier", vocab_size=512, cfg=cfg
        )
        == []
    )


def test_preflight_knows_where_checkpoints_live():
    """preflight keeps its own copy of the name, to stay free of orbax's 1.5 s import."""
    from tango_jax.checkpoint.run import CHECKPOINT_SUBDIR

    assert preflight.CHECKPOINT_SUBDIR == CHECKPOINT_SUBDIR
