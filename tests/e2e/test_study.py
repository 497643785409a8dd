"""The miniature's tooling: the shipped SFT checkpoints the default config starts from, the
script that makes them (end to end, cut to a few steps), and the study's statistics."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tango_jax.config.files import load_config_file
from tango_jax.config.run import load_run_config

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"


def _study():
    from tango_jax.study import arith

    return arith


def _script(name: str, folder: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _tiny(arg: str = "tango"):
    return load_config_file(CONFIGS / "tiny_arith.py").get_config(arg)


def test_the_default_config_starts_rl_from_the_shipped_sft_and_scratch_does_the_sft():
    module = load_config_file(CONFIGS / "tiny_arith.py")
    for variant in module.VARIANTS:
        cfg = load_run_config(_tiny(variant))
        for role in (cfg.generator, cfg.verifier):
            assert Path(role.model.path).parent == module.SFT_ASSETS and not role.model.preset
        assert not cfg.sft.generator.enable and not cfg.sft.verifier.enable
    scratch = load_run_config(_tiny("tango,scratch"))
    assert scratch.generator.model.preset == "tiny-qwen2" and not scratch.generator.model.path
    assert scratch.sft.generator.enable and scratch.sft.verifier.enable
    assert not load_run_config(_tiny("grpo,scratch")).sft.verifier.enable
    with pytest.raises(ValueError, match="write VARIANT or VARIANT,scratch"):
        _tiny("tango,scrach")
    with pytest.raises(ValueError, match="unknown variant 'tang'"):
        _tiny("tang")


def test_the_shipped_checkpoints_load_and_say_how_they_were_made():
    import jax

    from tango_jax.models import from_pretrained
    from tango_jax.models.tokenizer import load_tokenizer, tiny_tokenizer
    from tango_jax.parallel.mesh import MeshConfig, make_mesh

    assets = load_config_file(CONFIGS / "tiny_arith.py").SFT_ASSETS
    recipe = json.loads((assets / "recipe.json").read_text())
    # the verifier's phases 2 and 3 are the script's PHASE_2 and PHASE_3, each started from
    # the previous phase's verifier
    script = _script("make_tiny_sft", "assets")
    for k, fields in ((2, script.PHASE_2), (3, script.PHASE_3)):
        command = recipe["commands"][k - 1]
        for field in fields:
            assert f"--config.{field}" in command
        assert f"phase{k - 1}/sft/verifier" in command
        assert "--config.schedule.total_steps=0" in command
    assert 0.0 <= recipe["held_out_eval"]["eval/verifier/step_f1"] <= 1.0
    mesh = make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])
    expected = tiny_tokenizer().get_vocab()
    for role in ("generator", "verifier"):
        assert load_tokenizer(assets / role).get_vocab() == expected
        model = from_pretrained(assets / role, mesh=mesh)
        assert model.config.num_layers == 2 and model.config.head_dim == 64


@pytest.mark.slow
def test_make_tiny_sft_runs_its_three_phases_and_writes_the_checkpoints(tmp_path):
    """The real script, each phase cut to 2 SFT steps and a small evaluation."""
    out, work = tmp_path / "out", tmp_path / "work"
    small = [
        "sft.generator.steps=2",
        "sft.verifier.steps=2",
        "sft.generator.num_examples=64",
        "sft.verifier.num_examples=64",
        "data.eval_size=4",
        "eval.sampled_n=1",
        "eval.process_bench_size=4",
        "generator.eval_max_tokens=8",
        "verifier.eval_max_tokens=8",
        "eval.step_ranking=False",  # as in the suite's other short runs (helpers/short_runs.py)
    ]
    cmd = [sys.executable, str(ROOT / "scripts" / "assets" / "make_tiny_sft.py")]
    cmd += ["--work", str(work), "--out", str(out), *(f"--set={o}" for o in small)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["generator", "recipe.json", "verifier"]
    phase2 = json.loads((work / "phase2" / "config.json").read_text())
    assert phase2["verifier"]["model"]["path"] == str(work / "phase1" / "sft" / "verifier")
    assert phase2["data"]["arith"]["verifier_sft_facts"] == 0.75
    assert phase2["sft"]["verifier"]["steps"] == 2  # --set wins over PHASE_2
    assert phase2["eval"]["before_train"] is False  # only phase 3 evaluates (the recipe's)
    phase3 = json.loads((work / "phase3" / "config.json").read_text())
    assert phase3["verifier"]["model"]["path"] == str(work / "phase2" / "sft" / "verifier")
    assert phase3["data"]["arith"]["verifier_sft_labels"] == "unlabelled_wrong"
    assert phase3["sft"]["verifier"]["steps"] == 2  # --set wins over PHASE_3
    assert phase3["eval"]["before_train"] is True
    recipe = json.loads((out / "recipe.json").read_text())
    assert set(recipe["held_out_eval"]) >= {"eval/verifier/step_f1", "eval/generator/accuracy"}
    # what was copied is what the phases wrote
    for role, phase in (("generator", "phase1"), ("verifier", "phase3")):
        src = work / phase / "sft" / role / "model.safetensors"
        assert (out / role / "model.safetensors").read_bytes() == src.read_bytes()
    assert not (tmp_path / "out.tmp").exists()


def test_fmt_shows_the_interval_where_there_is_one():
    study = _study()
    assert study.fmt(0.3, 0.05) == "0.300 ± 0.050" and study.fmt(0.3, float("nan")) == "0.300"


def test_the_study_table_reports_changes_and_paired_differences():
    study = _study()
    f1, sampled = "eval/verifier/step_f1", "eval/generator/sampled_accuracy"
    results = {
        "tango": {
            "1": {f1: [[0, 0.1], [36, 0.4]], sampled: [[0, 0.7], [36, 0.8]]},
            "2": {f1: [[0, 0.1], [36, 0.3]], sampled: [[0, 0.6], [36, 0.7]]},
        },
        "grpo": {
            "1": {sampled: [[0, 0.7], [36, 0.75]]},
            "2": {sampled: [[0, 0.6], [36, 0.65]]},
        },
    }
    text = study.table(results, [1, 2])
    # change of Tango's step F1: +0.3 and +0.2 -> 0.25 ± 12.706 * 0.0707 / sqrt(2)
    f1_row = "| tango | verifier step F1 (ProcessBench-style) | 0.100 ± 0.000 | 0.350 ± 0.635 |"
    assert f1_row + " 0.250 ± 0.635 |" in text
    per_seed = "s1 0.100 -> 0.400; s2 0.100 -> 0.300"
    assert f"- tango, verifier step F1 (ProcessBench-style): {per_seed}" in text
    # paired: Tango - GRPO at the end = 0.05 in both seeds
    assert "| tango - grpo | generator accuracy, sampled at T=1 | 0.050 ± 0.000 |" in text


def test_location_skill_compares_with_a_no_skill_verifier_at_the_same_pass_rate():
    """One seed; after RL the verifier finds the first error on half the wrong solutions and
    passes half the right ones. No skill at pass rate 1/2 on 3-step items: found (1 - 1/2) / 3
    = 1/6, F1 = 2 (1/6)(1/2) / (2/3) = 1/4; the verifier's F1 = 1/2."""
    study = _study()
    found, passed = "eval/verifier/step_acc_erroneous", "eval/verifier/step_acc_correct"
    results = {"tango": {"1": {found: [[0, 0.5], [36, 0.5]], passed: [[0, 0.0], [36, 0.5]]}}}
    text = study.location_skill(results, [1], ([0, 1, -1, -1], [3, 3, 3, 3]))
    assert "| tango | after RL | 0.500 | 0.167 | 0.333 | 0.500 | 0.250 | 0.250 |" in text
    assert "| tango | after SFT | 0.500 | 0.333 | 0.167 | 0.000 | 0.000 | 0.000 |" in text


def test_ranking_probes_each_runs_start_and_final_verifier(tmp_path):
    """A Tango run dir whose RL started from the shipped SFT verifier and 'ended' at another
    checkpoint (the shipped generator, same tokenizer): the table pairs the two per seed, and
    its numbers are process_bench.step_ranking of the probe on the run's own ProcessBench
    stream. A GRPO run (no verifier) is left out."""
    import shutil

    from tango_jax.config.preflight import write_config
    from tango_jax.data import synthetic_labels
    from tango_jax.eval.step_probe import probe

    study = _study()
    assets = ROOT / "tango_jax" / "assets" / "tiny_arith_sft"
    cfg = load_run_config(_tiny("tango"))
    cfg = dataclasses.replace(cfg, run_dir=str(study.run_dir(tmp_path, "tango", 1)))
    write_config(cfg)
    shutil.copytree(assets / "generator", Path(cfg.run_dir) / "hf" / "verifier")
    (study.run_dir(tmp_path, "grpo", 1) / "hf").mkdir(parents=True)

    ranks = study.ranking(tmp_path, [1], items=24)
    assert list(ranks) == ["tango"]
    solutions = synthetic_labels.process_bench(cfg.data.arith, 24, seed=cfg.data.seed)
    task = synthetic_labels.ArithmeticTask(cfg.data.arith)
    for when, ckpt in (("start", assets / "verifier"), ("final", assets / "generator")):
        r = probe(str(ckpt), solutions, task, style=cfg.data.templates).ranking()
        assert ranks["tango"]["1"][when] == {
            "auroc": pytest.approx(r.auroc),
            "top1": pytest.approx(r.top1),
            "gap": pytest.approx(r.gap),
        }
    assert ranks["tango"]["1"]["start"] != ranks["tango"]["1"]["final"]
    text = study.ranking_table(ranks, [1])
    s = ranks["tango"]["1"]
    assert f"s1 {s['start']['auroc']:.3f} -> {s['final']['auroc']:.3f}" in text


def test_the_train_commands_final_lines_rank_the_steps_before_and_after_rl(tmp_path):
    """`tango_jax.train`'s ranking lines probe the run's start verifier (here the configured
    shipped one) and its final export (here the shipped generator) on the run's items; with no
    final export, or with eval.step_ranking off, they are absent (a tokenizer that splits the
    judgment words: tests/eval/test_step_probe.py)."""
    import shutil

    from tango_jax import train
    from tango_jax.data import synthetic_labels
    from tango_jax.eval import step_probe

    assets = ROOT / "tango_jax" / "assets" / "tiny_arith_sft"
    cfg = load_run_config(_tiny("tango"))
    cfg = dataclasses.replace(
        cfg,
        run_dir=str(tmp_path / "run"),
        eval=dataclasses.replace(cfg.eval, process_bench_size=16),
    )
    assert train._ranking_lines(cfg) == []  # not finished: no hf/verifier
    shutil.copytree(assets / "generator", tmp_path / "run" / "hf" / "verifier")
    lines = train._ranking_lines(cfg)
    assert [line.split(":")[0] for line in lines] == ["before RL", "after RL"]
    off = dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, step_ranking=False))
    assert train._ranking_lines(off) == []  # eval.step_ranking=False: not probed
    solutions = synthetic_labels.process_bench(cfg.data.arith, 16, seed=cfg.data.seed)
    final = tmp_path / "run" / "hf" / "verifier"
    for line, ckpt, shown in zip(
        lines, (assets / "verifier", assets / "generator"), (assets / "verifier", final)
    ):
        task = synthetic_labels.ArithmeticTask(cfg.data.arith)
        r = step_probe.probe(str(ckpt), solutions, task, style=cfg.data.templates)
        assert f"other steps {r.ranking().auroc:.3f} (chance 0.5)" in line
        assert f"first error ranked first {r.ranking().top1:.3f} (chance 0.333)" in line
        assert line.endswith(f"[{shown}]")
    # the run's own SFT wins over the configured checkpoint
    shutil.copytree(assets / "generator", tmp_path / "run" / "sft" / "verifier")
    assert step_probe.start_verifier(cfg.run_dir, cfg.verifier.model.path) == Path(
        cfg.run_dir, "sft", "verifier"
    )


def test_the_letter_tasks_ranking_probes_the_transcript_its_verifier_sft_writes(tmp_path):
    """On last letters the probe teacher-forces what the verifier SFT writes for a right
    solution (hand-checked analysis: word, letter, then the word's last letter beside it), on
    the run's own ProcessBench; the train command's lines say the same numbers."""
    import shutil

    from tango_jax import train
    from tango_jax.data import last_letter_labels
    from tango_jax.data.last_letter import LetterProblem, LetterSolution, reference_solution
    from tango_jax.eval import step_probe

    cfg = load_run_config(load_config_file(CONFIGS / "tiny_letters.py").get_config())
    cfg = dataclasses.replace(
        cfg,
        run_dir=str(tmp_path / "run"),
        eval=dataclasses.replace(cfg.eval, process_bench_size=12),
    )
    slipped = LetterSolution(LetterProblem(("kaz", "bo")), "po", first_error=0)
    letters = last_letter_labels.LetterTask(cfg.data.letters)
    text, analyses = step_probe.ideal_transcript(slipped, letters)
    assert analyses == ["Step 1 Analysis: kaz: p, z p", "Step 2 Analysis: bo: o, o o"]
    assert text.count("\\boxed{CORRECT}") == 3 and "INCORRECT" not in text
    right = reference_solution(LetterProblem(("kaz", "bo")))
    assert step_probe.ideal_transcript(right, letters)[0] == (
        last_letter_labels.verification_transcript(right, seed=0)
    )

    solutions, task = step_probe.bench(cfg.data, 12)
    assert solutions == last_letter_labels.process_bench(cfg.data.letters, 12, seed=cfg.data.seed)
    assets = ROOT / "tango_jax" / "assets" / "tiny_letters_sft"
    shutil.copytree(assets / "generator", tmp_path / "run" / "hf" / "verifier")
    lines = train._ranking_lines(cfg)
    assert [line.split(":")[0] for line in lines] == ["before RL", "after RL"]
    for line, ckpt in zip(lines, (assets / "verifier", assets / "generator")):
        r = step_probe.probe(str(ckpt), solutions, task, style=cfg.data.templates).ranking()
        assert f"other steps {r.auroc:.3f} (chance 0.5)" in line
    jsonl = dataclasses.replace(cfg.data, source=type(cfg.data.source).JSONL)
    with pytest.raises(ValueError, match="data.source='jsonl'"):
        step_probe.bench(jsonl, 4)
