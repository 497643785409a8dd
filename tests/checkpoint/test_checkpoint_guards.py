"""The checkpoint guards (tango_jax/checkpoint/guards.py): a damaged checkpoint set aside (never
deleted) with a fall-back to the previous one, and every non-finite metric stopping the step
before it is saved.

Real components only: real orbax checkpoints with a truncated data file, a damaged host
document or non-finite arrays.
"""

from __future__ import annotations

import logging
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from tango_jax.checkpoint.guards import (
    CheckpointMismatchError,
    NonFiniteError,
    NoReadableCheckpointError,
)
from tango_jax.checkpoint.run import ModelInfo, RunCheckpointer, check_finite
from tango_jax.parallel.mesh import MeshConfig, make_mesh

# --- damaged checkpoints -----------------------------------------------------------------------


def _state(step: int) -> dict:
    rep = NamedSharding(make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1]), P())
    return {
        "params": {"w": jax.device_put(step * jnp.arange(6.0).reshape(2, 3), rep)},
        "opt_state": (jax.device_put(jnp.asarray(step, jnp.int32), rep),),
        "step": step,
    }


def _saved(directory: Path, steps=(1, 2, 3), state=_state) -> Path:
    with RunCheckpointer(directory, keep=5, models={"generator": ModelInfo({})}) as ckpt:
        for step in steps:
            ckpt.save(step, {"generator": state(step)}, {"step": step})
    return directory


def _truncate_data_file(step_dir: Path) -> Path:
    """Halves the array data file of the step's params (the OCDBT store's d/ file)."""
    (data,) = (step_dir / "generator_params" / "d").iterdir()
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    return data


def _files(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def test_an_unreadable_latest_checkpoint_is_moved_aside_and_the_previous_restored(tmp_path, caplog):
    directory = _saved(tmp_path / "checkpoints")
    _truncate_data_file(directory / "3")
    damaged = _files(directory / "3")
    models = {"generator": ModelInfo({})}
    with (
        caplog.at_level(logging.WARNING, logger="tango_jax.checkpoint.run"),
        RunCheckpointer(directory, keep=5, models=models) as ckpt,
    ):
        trainers, host = ckpt.restore(None, {"generator": _state(0)})
        assert host == {"step": 2} and trainers["generator"]["step"] == 2
        np.testing.assert_array_equal(
            trainers["generator"]["params"]["w"], _state(2)["params"]["w"]
        )
        assert ckpt.all_steps() == [1, 2]
        ckpt.save(3, {"generator": _state(3)}, {"step": 3})  # the resumed run goes on
    aside = tmp_path / "checkpoints_damaged" / "3"
    assert _files(aside) == damaged  # moved whole, nothing deleted
    found, moved = [r.getMessage() for r in caplog.records if "unreadable" in r.getMessage()]
    assert "\n" not in found and found.startswith("checkpoint step 3 is unreadable (ValueError: ")
    assert moved == f"moved the unreadable checkpoint step 3 to {aside} (kept, not deleted)"


def test_a_damaged_host_document_falls_back_too(tmp_path):
    directory = _saved(tmp_path / "checkpoints")
    (directory / "3" / "host" / "metadata").write_text('{"format": 1, "trainer_st')
    with RunCheckpointer(directory, keep=5) as ckpt:
        assert ckpt.host()["host_state"] == {"step": 2}
    assert (tmp_path / "checkpoints_damaged" / "3" / "host").is_dir()


def test_no_readable_checkpoint_is_a_clear_error_and_moves_nothing(tmp_path):
    directory = _saved(tmp_path / "checkpoints", steps=(1, 2))
    for step in ("1", "2"):
        _truncate_data_file(directory / step)
    before = _files(directory)
    with (
        RunCheckpointer(directory, keep=5) as ckpt,
        pytest.raises(
            NoReadableCheckpointError,
            match=r"every step failed to restore \(step 2: ValueError: .*; step 1: ValueError: "
            r".*\)\. Nothing was moved or deleted\.",
        ),
    ):
        ckpt.restore(None, {"generator": _state(0)})
    assert _files(directory) == before
    assert not (tmp_path / "checkpoints_damaged").exists()


def test_a_checkpoint_with_nonfinite_arrays_counts_as_damaged(tmp_path):
    def state(step):
        s = _state(step)
        return s | {"params": {"w": s["params"]["w"] * (jnp.nan if step == 2 else 1.0)}}

    directory = _saved(tmp_path / "checkpoints", steps=(1, 2), state=state)
    with RunCheckpointer(directory, keep=5) as ckpt:
        _, host = ckpt.restore(None, {"generator": _state(0)})
    assert host == {"step": 1}


def test_a_mismatched_target_is_no_damage(tmp_path):
    """A wrong restore target (another model) is the caller's error: nothing is moved."""
    directory = _saved(tmp_path / "checkpoints")
    wide = _state(0) | {"params": {"w": jnp.zeros((2, 4))}}
    with RunCheckpointer(directory, keep=5) as ckpt:
        with pytest.raises(CheckpointMismatchError, match=r"stored as \(2, 3\)"):
            ckpt.restore(None, {"generator": wide})
        assert ckpt.all_steps() == [1, 2, 3]
    assert not (tmp_path / "checkpoints_damaged").exists()


def test_a_read_only_reader_skips_a_damaged_step_without_moving_it(tmp_path):
    directory = _saved(tmp_path / "checkpoints")
    _truncate_data_file(directory / "3")
    reader = RunCheckpointer(directory, keep=5, read_only=True)
    _, host = reader.restore(None, {"generator": _state(0)})
    assert host == {"step": 2} and (directory / "3").is_dir()
    assert not (tmp_path / "checkpoints_damaged").exists()


# --- non-finite steps -----------------------------------------------------------------------------


def test_every_nonfinite_metric_stops_the_step(tmp_path):
    """Not only loss and grad_norm: drift, rewards, norms (the issue's null drift values)."""
    directory = _saved(tmp_path / "checkpoints", steps=(1, 2))
    ckpt = RunCheckpointer(directory, keep=5, read_only=True)
    finite = {
        "generator/train/loss": 0.1,
        "generator/train/nonfinite": 0.0,
        "rollout/drift_k3_kl": 0.0,
    }
    check_finite(finite, role="generator", step=3, checkpointer=ckpt)
    for name in ("rollout/drift_k3_kl", "generator/reward/mean", "generator/train/param_norm"):
        with pytest.raises(NonFiniteError) as info:
            check_finite(finite | {name: float("nan")}, role="generator", step=3, checkpointer=ckpt)
        assert str(info.value).startswith(f"generator step 3: non-finite {name}=nan. The run stops")
        assert "last good checkpoint is step 2" in str(info.value)
    with pytest.raises(NonFiniteError, match="non-finite update. The update was rejected"):
        check_finite(
            finite | {"generator/train/nonfinite": 1.0}, role="generator", step=3, checkpointer=ckpt
        )
