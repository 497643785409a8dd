"""The collapse guard in whole runs: the shipped tiny SFT verifier trained alone on the frozen
SFT generator's solutions (the fixed-generator arm), 3 updates of 8 solutions x 2
verifications each, with `verifier.collapse_guard=stop`. Its verdicts follow
the solutions and the run ends normally; forced to say INCORRECT to everything, it trips the
guard at the third update, which is saved, and the run ends there with `collapsed_at` set
(train.py then exits with ExitStatus.VERIFIER_COLLAPSED)."""

from __future__ import annotations

import dataclasses
import logging

import pytest
from short_runs import short_config

from tango_jax.checkpoint.run import RunCheckpointer
from tango_jax.config.run import load_run_config
from tango_jax.metrics.writer import read_metrics
from tango_jax.parallel.mesh import make_mesh
from tango_jax.run.loop import TangoLoop
from tango_jax.schema import to_dict
from tango_jax.text import formats

pytestmark = pytest.mark.slow


def _config(run_dir, **eval_fields):
    """Verifier RL only (the generator frozen), 3 updates of 8 solutions x 2 verifications."""
    d = to_dict(short_config(run_dir, scratch=False, total_steps=3))
    d["generator"]["trainable"] = False
    d["verifier"]["collapse_guard"] = "stop"
    d["schedule"]["verifier_warmup_steps"] = 0
    d["data"]["prompts_per_step"] = 8
    # tiny_arith's lengths: the short runs' cut solutions and verifications short of a verdict
    for role, tokens in (("generator", 96), ("verifier", 160)):
        d[role]["rollout"]["max_tokens"] = d[role]["eval_max_tokens"] = tokens
        d[role]["response_bucket"] = tokens
    d["eval"] |= {"before_train": False, "at_end": False, "every_verifier_steps": 0}
    d["eval"] |= eval_fields
    d["checkpoint"] |= {"every_steps": 0, "export_hf_at_end": False}
    return load_run_config(d)


def test_a_healthy_verifier_runs_to_the_end(tmp_path):
    loop = TangoLoop(cfg := _config(tmp_path / "ok"), make_mesh(cfg.mesh))
    loop.run()
    assert loop.collapsed_at is None and loop.stopped_at is None
    rows = read_metrics(tmp_path / "ok")
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:  # both verdicts in use, and the health metrics logged
        assert 0.05 < r["verifier/predicted_correct"] < 0.95
        assert r["verifier/collapse_guard/tripped"] == 0.0
        for key in ("balanced_accuracy", "solutions_right", "parse_fail", "entropy_mc",
                    "format_only_groups", "zero_var_groups", "class_weight/pos"):  # fmt: skip
            assert f"verifier/{key}" in r


def test_a_verifier_forced_to_one_verdict_trips_the_guard(tmp_path, monkeypatch, caplog):
    parse = formats.parse_verification

    def always_incorrect(text):
        v = parse(text)
        return dataclasses.replace(v, verdict=formats.INCORRECT)

    monkeypatch.setattr(formats, "parse_verification", always_incorrect)
    # and measured before training on a balanced probe of 4 right and 4 wrong held-out replies
    probe = {"before_train": True, "verifier_probe_size": 8, "process_bench_size": 0}
    loop = TangoLoop(cfg := _config(tmp_path / "bad", **probe), make_mesh(cfg.mesh))
    with caplog.at_level(logging.WARNING):
        loop.run()
    assert loop.collapsed_at == 3 and loop.stopped_at is None
    before, *rows = read_metrics(tmp_path / "bad")
    assert before["step"] == 0 and before["eval/probe/size"] == 8.0
    assert before["eval/probe/predicted_correct"] == 0.0
    assert before["eval/probe/balanced_accuracy"] == 0.5  # both classes there, one verdict
    assert (tmp_path / "bad" / "verifier_probe.jsonl").exists()
    assert "calls 100% of the 8 balanced probe replies INCORRECT or unparsable" in caplog.text
    assert [r["verifier/collapse_guard/tripped"] for r in rows] == [0.0, 0.0, 1.0]
    assert all(r["verifier/predicted_correct"] == 0.0 for r in rows)
    warnings = [r.getMessage() for r in caplog.records if "collapsed to one verdict" in r.message]
    assert len(warnings) == 1 and "INCORRECT or unparsable" in warnings[0]
    assert "at step 3: over its last 3 updates it called 100% of 48" in warnings[0]
    saved = RunCheckpointer(tmp_path / "bad" / "checkpoints", keep=3, read_only=True).all_steps()
    assert saved == [3]  # the step it stopped at, saved as a preemption saves
