"""Multi-process training on jax.distributed: 2 processes x 4 CPU devices against 1 x 8.

The worker (tests/distributed_worker.py) runs a shortened tiny RL loop (JAX sampler, rule
reward, trainer step with KL) on a mesh of 8 devices, in one process or split over two joined
by `jax.distributed` with gloo collectives. The two layouts must sample the same tokens and
give the same metrics, and a checkpoint written by either resumes in the other (the two
processes also agree to set aside a damaged newer step and fall back to the good one).

The real command, `python -m tango_jax.train --config configs/tiny_arith.py` with
tests/test_loop.py's shortened config as `--config.*` flags, runs the same way: 1 x 8 and 2 x 4
(its `distributed.*` fields) write the same metrics.jsonl, SFT logs and final weights, and the
1-process run's step-1 checkpoint resumes as 2 processes to the same later steps.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tango_jax.metrics.writer import read_metrics
from tango_jax.parallel.distributed import DistributedConfig, fetch, put

WORKER = Path(__file__).resolve().parents[1] / "helpers" / "distributed_worker.py"
TIMEOUT_S = 900  # generous: the test machine is a shared 2-core CPU


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(tmp: Path, name: str, processes: int, *extra: str) -> list[dict]:
    """Runs the worker as `processes` processes; returns each process's output."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
    procs, outs = [], []
    with contextlib.ExitStack() as logs:
        for pid in range(processes):
            out = tmp / f"{name}-{pid}.json"
            cmd = [sys.executable, str(WORKER), "--process-id", str(pid)]
            cmd += ["--num-processes", str(processes), "--port", str(port), "--out", str(out)]
            log = logs.enter_context(open(tmp / f"{name}-{pid}.log", "w"))
            procs.append(subprocess.Popen([*cmd, *extra], env=env, stdout=log, stderr=log))
            outs.append(out)
        for pid, proc in enumerate(procs):
            rc = proc.wait(timeout=TIMEOUT_S)
            assert rc == 0, (tmp / f"{name}-{pid}.log").read_text()[-3000:]
    return [json.loads(o.read_text()) for o in outs]


def _env(local_devices: int, compile_cache: Path | None = None) -> dict[str, str]:
    from short_runs import child_env

    return child_env(local_devices, compile_cache)


def _same_step(a: dict, b: dict) -> None:
    assert a["step"] == b["step"]
    assert a["tokens"] == b["tokens"]  # the same samples, token for token
    assert a["metrics"].keys() == b["metrics"].keys()
    for k in a["metrics"]:
        np.testing.assert_allclose(
            b["metrics"][k], a["metrics"][k], rtol=2e-5, atol=1e-7, err_msg=k
        )


def test_two_processes_match_one_and_checkpoints_cross_over(tmp_path):
    # 1 x 8: three steps, the state after step 2 saved.
    (one,) = _run(tmp_path, "one", 1, "--save-dir", str(tmp_path / "ck_one"))
    # A newer, damaged step 3 (a copy of step 2 with its params data file halved): both
    # processes must find it unreadable, set it aside once and resume from step 2.
    shutil.copytree(tmp_path / "ck_one" / "2", tmp_path / "ck_one" / "3")
    (data,) = (tmp_path / "ck_one" / "3" / "generator_params" / "d").iterdir()
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    # 2 x 4: the same three steps, saved after step 2; then the 1-process checkpoint resumed.
    two = _run(
        tmp_path,
        "two",
        2,
        "--save-dir",
        str(tmp_path / "ck_two"),
        "--resume-from",
        str(tmp_path / "ck_one"),
    )
    # 1 x 8 again: the 2-process checkpoint resumed.
    (back,) = _run(tmp_path, "back", 1, "--resume-from", str(tmp_path / "ck_two"))

    assert sorted(p.name for p in (tmp_path / "ck_one").iterdir()) == ["2"]
    assert sorted(p.name for p in (tmp_path / "ck_one_damaged").iterdir()) == ["3"]
    assert [t["process_count"] for t in two] == [2, 2]
    assert [t["process_index"] for t in two] == [0, 1]
    assert len(one["fresh"]) == 3
    losses = [s["metrics"]["loss"] for s in one["fresh"]]
    assert len(set(losses)) == 3 and all(np.isfinite(losses))  # the steps do change the model
    for t in two:  # both processes hold the same host state
        for a, b in zip(one["fresh"], t["fresh"], strict=True):
            _same_step(a, b)
        _same_step(one["fresh"][2], t["resumed"])  # 1-process checkpoint, resumed in 2
    _same_step(one["fresh"][2], back["resumed"])  # 2-process checkpoint, resumed in 1


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(coordinator_address="h:1"), "set coordinator_address, num_processes and process_id"),
        (dict(num_processes=2, process_id=2, coordinator_address="h:1"), "process_id (2)"),
        (dict(num_processes=-1), "num_processes (-1)"),
        (dict(cpu_collectives="nccl"), "cpu_collectives ('nccl')"),
    ],
)
def test_distributed_config_errors_name_the_field(fields, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        DistributedConfig(**fields)


def test_put_fetch_round_trip_on_one_process():
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from tango_jax.parallel.mesh import MeshConfig, make_mesh

    mesh = make_mesh(MeshConfig())
    x = np.arange(8 * 3, dtype=np.float32).reshape(8, 3)
    arr = put(x, NamedSharding(mesh, P(("data", "fsdp"))))
    assert len(arr.addressable_shards) == jax.device_count()
    np.testing.assert_array_equal(fetch({"x": arr})["x"], x)


# --- the real loop: `python -m tango_jax.train` as 1 x 8 and as 2 x 4 ------------------------

ROOT = Path(__file__).resolve().parents[2]


def _train_flags(run_dir: Path) -> list[str]:
    """The real command's `--config.*` flags for tests/test_loop.py's shortened tiny config
    (`_short_config`: the fields where it differs from configs/tiny_arith.py), cut further to
    three RL steps G, V, G (a cycle of one generator and one verifier step, no warm-up),
    evaluation at the end only (evaluation in two processes is the same code before training),
    on fewer process-bench items, and a checkpoint after every step."""
    from short_runs import config_flags
    from short_runs import short_config as _short_config

    fields = dict(
        f.removeprefix("--config.").split("=", 1)
        for f in config_flags(_short_config(run_dir, total_steps=3))
    )
    fields |= {
        "schedule.verifier_warmup_steps": 0,
        "schedule.n_generator_steps": 1,
        "schedule.n_verifier_steps": 1,
        "eval.every_generator_steps": 0,
        "eval.before_train": False,
        "eval.sampled_n": 1,
        "eval.process_bench_size": 8,
        "checkpoint.every_steps": 1,
    }
    # every field that differs is a bool, int, float or str: str() is its flag value
    return [f"--config.{k}={v}" for k, v in fields.items()]


def _train(run_dir: Path, processes: int, *flags: str) -> list[subprocess.Popen]:
    """Starts `python -m tango_jax.train` on 8 simulated CPU devices split over `processes`
    processes (the config's distributed.* fields, gloo between processes); logs beside
    run_dir. The runs in one directory share JAX's compilation cache: a resumed run loads the
    programs its layout's first run compiled (most of a run's time here is compiling)."""
    from short_runs import TINY

    cmd = [sys.executable, "-m", "tango_jax.train", TINY]  # SFT in the run
    cmd += [*_train_flags(run_dir), *flags]  # a later flag for a field wins
    port = _free_port()
    procs = []
    for pid in range(processes):
        extra = []
        if processes > 1:
            extra = [
                "--config.distributed.enable=True",
                f"--config.distributed.coordinator_address=127.0.0.1:{port}",
                f"--config.distributed.num_processes={processes}",
                f"--config.distributed.process_id={pid}",
                "--config.distributed.initialization_timeout_s=120",
            ]
        log = open(f"{run_dir}-{pid}.log", "w")  # noqa: SIM115 (closed with the process)
        procs.append(
            subprocess.Popen(
                [*cmd, *extra],
                cwd=ROOT,
                env=_env(8 // processes, run_dir.parent / "compile_cache"),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
        log.close()
    return procs


def _wait(procs: list[subprocess.Popen], logs: list[Path]) -> None:
    """Waits for every process; the first failure kills the others (they would wait for it in
    a collective) and fails the test with its log."""
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while any(p.poll() is None for p in procs):
            failed = [i for i, p in enumerate(procs) if p.returncode not in (None, 0)]
            if failed or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, log in zip(procs, logs, strict=True):
        assert p.returncode == 0, f"{log} (rc {p.returncode}):\n" + log.read_text()[-4000:]


def _logs(run_dir: Path, processes: int) -> list[Path]:
    return [Path(f"{run_dir}-{i}.log") for i in range(processes)]


def _assert_same_rows(a: list[dict], b: list[dict]) -> None:
    """The same metric lines, key for key, every value to float-rounding tolerance; wall-clock
    quantities are left out (test_loop._comparable: `time`, `perf/*`, `*_s`, ...): they are the
    only values that may legitimately differ between the layouts."""
    from short_runs import comparable as _comparable

    a, b = _comparable(a), _comparable(b)
    assert [r["step"] for r in a] == [r["step"] for r in b]
    for ra, rb in zip(a, b, strict=True):
        assert ra.keys() == rb.keys(), (ra["step"], ra.keys() ^ rb.keys())
        for k, va in ra.items():
            if isinstance(va, str):
                assert rb[k] == va, (ra["step"], k)
            else:
                np.testing.assert_allclose(
                    rb[k], va, rtol=1e-5, atol=1e-6, err_msg=f"step {ra['step']} {k}"
                )


def _assert_same_weights(a: Path, b: Path) -> None:
    """The final weights (hf/<role>) of run b are run a's: per tensor, the difference is below
    0.3% of what RL changed in it (Adam divides each gradient by its own running size, so
    gradients that are float noise in both runs move a weight by up to ~lr either way; the
    two layouts' final weights were 0.0072% (generator) and 0.022% (verifier) apart, and the
    furthest tensor, the verifier's layer-0 k_proj bias, 0.11% at the suite's LLVM level 0,
    tests/helpers/xla_flags.py)."""
    from short_runs import weights as _weights

    for role in ("generator", "verifier"):
        start = _weights(a / "sft" / role)
        wa, wb = _weights(a / "hf" / role), _weights(b / "hf" / role)
        assert wa.keys() == wb.keys() == start.keys()
        for k in wa:
            moved = np.linalg.norm(wa[k] - start[k])
            assert np.linalg.norm(wb[k] - wa[k]) <= 3e-3 * moved + 1e-7, (role, k, moved)


def _crashed_after_step_1(run_dir: Path, copy: Path) -> None:
    """A copy of the run as a crash right after step 1's checkpoint would have left it."""
    shutil.copytree(run_dir, copy)
    for name in ("2", "3"):
        shutil.rmtree(copy / "checkpoints" / name)
    shutil.rmtree(copy / "hf")


def test_the_train_command_in_two_processes_matches_one_and_resumes_across(tmp_path):
    """`python -m tango_jax.train` on the tiny config (SFT of both models, evaluation, the RL
    steps G, V, G, checkpoints, HF export) as 1 process x 8 devices and as 2 processes x 4
    devices: the same metrics.jsonl (written by process 0) and SFT logs, and final weights.
    Then the 1-process run, cut back to its step-1 checkpoint, resumes as 2 processes and
    writes the uninterrupted run's steps 2 and 3. (The other way, a 2-process checkpoint
    resumed in 1 process, is the worker test's `back` run above: the run checkpoint's host
    state, data position included, is the same in every layout, and this resume reads it.)"""
    one, two, one_in_two = tmp_path / "one", tmp_path / "two", tmp_path / "one_in_two"
    # The resume starts as soon as the 1-process run has finished, beside the 2-process run.
    # The 1-process run ends with the step-ranking probe (off in the other short runs).
    started = {one: _train(one, 1, "--config.eval.step_ranking=True"), two: _train(two, 2)}
    try:
        _wait(started[one], _logs(one, 1))
        _crashed_after_step_1(one, one_in_two)
        started[one_in_two] = _train(one_in_two, 2)
        for run_dir in (two, one_in_two):
            _wait(started[run_dir], _logs(run_dir, len(started[run_dir])))
    finally:  # a failure leaves no process behind
        for p in (p for procs in started.values() for p in procs if p.poll() is None):
            p.kill()
            p.wait()

    rows = read_metrics(one)
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert [r["phase"] for r in rows] == ["generator", "verifier", "generator"]
    ranking = [line for line in _logs(one, 1)[0].read_text().splitlines() if "step ranking" in line]
    assert [line.split("ranking: ")[1].split(":")[0] for line in ranking] == [
        "before RL",
        "after RL",
    ]
    assert "eval/generator/accuracy" in rows[2] and "eval/verifier/step_f1" in rows[2]
    assert len({r.get("generator/train/loss") for r in rows[::2]}) == 2  # the model moves
    _assert_same_rows(rows, read_metrics(two))
    for role in ("generator", "verifier"):
        sft_one = read_metrics(one / "sft_logs" / role)
        assert [r["step"] for r in sft_one] == [1, 2, 3]
        _assert_same_rows(sft_one, read_metrics(two / "sft_logs" / role))
    _assert_same_weights(one, two)

    rows = read_metrics(one_in_two)
    assert [r["step"] for r in rows] == [1, 2, 3]
    _assert_same_rows(read_metrics(one)[1:], rows[1:])
    _assert_same_weights(one, one_in_two)


def test_sigterm_to_one_of_two_processes_stops_both_after_the_same_step(tmp_path):
    """`python -m tango_jax.train` as 2 processes x 4 devices, with periodic checkpoints off
    (and no SFT or evaluation, to be quick): SIGTERM reaches process 1 only, once step 1 is
    written. Both processes stop after the same step (they agree at the end of every step),
    exit with status 75 (stopped, saved), and the one checkpoint they wrote together is that
    step's, readable and final."""
    run_dir = tmp_path / "stopped"
    no_sft = [f"--config.sft.{role}.enable=False" for role in ("generator", "verifier")]
    fewer = ["--config.eval.at_end=False"]
    procs = _train(run_dir, 2, "--config.checkpoint.every_steps=0", *no_sft, *fewer)
    logs = _logs(run_dir, 2)
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while _steps_written(run_dir) < 1:
            assert all(p.poll() is None for p in procs), logs[0].read_text()[-3000:]
            assert time.monotonic() < deadline
            time.sleep(0.2)
        procs[1].send_signal(signal.SIGTERM)
        codes = [p.wait(timeout=TIMEOUT_S) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert codes == [75, 75], [log.read_text()[-2000:] for log in logs]
    stops = [
        [line for line in log.read_text().splitlines() if "stopped after step" in line]
        for log in logs
    ]
    assert all(len(s) == 1 for s in stops), stops
    step = int(stops[0][0].split("stopped after step ")[1].split()[0])
    assert step in (1, 2) and f"stopped after step {step} " in stops[1][0]
    from tango_jax.checkpoint.run import RunCheckpointer

    with RunCheckpointer(run_dir / "checkpoints", keep=1, read_only=True) as ckpt:
        assert ckpt.all_steps() == [step]
        assert ckpt.host()["host_state"]["step"] == step
    assert [r["step"] for r in read_metrics(run_dir)] == list(range(1, step + 1))
    assert not (run_dir / "hf").exists()  # not finished: no final export


def _steps_written(run_dir: Path) -> int:
    file = run_dir / "metrics.jsonl"
    return file.read_text().count("\n") if file.exists() else 0
