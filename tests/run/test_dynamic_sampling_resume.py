"""Resume with dynamic sampling on (issue 49): the data position a checkpoint saves counts every
prompt batch its steps drew, the dropped groups' included, so a run resumed from it samples
what the uninterrupted run did.

The shortest run that shows it: the GRPO variant on the shipped tiny SFT generator (no SFT
stage, no verifier), 2 prompts x 2 samples, three steps, saved at steps 2 and 3. The generator
solves most prompts, so most groups are dropped. Overlapped rollouts, so both ways a step's
batches are drawn are in it: step 1 collects in front of its update (as every step of a run
without overlap), step 2 is collected beside step 1's update and draws its extra batch then;
the saved position must count both steps' batches. The verifier's groups take the same path
through the loop (run/dynamic_sampling.StepBatches); test_dynamic_sampling.py checks what a
verifier group is."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from short_runs import comparable, short_config, weights

from tango_jax.checkpoint.run import RunCheckpointer
from tango_jax.config.run import load_run_config
from tango_jax.metrics.writer import read_metrics
from tango_jax.parallel.mesh import make_mesh
from tango_jax.run.loop import TangoLoop
from tango_jax.schema import to_dict

pytestmark = pytest.mark.slow


def _run(run_dir):
    d = to_dict(short_config(run_dir, total_steps=3, scratch=False, variant="grpo"))
    d["generator"]["rollout"] |= dict(dynamic_sampling=True, dynamic_sampling_max_rounds=2)
    d["generator"]["trainer"]["loss"] |= dict(kl_coef=0.0, tis_cap=2.0)  # no reference model
    d["overlap_rollouts"] = True
    d["eval"] |= dict(before_train=False, every_generator_steps=0, at_end=False)
    d["tensorboard"] = False
    cfg = load_run_config(d)
    TangoLoop(cfg, make_mesh(cfg.mesh)).run()


def test_resume_with_dynamic_sampling_reproduces_the_uninterrupted_run(tmp_path):
    run_dir = tmp_path / "a"
    _run(run_dir)
    rows = read_metrics(run_dir)
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert [r["rollout/prefetched"] for r in rows] == [0, 1, 0]  # drained at the save
    rounds = [r["generator/dynamic_sampling/rounds"] for r in rows]
    assert rounds[:2] == [2, 2], rows[:2]  # both steps drew a second batch of prompts
    assert all(0.0 < r["generator/dynamic_sampling/zero_var_groups"] <= 1.0 for r in rows)
    reader = RunCheckpointer(run_dir / "checkpoints", keep=3)
    try:
        saved = reader.host(2)["host_state"]["data"]
    finally:
        reader.close()
    assert (saved["epoch"], saved["index"]) == (0, 4)  # every batch steps 1 and 2 drew

    copy = tmp_path / "b"  # a crash right after step 2's checkpoint
    shutil.copytree(run_dir, copy)
    shutil.rmtree(copy / "checkpoints" / "3")
    shutil.rmtree(copy / "hf")
    _run(copy)
    resumed = read_metrics(copy)
    assert [r["step"] for r in resumed] == [1, 2, 3]
    assert comparable(resumed[2:]) == comparable(rows[2:])
    wa, wb = weights(run_dir / "hf" / "generator"), weights(copy / "hf" / "generator")
    for k in wa:
        np.testing.assert_array_equal(wa[k], wb[k], err_msg=k)
