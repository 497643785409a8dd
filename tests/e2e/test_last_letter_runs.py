"""The arms of configs/tiny_letters.py end to end, shortened to seconds per step: the noisy
oracle puts step advantages through the α blend without any verifier, and every evaluation
reports accuracy per length bucket.

Two arms do not run here, each covered by runs of the same code: the oracle is the noisy
oracle with q = 0 (tests/config/test_tiny_letters_config.py pins that they differ in
`algorithm.oracle_flip_prob` alone; tests/run/test_oracle_feedback.py that q = 0 gives the
true labels exactly), and GRPO on letters differs from tiny_arith's GRPO run in
tests/e2e/test_loop.py (the same assertions: α 0, no step advantage, no verifier) only in its
data, which the other arms run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tango_jax.config.files import load_config_file
from tango_jax.config.run import load_run_config
from tango_jax.eval import step_probe
from tango_jax.metrics.writer import read_metrics
from tango_jax.parallel.mesh import make_mesh
from tango_jax.run.loop import TangoLoop

CONFIGS = Path(__file__).resolve().parents[2] / "configs"

pytestmark = pytest.mark.slow


def _short(run_dir: Path, variant: str):
    letters = load_config_file(CONFIGS / "tiny_letters.py")
    c = letters.get_config(f"{variant},study,scratch")  # the study's runs, shortened
    c.run_dir = str(run_dir)
    c.mesh = dict(data=1, fsdp=2, tensor=4)  # the session's 8 simulated devices, as test_loop
    for stage in (c.sft.generator, c.sft.verifier):
        stage.steps, stage.batch_size, stage.num_examples = 2, 8, 16
    for role in (c.generator, c.verifier):
        role.rollout.n = 2
        role.rollout.max_tokens = role.response_bucket = 32
        role.trainer.micro_batch_size = 4
    c.data.prompts_per_step = 2
    c.data.eval_size = 8
    c.eval.sampled_n = 2
    c.eval.process_bench_size = 4
    c.eval.every_generator_steps = 2
    c.schedule.total_steps = 2
    if variant in ("tango", "fixed_generator"):
        c.schedule.total_steps, c.schedule.verifier_warmup_steps = 3, 1
    c.eval.every_verifier_steps = 2 if variant == "fixed_generator" else 0
    return load_run_config(c)


@pytest.mark.parametrize("variant", ["noisy_oracle,q=0.3", "tango"])
def test_letters_arms_run(tmp_path, variant):
    run_dir = tmp_path / "run"
    cfg = _short(run_dir, variant)
    TangoLoop(cfg, make_mesh(cfg.mesh)).run()
    rows = read_metrics(run_dir)
    evals = [r for r in rows if r["phase"] == "eval"]
    assert evals and all(
        f"eval/generator/{m}/{b}" in r
        for r in evals
        for m in ("accuracy", "sampled_accuracy")
        for b in ("in", "unseen")
    )
    gen = [r for r in rows if r["phase"] == "generator"]
    assert gen
    if variant.startswith("noisy_oracle"):
        assert all(r["generator/alpha"] > 0 for r in gen)
        assert all("generator/feedback/process/step_f1" in r for r in gen)
        assert not (run_dir / "sft" / "verifier").exists()
    if variant == "tango":
        assert any(r["phase"].startswith("verifier") for r in rows)  # "verifier_warmup" here
        assert "eval/verifier/step_f1" in evals[-1]


def test_fixed_generator_trains_only_the_verifier(tmp_path):
    """The fixed-generator arm: every step a verifier step on the SFT generator, which ends
    exactly as it started; the verifier is evaluated after every 2nd verifier update."""
    import numpy as np
    from safetensors.numpy import load_file

    run_dir = tmp_path / "fixed_generator_s1"  # where the study keeps seed 1 of this arm
    cfg = _short(run_dir, "fixed_generator")
    TangoLoop(cfg, make_mesh(cfg.mesh)).run()
    rows = read_metrics(run_dir)
    assert [r["phase"] for r in rows if r["phase"] != "eval"] == [
        "verifier_warmup",
        "verifier",
        "verifier",
    ]
    assert all(r.get("schedule/generator_updates", 0) == 0 for r in rows)
    evals = [r["step"] for r in rows if "eval/verifier/step_f1" in r]
    # before, at the end of the warm-up, after the 2nd verifier update, at the end
    assert evals == [0, 1, 2, 3]
    sft, end = (
        load_file(next((d / "generator").glob("*.safetensors")))
        for d in (run_dir / "sft", run_dir / "hf")
    )
    assert sft.keys() == end.keys() and all(np.array_equal(sft[k], end[k]) for k in sft)
    # the study's ranking table probes the run's own SFT verifier and its RL'd export
    from tango_jax.study import arith as study

    ranks = study.ranking(tmp_path, [1], items=4, variants=["fixed_generator"])
    solutions, task = step_probe.bench(cfg.data, 4)
    v_sft, v_end = run_dir / "sft" / "verifier", run_dir / "hf" / "verifier"
    for when, ckpt in (("start", v_sft), ("final", v_end)):
        r = step_probe.probe(str(ckpt), solutions, task, style=cfg.data.templates).ranking()
        assert ranks["fixed_generator"]["1"][when]["auroc"] == pytest.approx(r.auroc)
