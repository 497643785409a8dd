"""Training on a JSONL file of one's own, end to end on a short run (docs/data.md), what the
console says on the way (loading lines, `step i/total ... | eta` lines, held-out values under
their `eval/...` names), and `python -m tango_jax.evaluate --data` on the same file afterwards."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import custom_rewards
import pytest
from short_runs import short_config

from tango_jax.data import synthetic
from tango_jax.metrics.writer import read_metrics
from tango_jax.parallel.mesh import make_mesh
from tango_jax.run.loop import TangoLoop

pytestmark = pytest.mark.slow


def test_a_short_run_on_own_jsonl_data_its_console_lines_and_evaluate_on_the_file(
    tmp_path, caplog, monkeypatch
):
    arith = synthetic.ArithConfig()
    held_out = synthetic.held_out_problems(arith, 24, seed=7)
    # The user's own layout: other field names, a nested answer, numbers as numbers.
    records = [{"problem": p.question, "meta": {"gold": p.answer}} for p in held_out]
    train, test = tmp_path / "train.jsonl", tmp_path / "test.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in records[:16]))
    test.write_text("".join(json.dumps(r) + "\n" for r in records[16:]))
    cfg = short_config(
        tmp_path / "run",
        scratch=False,  # the shipped SFT models: the task's format, no SFT data needed
        data=dict(
            source="jsonl",
            train_path=str(train),
            eval_path=str(test),
            question_field="problem",
            answer_field="meta.gold",
        ),
    )
    caplog.set_level(logging.INFO, logger="tango_jax")
    loop = TangoLoop(cfg, make_mesh(cfg.mesh))
    loop.run()

    rows = read_metrics(tmp_path / "run")
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4, 5]
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["data"]["source"] == "jsonl" and saved["data"]["answer_field"] == "meta.gold"
    streams, evals = loop._data(None)  # what the run trained and evaluated on: the files
    trained_on = sorted(p.question for p in streams.generator.problems)
    assert trained_on == sorted(r["problem"] for r in records[:16])
    assert [(p.question, p.answer) for p in evals] == [
        (r["problem"], str(r["meta"]["gold"]))
        for r in records[16:20]  # data.eval_size=4
    ]

    lines = [r.getMessage() for r in caplog.records if r.name.startswith("tango_jax")]
    assert "loading data (jsonl)" in lines
    assert any(re.fullmatch(r"loading the generator from .*/generator \(.*\)", x) for x in lines)
    assert "evaluating on 4 held-out problems (greedy, and 4 samples each)" in lines
    number = r"-?[\d.]+"
    held_out = (
        rf"eval/generator/accuracy={number} eval/generator/sampled_accuracy={number} "
        rf"eval/verifier/verdict_accuracy={number} eval/verifier/balanced_accuracy={number} "
        rf"eval/verifier/predicted_correct={number} eval/verifier/f1={number}"
    )
    assert any(re.fullmatch(rf"step 0/5 before training: {held_out}", x) for x in lines)
    steps = [x for x in lines if re.match(r"step [1-5]/5 ", x)]
    generator = (  # with the verifier's health on the judging of its rollouts
        rf"accuracy={number} reward/mean={number} alpha={number} "
        rf"feedback/predicted_correct={number} feedback/balanced_accuracy={number} "
        rf"train/loss={number}"
    )
    verifier = (
        rf"verdict_accuracy={number} balanced_accuracy={number} predicted_correct={number} "
        rf"solutions_right={number} parse_fail={number} reward/mean={number} train/loss={number}"
    )
    eta = r"eta (\d+s|\d+m\d\ds)"
    expected = [  # evaluations: after the warm-up, every 2nd generator update, at the end
        rf"step 1/5 verifier {verifier} step_s={number} \| {held_out} \| eta \?",
        rf"step 2/5 generator {generator} step_s={number} \| {eta}",
        rf"step 3/5 generator {generator} step_s={number} \| {held_out} \| {eta}",
        rf"step 4/5 generator {generator} step_s={number} \| {eta}",
        rf"step 5/5 verifier {verifier} step_s={number} \| {held_out} \| eta 0s",
    ]
    assert len(steps) == len(expected)
    for line, pattern in zip(steps, expected):
        assert re.fullmatch(pattern, line), (line, pattern)

    # evaluate --data: the run's final generator on its own held-out file (its field names and
    # reward from config.json) gives what the run logged at the end, greedy and sampled.
    from tango_jax import evaluate

    run_dir, last = tmp_path / "run", rows[-1]
    base = ["--run_dir", str(run_dir), "--step", "final", "--data", str(test), "--limit", "4"]
    data = evaluate.main([*base, "--out_dir", str(tmp_path / "ev")])["data"]
    assert data["problems"] == 4 and data["reward"] == "Math-Verify" and data["samples"] == 4
    assert data["greedy_pass@1"] == last["eval/generator/accuracy"]
    assert data["sampled_pass@1"] == last["eval/generator/sampled_accuracy"]
    assert "| greedy pass@1 |" in (tmp_path / "ev" / "data.md").read_text()
    # One's own reward, importable from the current directory: every completion scores 1.
    monkeypatch.chdir(Path(custom_rewards.__file__).parent)
    own = ["--reward", "custom_rewards:every_failure", "--sampled_n", "0"]
    data = evaluate.main([*base, *own, "--out_dir", str(tmp_path / "ev2")])["data"]
    assert data["greedy_pass@1"] == 1.0 and "sampled_pass@1" not in data
    # A field the file lacks, a reward that does not import: one line naming the flag, no model.
    for flags, message in (
        (["--answer_field", "gold"], "--answer_field ('gold'): record 0 of"),
        (["--reward", "no_such_module:f"], "--reward ('no_such_module:f') names module"),
    ):
        with pytest.raises(SystemExit) as e:
            evaluate.main([*base, *flags, "--out_dir", str(tmp_path / "bad")])
        assert str(e.value).startswith(f"tango_jax.evaluate: error: {message}"), e.value
        assert "\n" not in str(e.value) and not (tmp_path / "bad").exists()


def test_a_task_of_ones_own_in_one_file_trains(tmp_path):
    """tests/helpers/toy_task.py, a task written in one file against data/task.py's protocol
    (`data.source=custom`, `data.task=toy_task:make`): both roles' SFT from scratch on its own
    examples, a verifier warm-up step and a generator step on its problems, its miniature
    ProcessBench in the held-out evaluation and its step truth in both steps' process metrics."""
    cfg = short_config(
        tmp_path / "run", total_steps=2, data=dict(source="custom", task="toy_task:make")
    )
    TangoLoop(cfg, make_mesh(cfg.mesh)).run()
    rows = read_metrics(tmp_path / "run")
    assert [(r["step"], r.get("phase")) for r in rows] == [
        (0, "eval"),
        (1, "verifier_warmup"),
        (2, "generator"),
    ]
    assert "eval/verifier/step_f1" in rows[0]  # on the toy's miniature ProcessBench
    assert "verifier/process/step_f1" in rows[1]  # the toy's step truth of its rollouts
    assert "generator/feedback/process/step_f1" in rows[2]
    for role in ("generator", "verifier"):
        assert [r["step"] for r in read_metrics(tmp_path / "run" / "sft_logs" / role)] == [1, 2, 3]
    logged = (tmp_path / "run" / "rollouts" / "step_000001.jsonl").read_text()
    assert '"source": "toy-count"' in logged and "Add 1" in logged
