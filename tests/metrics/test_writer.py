"""Metrics: strict JSON lines, TensorBoard mirror, resume truncation, timers, progress line."""

from __future__ import annotations

import io
import json
import struct

import numpy as np
import pytest
from tensorboardX.proto.event_pb2 import Event, SessionLog

from tango_jax.metrics.writer import (
    METRICS_FILE,
    TENSORBOARD_SUBDIR,
    MetricsWriter,
    PhaseTimer,
    Progress,
    StepClock,
    duration_text,
    metric_columns,
    read_metrics,
)


def _events(run_dir) -> list[Event]:
    """Every event of every TensorBoard file (TFRecord: length, crc, payload, crc)."""
    out = []
    for path in sorted((run_dir / TENSORBOARD_SUBDIR).iterdir()):
        data = path.read_bytes()
        pos = 0
        while pos < len(data):
            (n,) = struct.unpack("<Q", data[pos : pos + 8])
            out.append(Event.FromString(data[pos + 12 : pos + 12 + n]))
            pos += 12 + n + 4
    return out


def _scalars(run_dir) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list] = {}
    for e in _events(run_dir):
        for v in e.summary.value:
            out.setdefault(v.tag, []).append((e.step, v.simple_value))
    return out


def _strict(line: str) -> dict:
    def reject(c):
        raise AssertionError(f"non-standard JSON constant {c}")

    return json.loads(line, parse_constant=reject)


def test_lines_are_strict_json_and_mirror_to_tensorboard(tmp_path):
    with MetricsWriter(tmp_path) as w:
        w.write(1, {"generator/loss": 0.5, "perf/generate_s": np.float32(2.0)}, phase="generator")
        w.write(2, {"generator/loss": float("nan"), "verifier/acc": np.int64(1)})
    lines = (tmp_path / METRICS_FILE).read_text().splitlines()
    rows = [_strict(line) for line in lines]
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[0]["phase"] == "generator" and rows[1]["phase"] is None
    assert rows[0]["generator/loss"] == 0.5 and rows[1]["generator/loss"] is None
    assert rows[1]["verifier/acc"] == 1.0 and rows[0]["time"] <= rows[1]["time"]
    assert read_metrics(tmp_path) == rows
    cols = metric_columns(rows)
    np.testing.assert_array_equal(cols["step"], [1, 2])
    np.testing.assert_array_equal(cols["generator/loss"], [0.5, np.nan])
    np.testing.assert_array_equal(cols["verifier/acc"], [np.nan, 1.0])  # missing -> NaN
    tb = _scalars(tmp_path)
    assert tb["generator/loss"][0] == (1, 0.5) and np.isnan(tb["generator/loss"][1][1])
    assert tb["perf/generate_s"] == [(1, 2.0)]


@pytest.mark.parametrize(
    "metrics, error, match",
    [
        ({"loss": 1.0}, ValueError, "must be hierarchical"),
        ({"generator/": 1.0}, ValueError, "must be hierarchical"),
        ({"generator/reward mean": 1.0}, ValueError, "no whitespace"),
        ({"generator/text": "abc"}, TypeError, "'generator/text' has value 'abc'"),
        ({"generator/vec": np.ones(3)}, TypeError, "metrics are scalars"),
    ],
)
def test_bad_names_and_values_are_rejected(tmp_path, metrics, error, match):
    with MetricsWriter(tmp_path, tensorboard=False) as w, pytest.raises(error, match=match):
        w.write(1, metrics)


def test_steps_must_increase(tmp_path):
    with MetricsWriter(tmp_path, tensorboard=False) as w:
        w.write(3, {"a/b": 1.0})
        with pytest.raises(ValueError, match="step 3 written after step 3"):
            w.write(3, {"a/b": 2.0})


def test_resume_drops_lines_after_the_checkpoint_and_purges_tensorboard(tmp_path):
    with MetricsWriter(tmp_path) as w:
        for step in range(1, 6):
            w.write(step, {"generator/loss": float(step)})
    with (tmp_path / METRICS_FILE).open("a") as f:
        f.write('{"step": 6, "generator/lo')  # the crashed run died mid-line
    with pytest.raises(ValueError, match="pass resume_step"):
        MetricsWriter(tmp_path)
    with MetricsWriter(tmp_path, resume_step=3) as w:
        with pytest.raises(ValueError, match="step 3 written after step 3"):
            w.write(3, {"generator/loss": 30.0})
        w.write(4, {"generator/loss": 40.0})
    rows = [_strict(line) for line in (tmp_path / METRICS_FILE).read_text().splitlines()]
    assert [(r["step"], r["generator/loss"]) for r in rows] == [(1, 1), (2, 2), (3, 3), (4, 40)]
    # TensorBoard keeps old event files but is told to discard their steps >= 4.
    starts = [e.step for e in _events(tmp_path) if e.session_log.status == SessionLog.START]
    assert starts == [4]


def test_a_corrupt_line_before_the_end_is_an_error(tmp_path):
    (tmp_path / METRICS_FILE).write_text('{"step": 1}\nnot json\n{"step": 2}\n')
    with pytest.raises(ValueError, match=f"{METRICS_FILE}:2: not a JSON line"):
        read_metrics(tmp_path)


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_phase_timer_accumulates_phases_and_token_rates():
    clock = _Clock()
    timer = PhaseTimer(clock=clock)
    with timer("generate") as ph:
        clock.now += 2.0
        ph.tokens = 500
    with timer("train"):
        clock.now += 1.0
    with pytest.raises(RuntimeError), timer("generate"):  # time counts even when it raises
        clock.now += 0.5
        raise RuntimeError
    assert timer.metrics() == {
        "perf/generate_s": 2.5,
        "perf/generate_tokens_per_s": 200.0,
        "perf/train_s": 1.0,
        "perf/step_s": 3.5,
    }
    assert timer.metrics() == {"perf/step_s": 0.0}  # reset for the next step


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_quiet_in_logs_for_short_phases_and_beats_for_long_ones():
    clock, log = _Clock(), io.StringIO()
    with Progress("verify", total=10, stream=log, log_interval_s=60, clock=clock) as bar:
        clock.now = 5.0
        bar.update(10)
    assert log.getvalue() == ""
    with Progress("generate", total=100, stream=log, log_interval_s=60, clock=clock) as bar:
        for _ in range(5):
            clock.now += 30.0
            bar.update(20)
    lines = log.getvalue().splitlines()
    assert lines == [
        "generate: 40/100 (40%) 0.7/s 60s eta 90s",
        "generate: 80/100 (80%) 0.7/s 120s eta 30s",
        "generate: 100/100 (100%) 0.7/s 150s eta 0s",  # the final state, at close
    ]


def test_progress_redraws_one_line_on_a_terminal():
    clock, tty = _Clock(), _Tty()
    with Progress("train", stream=tty, clock=clock) as bar:
        clock.now = 1.0
        bar.update(3)
    out = tty.getvalue()
    assert out.count("\r\x1b[K") == 2 and out.endswith("train: 3 3.0/s 1s\n")


def test_step_clock_leaves_the_compiling_first_step_out_of_its_estimate():
    clock = _Clock()
    steps = StepClock(total=10, clock=clock)
    clock.now = 300.0  # step 1: compiles
    assert steps.eta(1) == "eta ?"
    clock.now = 310.0
    assert steps.eta(2) == "eta 1m20s"  # 10 s per step, 8 steps left
    clock.now = 330.0  # called every 2 steps, say: still 10 s per step
    assert steps.eta(4) == "eta 1m00s"
    assert steps.eta(10) == "eta 0s"
    resumed = StepClock(total=5000, clock=clock)  # a resumed run: its first call is step 4000
    assert resumed.eta(4000) == "eta ?"
    clock.now += 9.0
    assert resumed.eta(4001) == "eta 2h29m"


@pytest.mark.parametrize(
    "seconds, text", [(0.4, "0s"), (59.4, "59s"), (60, "1m00s"), (3599, "59m59s"), (7260, "2h01m")]
)
def test_durations_read_as_people_write_them(seconds, text):
    assert duration_text(seconds) == text
