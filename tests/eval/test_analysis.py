"""The analysis helpers and the notebook that uses them, on a run directory written here."""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib
import numpy as np
import pytest

from tango_jax.eval import analysis
from tango_jax.eval import report as R
from tango_jax.metrics.rollouts import RolloutLog, RolloutLogConfig
from tango_jax.metrics.writer import MetricsWriter

matplotlib.use("Agg")

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "analysis.ipynb"


def _write_run(path: Path, accuracy_gain: float) -> Path:
    with MetricsWriter(path, tensorboard=False) as w:
        w.write(0, {"eval/generator/accuracy": 0.2, "eval/verifier/f1": 0.5}, phase="eval")
        for step in range(1, 9):
            w.write(
                step,
                {
                    "generator/accuracy": 0.2 + accuracy_gain * step / 8,
                    "perf/step_s": 1.0,
                    "perf/generate_s": 0.5,
                },
                phase="generator",
            )
        w.write(
            9,
            {"eval/generator/accuracy": 0.2 + accuracy_gain, "eval/verifier/f1": float("nan")},
            phase="generator",
        )
    return path


def test_eval_table_first_and_last(tmp_path):
    runs = analysis.load_runs({"a": _write_run(tmp_path / "a", 0.3)})
    table = analysis.eval_table(
        runs, ["eval/generator/accuracy", "eval/verifier/f1", "eval/verifier/verdict_accuracy"]
    )
    assert table["a"]["eval/generator/accuracy"] == pytest.approx((0.2, 0.5))
    assert table["a"]["eval/verifier/f1"] == (0.5, 0.5)  # the non-finite (null) value is skipped
    assert all(math.isnan(x) for x in table["a"]["eval/verifier/verdict_accuracy"])
    assert "0.200 -> 0.500" in analysis.format_table(table)


def test_runs_without_a_verifier_read_no_verifier_not_nan(tmp_path):
    """A Tango run beside a GRPO run: the GRPO row says "no verifier" in verifier columns; with
    GRPO runs only, those columns are left out."""
    with MetricsWriter(tmp_path / "g", tensorboard=False) as w:
        w.write(0, {"eval/generator/accuracy": 0.2, "perf/generate_s": 1.0}, phase="eval")
        w.write(9, {"eval/generator/accuracy": 0.4}, phase="eval")
    runs = analysis.load_runs({"tango": _write_run(tmp_path / "t", 0.3), "grpo": tmp_path / "g"})
    metrics = ["eval/generator/accuracy", "eval/verifier/f1"]
    assert [analysis.has_verifier(run) for run in runs.values()] == [True, False]
    assert analysis.eval_summary(runs, metrics).splitlines()[2:] == [
        "| tango | 0.200 -> 0.500 | 0.500 -> 0.500 |",
        "| grpo | 0.200 -> 0.400 | no verifier |",
    ]
    assert analysis.eval_summary({"grpo": runs["grpo"]}, metrics).splitlines() == [
        "| run | generator/accuracy |",
        "|---|---|",
        "| grpo | 0.200 -> 0.400 |",
    ]


def test_unlabelled_runs_are_named_by_their_configs(tmp_path):
    def run(name: str, config: dict | None) -> Path:
        _write_run(tmp_path / name, 0.1)
        if config is not None:
            (tmp_path / name / "config.json").write_text(json.dumps(config))
        return tmp_path / name

    def tango_jax(name: str, seed: int, enable: bool, trainable: bool) -> dict:
        return {"name": name, "seed": seed, "verifier": {"enable": enable, "trainable": trainable}}

    choices = [
        run("a", tango_jax("x", 0, True, True)),
        run("b", tango_jax("x_grpo", 0, False, False)),
        run("c", tango_jax("x_grpo", 1, False, False)),
        run("d", tango_jax("x_judge", 0, True, False)),
        ("mine", run("e", None)),
        run("f", None),
        tmp_path / "absent",
    ]
    found, missing = analysis.label_runs(choices, root="/elsewhere")  # absolute paths stay
    assert list(found) == [
        "Tango (x)",
        "GRPO (x_grpo, seed 0)",
        "GRPO (x_grpo, seed 1)",
        "GRPO, frozen verifier (x_judge)",
        "mine",
        "f",
    ]
    assert found["mine"] == tmp_path / "e" and missing == [tmp_path / "absent"]
    with pytest.raises(ValueError, match="two runs share a label"):
        analysis.label_runs([("a", tmp_path / "a"), ("a", tmp_path / "b")])


def test_before_after_lines_report_first_and_last_evaluation(tmp_path):
    with MetricsWriter(tmp_path / "r", tensorboard=False) as w:
        w.write(
            0, {"eval/generator/sampled_accuracy": 0.25, "eval/verifier/step_f1": 0.1}, phase="eval"
        )
        w.write(5, {"generator/accuracy": 0.4}, phase="generator")
        w.write(
            9, {"eval/generator/sampled_accuracy": 0.5, "eval/verifier/step_f1": 0.4}, phase="eval"
        )
    lines = analysis.before_after_lines(analysis.load_runs({"r": tmp_path / "r"})["r"])
    assert lines == [
        "generator accuracy, sampled at the training T: 0.250 (step 0) -> 0.500 (step 9), +0.250",
        "verifier step F1 (first INCORRECT step vs first error): 0.100 (step 0) -> 0.400 "
        "(step 9), +0.300",
    ]


def test_location_lines_compare_with_the_no_skill_verifier_at_its_pass_rate(tmp_path):
    """3-step items, half wrong. Step 9: found 1/2, passed 1/2; no skill at pass rate 1/2
    finds (1/2)/3 = 1/6 and scores F1 2 (1/6)(1/2) / (2/3) = 1/4; random location (1/4 on
    both kinds) F1 1/4."""
    f, c = "eval/verifier/step_acc_erroneous", "eval/verifier/step_acc_correct"
    with MetricsWriter(tmp_path / "r", tensorboard=False) as w:
        w.write(0, {f: 0.25, c: 0.0}, phase="eval")
        w.write(4, {f: 0.3, c: 0.1}, phase="eval")
        w.write(9, {f: 0.5, c: 0.5}, phase="eval")
    run = analysis.load_runs({"r": tmp_path / "r"})["r"]
    lines = analysis.location_lines(run, [0, 2, -1, -1], [3, 3, 3, 3])
    assert len(lines) == 2 and lines[0].startswith("step 0: first error found 0.250")
    assert lines[1] == (
        "step 9: first error found 0.500 (a verifier without location skill that passes as "
        "many correct solutions, 0.500: 0.167); step F1 0.500 (that verifier 0.250, a random "
        "location 0.250, always CORRECT 0)"
    )
    with MetricsWriter(tmp_path / "g", tensorboard=False) as w:  # a run without a verifier
        w.write(0, {"eval/generator/accuracy": 0.5}, phase="eval")
    assert analysis.location_lines(analysis.load_runs({"g": tmp_path / "g"})["g"], [], []) == []


def test_smooth_is_a_trailing_mean():
    np.testing.assert_allclose(
        analysis.smooth(np.array([1.0, 3.0, 5.0, 7.0]), 2), [1.0, 2.0, 4.0, 6.0]
    )


# --- evaluation outputs ----------------------------------------------------------------------


def _gen(benchmark: str, i: int, correct: bool, tokens: int = 10, finish: str = "stop") -> dict:
    return {
        "id": str(i),
        "benchmark": benchmark,
        "correct": correct,
        "gold": "1",
        "predicted": "1" if correct else "2",
        "format_score": 1.0 if correct else 0.5,
        "num_steps": 3,
        "response_tokens": tokens,
        "finish_reason": finish,
        "response": "...",
    }


def _ver(split: str, i: int, label: int, prediction: int | None, judgments: int) -> dict:
    return {
        "id": str(i),
        "split": split,
        "label": label,
        "prediction": prediction,
        "num_steps": 3,
        "num_judgments": judgments,
        "verdict": None,
        "response": "...",
    }


GENERATOR = {
    "MATH500": [_gen("MATH500", 0, True), _gen("MATH500", 1, False, 30, "length")],
    "AIME2024": [_gen("AIME2024", 0, True)],
    "BGQA": [_gen("BGQA", i, c) for i, c in enumerate((True, True, False))],
}
# labels -1, 1, 2 predicted -1, 1, unreadable: acc. erroneous 1/2, acc. correct 1/1, F1 2/3
VERIFIER = {
    "gsm8k": [_ver("gsm8k", 0, -1, -1, 3), _ver("gsm8k", 1, 1, 1, 3), _ver("gsm8k", 2, 2, None, 0)]
}


def _write_evaluation(out_dir: Path, generator=GENERATOR, verifier=VERIFIER) -> Path:
    """The files `python -m tango_jax.evaluate` leaves in out_dir, made by the same report
    functions from these records."""
    results: dict = {"out_dir": str(out_dir)}
    for role, records, summary in (
        ("generator", generator, R.generator_summary),
        ("verifier", verifier, R.verifier_summary),
    ):
        if records:
            (out_dir / role).mkdir(parents=True)
            for name, recs in records.items():
                lines = "".join(json.dumps(r) + "\n" for r in recs)
                (out_dir / role / f"{name}.jsonl").write_text(lines)
            results[role] = {"model": out_dir.name, **summary(records)}
    (out_dir / "results.json").write_text(json.dumps(results))
    return out_dir


def test_evaluations_are_found_in_step_order_and_tabulated(tmp_path):
    run = tmp_path / "run"
    for step in ("step_10", "final", "step_2", "start"):
        _write_evaluation(run / "eval" / step)
    (run / "eval" / "step_5").mkdir()  # killed before it wrote results.json: not listed
    found = analysis.find_evaluations({"tango": run})
    assert list(found) == ["tango start", "tango step_2", "tango step_10", "tango final"]
    evals = analysis.load_evaluations({"a": found["tango step_2"]})
    assert evals["a"]["records"]["generator"]["BGQA"] == GENERATOR["BGQA"]
    t1 = analysis.table1(evals).splitlines()
    assert t1[0] == (
        "| Evaluation | MATH500 | AIME24 | AIME25 | AMC23 | OlyB | Avg | BGQA | CRUX | StratQA "
        "| TableB | Avg |"
    )
    # MATH500 1/2, AIME24 1/1 -> math Avg 75.0; BGQA 2/3 -> OOD Avg 66.7
    assert t1[2] == "| a | 50.0 | 100.0 | - | - | - | 75.0 | 66.7 | - | - | - | 66.7 |"
    assert t1[3].startswith("| TANGO-Qwen-7B (paper) | 82.4 |")
    t3 = analysis.table3(evals).splitlines()
    assert t3[2] == "| a | 66.7 | - | - | - | 66.7 |"
    diag = analysis.generator_diagnostics(evals)
    assert "| a | MATH500 | 2 | 50.0 | 0.75 | 20 | 50.0 |" in diag  # one of two cut at the budget
    assert "| a | gsm8k | 2 / 1 | 50.0 | 100.0 | 66.7 | 33.3 | 66.7 |" in (
        analysis.verifier_diagnostics(evals)
    )


def test_evaluations_without_a_verifier_say_so_instead_of_an_empty_table(tmp_path):
    out_dir = _write_evaluation(tmp_path / "eval" / "final", verifier={})
    evals = analysis.load_evaluations({"grpo final": out_dir})
    assert "| grpo final | 50.0 |" in analysis.table1(evals)
    assert (
        analysis.table3(evals)
        == analysis.verifier_diagnostics(evals)
        == ("no verifier results (a run without a verifier, or ProcessBench not run)\n")
    )


def test_an_evaluation_without_results_says_how_to_get_them(tmp_path):
    with pytest.raises(FileNotFoundError, match="run `python -m tango_jax.evaluate` first"):
        analysis.load_evaluation(tmp_path)


ROLLOUT_ROWS = [
    {
        "step": 8, "phase": "generator", "problem": 0, "sample": s, "question": "What is 2+3?",
        "answer": "5", "solution": f"<answer>\\boxed{{{4 + s}}}</answer>",
        "outcome_reward": float(s), "correct": bool(s), "advantage": 0.7 if s else -0.7,
        "verifications": [{"text": "...", "step_judgments": [1], "verdict": 1,
                           "format_score": 1.0, "reward": 1.0, "step_rewards": [1.0]}],
    }
    for s in (0, 1)
]  # fmt: skip


def _run_notebook(cwd: Path, monkeypatch, runs=None) -> dict:
    """Executes the notebook's code cells in order, in one namespace, from `cwd` (where
    Jupyter starts the kernel when the notebook is opened from its folder); `runs`, when
    given, replaces `RUNS` after the first code cell, as a user edits that cell."""
    monkeypatch.chdir(cwd)
    cells = [c for c in json.loads(NOTEBOOK.read_text())["cells"] if c["cell_type"] == "code"]
    namespace: dict = {}
    for i, cell in enumerate(cells):
        exec(compile("".join(cell["source"]), str(NOTEBOOK), "exec"), namespace)
        if i == 0 and runs is not None:
            namespace["RUNS"] = runs
    return namespace


def test_notebook_runs_from_notebooks_with_runs_under_the_repo_root(tmp_path, monkeypatch, capsys):
    """A checkout laid out like this one (pyproject.toml, tango_jax/, notebooks/, runs/): the
    notebook, started in notebooks/, finds the default runs under the root."""
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'tango_jax'\n")
    (tmp_path / "tango_jax").mkdir()
    (tmp_path / "notebooks").mkdir()
    tango = _write_run(tmp_path / "runs" / "tiny_arith", 0.3)
    _write_run(tmp_path / "runs" / "tiny_arith_grpo", 0.1)
    _write_evaluation(tango / "eval" / "step_9")
    RolloutLog(tango, RolloutLogConfig()).write(8, ROLLOUT_ROWS, phase="generator")
    config = {"name": "tiny_arith", "seed": 0, "verifier": {"enable": True, "trainable": True}}
    (tango / "config.json").write_text(json.dumps(config))
    namespace = _run_notebook(tmp_path / "notebooks", monkeypatch)
    assert namespace["ROOT"] == tmp_path.resolve()
    assert list(namespace["runs"]) == ["Tango (tiny_arith)", "tiny_arith_grpo"]  # no config
    assert list(namespace["evals"]) == ["Tango (tiny_arith) step_9"]
    out = capsys.readouterr().out
    assert "| Tango (tiny_arith) step_9 | 50.0 | 100.0 |" in out
    assert "step 8 (generator), problem 0 sample 1: outcome reward 1.00 (correct), advantage " \
        "+0.700" in out  # fmt: skip
    assert "verifier: verdict CORRECT, step judgments [1], step rewards [1.0]" in out
    assert "no rollout log in" in out  # the grpo run logged none


def test_notebook_runs_from_this_checkouts_notebooks_folder(tmp_path, monkeypatch, capsys):
    runs = {"mine": _write_run(tmp_path / "tango", 0.3), "absent": tmp_path / "absent"}
    namespace = _run_notebook(NOTEBOOK.parent, monkeypatch, runs=runs)
    assert namespace["ROOT"] == NOTEBOOK.parents[1]
    assert set(namespace["runs"]) == {"mine"}
    assert f"no metrics.jsonl in {tmp_path / 'absent'}" in capsys.readouterr().out


def test_curves_the_notebook_plots_are_metrics_the_loop_writes():
    """Names checked against a real run's metrics.jsonl in tests/e2e/test_loop.py; here: each
    panel list holds held-out accuracy, step F1, KL, entropy and tokens/s."""
    assert {"eval/generator/accuracy", "eval/verifier/step_f1"} <= set(analysis.HELD_OUT_CURVES)
    assert {"generator/train/loss/kl", "generator/train/loss/entropy"} <= set(
        analysis.TRAINING_CURVES
    )
    assert "perf/generate_tokens_per_s" in analysis.THROUGHPUT_CURVES


# Committed records of three GRPO runs (no verifier): two under tango_jax, one under TRL's
# GRPOTrainer, each with its config.json (docs/compare_trl/README.md).
COMPARE_RUNS = NOTEBOOK.parents[1] / "docs" / "compare_trl" / "runs"


def test_notebook_names_runs_by_their_configs_and_shows_no_verifier_they_lack(monkeypatch, capsys):
    """Three GRPO runs chosen in the first cell, one labelled there: the others are named by
    their config.json (not "tango"/"grpo"), and no verifier column, panel or NaN appears."""
    import matplotlib.pyplot as plt

    plt.close("all")
    runs = [
        COMPARE_RUNS / "tango_jax_s1",
        "docs/compare_trl/runs/trl_s1",  # relative to the repository root
        ("seed 2", COMPARE_RUNS / "tango_jax_s2"),
    ]
    namespace = _run_notebook(NOTEBOOK.parent, monkeypatch, runs=runs)
    labels = ["GRPO (smollm2_addition_grpo)", "TRL GRPO (smollm2_addition:grpo)", "seed 2"]
    assert list(namespace["runs"]) == labels
    out = capsys.readouterr().out
    assert "nan" not in out
    assert "tango" not in out.replace("tango_jax", "")  # no arm is called tango
    table = [line for line in out.splitlines() if line.startswith("| ")]
    assert table[0] == "| run | generator/accuracy | generator/format_score |"
    assert table[1] == "| GRPO (smollm2_addition_grpo) | 0.812 -> 0.938 | 0.000 -> 0.000 |"
    assert table[2] == "| TRL GRPO (smollm2_addition:grpo) | 0.812 -> 0.938 | - |"  # not logged
    assert "GRPO (smollm2_addition_grpo): 30 steps, no verifier" in out
    titles = [ax.get_title() for n in plt.get_fignums() for ax in plt.figure(n).axes]
    assert "eval/generator/accuracy" in titles
    assert not [t for t in titles if "verif" in t]
    plt.close("all")


def test_one_run_is_enough(monkeypatch, capsys):
    namespace = _run_notebook(NOTEBOOK.parent, monkeypatch, runs=[COMPARE_RUNS / "trl_s1"])
    assert list(namespace["runs"]) == ["TRL GRPO (smollm2_addition:grpo)"]
    assert "nan" not in capsys.readouterr().out


# --- `evaluate --data` results beside the runs (issue 67) --------------------------------------


def _data_results(run_dir: Path, step: str, greedy: float, sampled: float | None) -> Path:
    """results.json as `python -m tango_jax.evaluate --run_dir RUN --step STEP --data FILE`
    writes it (eval/own_data.py; tests/test_evaluate.py checks the real command's against
    `data_table`): the `data` part alone, no benchmark records."""
    out_dir = run_dir / "eval" / step
    out_dir.mkdir(parents=True)
    data = {
        "model": f"{run_dir} {step}",
        "file": "tango_jax/assets/addition/eval.jsonl",
        "reward": "tango_jax.data.addition:last_integer_reward",
        "problems": 16,
        "dropped_overlong": 0,
        "greedy_pass@1": greedy,
        "format_score": 0.0,
        "response_len": 8.5,
    }
    if sampled is not None:
        data |= {"sampled_pass@1": sampled, "samples": 8}
    (out_dir / "results.json").write_text(json.dumps({"data": data, "out_dir": str(out_dir)}))
    return out_dir


def _two_committed_runs(tmp_path: Path) -> dict[str, Path]:
    """tango_jax_s1 and _s2 of docs/compare_trl/runs (GRPO on SmolLM2, 30 steps, their own
    held-out file and reward), copied with `evaluate --data` results of their final models:
    s1 greedy and sampled at its start and end, s2 greedy only at its end."""
    import shutil

    runs = {}
    for seed in (1, 2):
        runs[f"s{seed}"] = tmp_path / f"tango_jax_s{seed}"
        shutil.copytree(COMPARE_RUNS / f"tango_jax_s{seed}", runs[f"s{seed}"])
    _data_results(runs["s1"], "start", 0.3125, 0.28125)
    _data_results(runs["s1"], "final", 0.9375, 0.921875)
    _data_results(runs["s2"], "final", 0.875, None)
    return runs


EXPECTED_DATA_ROWS = [
    "| seed 1 | 0.938 / 0.922 (step 30) | start | eval.jsonl | "
    "tango_jax.data.addition:last_integer_reward | 16 | 0.312 | 0.281 (8) |",
    "| seed 1 | 0.938 / 0.922 (step 30) | final | eval.jsonl | "
    "tango_jax.data.addition:last_integer_reward | 16 | 0.938 | 0.922 (8) |",
]


def test_data_evaluations_sit_beside_each_runs_held_out_metrics(tmp_path):
    runs = _two_committed_runs(tmp_path)
    chosen, _ = analysis.label_runs([("seed 1", runs["s1"]), ("seed 2", runs["s2"])])
    loaded = analysis.load_runs(chosen)
    table = analysis.data_table(loaded, chosen).splitlines()
    assert table[0] == (
        "| run | held-out in training: greedy / sampled | evaluate --data | file | reward | "
        "problems | greedy pass@1 | sampled pass@1 (n) |"
    )
    assert table[2:4] == EXPECTED_DATA_ROWS
    assert table[4].startswith("| seed 2 | ") and table[4].endswith("| 0.875 | - |")
    assert len(table) == 5
    # --data alone evaluates no benchmark: said, not an empty table under the paper's row
    evals = analysis.load_evaluations(analysis.find_evaluations(chosen))
    assert analysis.table1(evals) == analysis.NO_BENCHMARK_RESULTS
    assert analysis.generator_diagnostics(evals) == analysis.NO_BENCHMARK_RESULTS
    none = {"trl": COMPARE_RUNS / "trl_s1"}  # no eval/ at all
    assert analysis.data_table(analysis.load_runs(none), none) == analysis.NO_DATA_RESULTS


def test_the_notebook_runs_headless_in_jupyter_on_two_runs_with_data_evaluations(tmp_path):
    """notebooks/analysis.ipynb executed top to bottom in a Jupyter kernel (nbclient, as
    `jupyter nbconvert --execute` runs it), started in notebooks/ as Jupyter starts it, with
    RUNS set to two committed run records that have `evaluate --data` results: every cell
    runs, and the data table shows those results beside the runs' training metrics."""
    nbclient = pytest.importorskip(
        "nbclient", reason="needs the dev or analysis extra (nbclient, nbformat, ipykernel)"
    )
    nbformat = pytest.importorskip("nbformat", reason="needs the dev or analysis extra")
    pytest.importorskip("ipykernel", reason="needs the dev or analysis extra (the kernel)")
    runs = _two_committed_runs(tmp_path)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    first = next(c for c in nb.cells if c.cell_type == "code")
    assert first.source.lstrip().startswith("# The runs to compare")  # the cell users edit
    first.source = f"RUNS = [('seed 1', {str(runs['s1'])!r}), ('seed 2', {str(runs['s2'])!r})]"
    client = nbclient.NotebookClient(
        nb,
        timeout=120,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    client.execute()  # a cell that raises: CellExecutionError, with the cell and traceback
    text = "".join(
        out.get("text", "")
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.outputs
        if out.output_type == "stream"
    )
    for row in EXPECTED_DATA_ROWS:
        assert row in text
    assert "| seed 2 | 0.938 / 0.922 (step 30) | final |" not in text  # its own numbers
    assert analysis.NO_BENCHMARK_RESULTS in text
    images = [o for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(images) >= 4  # held-out, training, throughput, phases
