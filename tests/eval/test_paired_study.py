"""The paired-study statistics against hand-worked values and SciPy's own tests."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from tango_jax.eval import paired_study as ps


def test_area_under_curve_by_hand():
    # trapezoids: (0.2+0.4)/2*6 + (0.4+0.4)/2*6 = 1.8 + 2.4 = 4.2 over x-range 12
    assert ps.area_under_curve([[0, 0.2], [6, 0.4], [12, 0.4]]) == pytest.approx(0.35)
    assert ps.area_under_curve([[0, 0.3]]) == 0.3
    with pytest.raises(ValueError, match="increase"):
        ps.area_under_curve([[0, 0.1], [0, 0.2]])
    with pytest.raises(ValueError, match="non-empty"):
        ps.area_under_curve([])


def test_steps_to_reach_by_hand():
    curve = [[0, 0.2], [6, 0.4], [12, 0.5]]
    assert ps.steps_to_reach(curve, 0.3) == pytest.approx(3.0)
    assert ps.steps_to_reach(curve, 0.2) == 0.0
    assert ps.steps_to_reach(curve, 0.5) == pytest.approx(12.0)
    assert np.isnan(ps.steps_to_reach(curve, 0.6))


def test_paired_matches_scipy():
    rng = np.random.default_rng(0)
    a = {s: float(v) for s, v in enumerate(rng.normal(0.5, 0.1, 7), 1)}
    b = {s: float(v) for s, v in enumerate(rng.normal(0.45, 0.1, 7), 1)}
    b[99] = 1.0  # unpaired: ignored
    c = ps.paired("a - b", a, b)
    d = np.array([a[s] - b[s] for s in range(1, 8)])
    ref = stats.ttest_rel([a[s] for s in range(1, 8)], [b[s] for s in range(1, 8)])
    assert c.n == 7 and c.mean == pytest.approx(d.mean())
    assert c.p == pytest.approx(ref.pvalue)
    lo, hi = stats.t.interval(0.95, 6, loc=d.mean(), scale=stats.sem(d))
    assert c.half == pytest.approx((hi - lo) / 2)
    assert np.isnan(ps.paired("x", {1: 0.1}, {1: 0.2}).half)


def test_holm_by_hand():
    cs = [ps.Contrast(n, (), 0.0, 0.0, p) for n, p in (("a", 0.01), ("b", 0.04), ("c", 0.03))]
    cs.append(ps.Contrast("d", (), 0.0, float("nan"), float("nan")))
    out = ps.holm(cs)
    # sorted p 0.01, 0.03, 0.04 -> 3*0.01, 2*0.03, max(0.06, 1*0.04)
    assert [c.p_holm for c in out[:3]] == pytest.approx([0.03, 0.06, 0.06])
    assert np.isnan(out[3].p_holm)


def _study_letters():
    from tango_jax.study import letters

    return letters


def test_the_letters_table_and_gate_from_curves():
    sl = _study_letters()
    curve = lambda ys: [[12 * i, y, 12 * i] for i, y in enumerate(ys)]
    results = {"grpo": {}, "oracle": {}}
    for s in range(1, 6):
        results["grpo"][str(s)] = {sl.PRIMARY: curve([0.3, 0.32, 0.34, 0.36])}
        results["oracle"][str(s)] = {sl.PRIMARY: curve([0.3, 0.35 + s / 100, 0.4, 0.42])}
    text, contrasts = sl.table(results, ["grpo", "oracle"], list(range(1, 6)))
    (c,) = [c for c in contrasts if c.name.endswith("AUC")]
    # AUC difference per seed: trapezoids of (0, 0.03 + s/100, 0.06, 0.06) over 36 -> by hand
    want = [
        (0 + (0.03 + s / 100)) / 2 * 12 + ((0.03 + s / 100) + 0.06) / 2 * 12 + 0.06 * 12
        for s in range(1, 6)
    ]
    assert c.name == "oracle - grpo, AUC" and c.diffs == pytest.approx([w / 36 for w in want])
    assert "| oracle | 5 |" in text
    assert "the gate holds" in sl.gate(results, list(range(1, 6)), contrasts)
    # GRPO's final accuracy 0.36 is reached by the oracle between updates 0 and 12
    r = sl.per_run(results, "oracle", 1)
    assert r["to_grpo_final"] == pytest.approx(12 * 0.06 / 0.06)
    assert "open (only 2 seeds)" in sl.gate(
        results, [1, 2], sl.table(results, ["grpo", "oracle"], [1, 2])[1]
    )


def test_the_letters_table_adds_every_other_arm_against_grpo_unadjusted():
    sl = _study_letters()
    curve = lambda ys: [[12 * i, y, 12 * i, 0] for i, y in enumerate(ys)]
    arms = ["grpo", "oracle", "oracle,alpha0=0.5"]
    results = {a: {} for a in arms}
    for s in range(1, 6):
        results["grpo"][str(s)] = {sl.PRIMARY: curve([0.3, 0.3, 0.3, 0.3])}
        results["oracle"][str(s)] = {sl.PRIMARY: curve([0.3, 0.3, 0.3, 0.3 + s / 100])}
        results["oracle,alpha0=0.5"][str(s)] = {sl.PRIMARY: curve([0.3, 0.3, 0.3, 0.3 - s / 100])}
    text, contrasts = sl.table(results, arms, list(range(1, 6)))
    by_name = {c.name: c for c in contrasts}
    planned, secondary = by_name["oracle - grpo, AUC"], by_name["oracle,alpha0=0.5 - grpo, AUC"]
    assert planned.p_holm == pytest.approx(planned.p)  # the only planned contrast present
    assert np.isnan(secondary.p_holm) and secondary.mean < 0
    g = sl.gate(results, list(range(1, 6)), contrasts)
    assert "(b) oracle - grpo" in g and "(b) oracle,alpha0=0.5 - grpo" in g
    assert g.count("the gate holds") == 1 and g.count("the gate fails") == 1
    assert "| oracle,alpha0=0.5 - grpo, AUC | 5 |" in text


def test_the_letters_verifier_rows_find_the_f1_peak_in_verifier_updates():
    sl = _study_letters()
    # [generator updates, F1, global step, verifier updates]: a rise, then a plateau below it
    f1 = {
        s: [[0, 0.1, 0, 0], [0, 0.3, 4, 4], [0, 0.5 + s / 100, 8, 8], [0, 0.45, 12, 12]]
        for s in (1, 2, 3)
    }
    results = {"fixed_generator": {str(s): {sl.F1: c} for s, c in f1.items()}}
    (row,) = [
        r
        for r in sl.verifier_rows(results, ["fixed_generator"], [1, 2, 3])
        if r.startswith("| fixed_generator")
    ]
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert cells[1] == "3" and cells[2].startswith("0.100") and cells[3].startswith("0.520")
    assert cells[4].startswith("8.0") and cells[5].startswith("0.450") and cells[6] == "12"


def test_the_letters_tango_curve_counts_the_warmup_evaluation_once():
    sl = _study_letters()
    # Tango evaluates at step 0 and again after 10 verifier warm-up steps (0 generator updates)
    grpo = [[0, 0.3, 0], [12, 0.33, 12], [24, 0.36, 24]]
    tango = [[0, 0.3, 0], [0, 0.3, 10], [12, 0.33, 25], [24, 0.39, 41]]
    results = {"grpo": {"1": {sl.PRIMARY: grpo}}, "tango": {"1": {sl.PRIMARY: tango}}}
    r = sl.per_run(results, "tango", 1)
    # trapezoids (0.3 + 0.33) / 2 * 12 + (0.33 + 0.39) / 2 * 12, over 24 updates
    assert r["auc"] == pytest.approx(((0.3 + 0.33) * 6 + (0.33 + 0.39) * 6) / 24)
    assert r["start"] == 0.3 and r["final"] == 0.39
    # GRPO's final 0.36 is reached halfway from update 12 to 24: at 18, global step 33
    assert r["to_grpo_final"] == pytest.approx(18)
    assert r["to_grpo_final_global"] == pytest.approx(33)


def test_the_letters_summary_leaves_out_unfinished_runs(tmp_path):
    import json

    sl = _study_letters()
    (tmp_path / "config.json").write_text(json.dumps({"schedule": {"total_steps": 3}}))
    assert not sl.finished(tmp_path)  # no metrics yet
    rows = [{"step": 0, "phase": "eval"}, {"step": 1}, {"step": 2}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert not sl.finished(tmp_path)  # stopped at step 2 of 3
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": 3}) + "\n")
    assert sl.finished(tmp_path)


def test_the_letters_table_says_how_right_the_step_labels_were():
    """Per run, the mean of the logged share of right step labels over its generator updates;
    per arm, the mean over seeds; arms without the metric (GRPO) are not listed."""
    sl = _study_letters()
    curve = lambda ys: [[12 * i, y, 12 * i, 0] for i, y in enumerate(ys)]
    results = {"grpo": {}, "fixed_verifier": {}}
    for s, labels in ((1, [0.6, 0.8]), (2, [0.7, 0.7])):
        results["grpo"][str(s)] = {sl.PRIMARY: curve([0.3, 0.4])}
        results["fixed_verifier"][str(s)] = {
            sl.PRIMARY: curve([0.3, 0.4]),
            sl.LABELS: [[i + 1, v, i + 1, 0] for i, v in enumerate(labels)],
            sl.INFORMED: [[i + 1, v - 0.5, i + 1, 0] for i, v in enumerate(labels)],
        }
    text, _ = sl.table(results, ["grpo", "fixed_verifier"], [1, 2])
    assert sl.per_run(results, "fixed_verifier", 1)["labels"] == pytest.approx(0.7)
    section = text.split("Step labels behind the step rewards")[1].split("Per seed")[0]
    want = "- fixed_verifier: right 0.700 ± 0.000, informedness 0.200 ± 0.000 (n 2)"
    assert want in section and "grpo" not in section


def test_the_letters_nominal_informedness_of_each_arm():
    """By construction: oracle 1, noisy oracle 1 - 2q (default q 0.2); a learned verifier NaN
    (measured only); off the curve: no step rewards, frozen generator, another α0."""
    sl = _study_letters()
    assert sl.nominal_informedness("oracle") == 1.0
    assert sl.nominal_informedness("noisy_oracle,q=0.1") == pytest.approx(0.8)
    assert sl.nominal_informedness("noisy_oracle") == pytest.approx(0.6)
    assert np.isnan(sl.nominal_informedness("tango"))
    assert np.isnan(sl.nominal_informedness("fixed_verifier"))
    for arm in ("grpo", "fixed_generator", "oracle,alpha0=0.5", "tango,alpha0=0.5"):
        assert sl.nominal_informedness(arm) is None, arm


def test_the_letters_line_fit_matches_numpy_polyfit():
    """Coefficients and their intervals against np.polyfit's (covariance scaled by the
    residuals over n - 2)."""
    sl = _study_letters()
    rng = np.random.default_rng(0)
    x = np.repeat([0.4, 0.6, 0.8, 1.0], 5)
    y = 0.001 + 0.008 * x + rng.normal(0, 0.003, x.size)
    fit = sl.line_fit(x, y)
    (b, a), cov = np.polyfit(x, y, 1, cov=True)
    t = stats.t.ppf(0.975, x.size - 2)
    assert fit["b"] == pytest.approx(b) and fit["a"] == pytest.approx(a)
    assert fit["b_half"] == pytest.approx(t * np.sqrt(cov[0, 0]))
    assert fit["a_half"] == pytest.approx(t * np.sqrt(cov[1, 1]))


def test_the_letters_dose_response_by_hand():
    """Gains over GRPO paired by seed; the line through the oracle arms only; the learned
    verifier placed at its measured informedness."""
    sl = _study_letters()
    curve = lambda y1: [[0, 0.3, 0, 0], [12, y1, 12, 0]]  # AUC (0.3 + y1) / 2
    gains = {"oracle": (0.010, 0.012), "noisy_oracle,q=0.3": (0.004, 0.006)}
    arms = ["grpo", "oracle", "noisy_oracle,q=0.3", "fixed_verifier", "oracle,alpha0=0.5"]
    results = {a: {} for a in arms}
    for i, s in enumerate((1, 2)):
        results["grpo"][str(s)] = {sl.PRIMARY: curve(0.3)}
        for arm, g in gains.items():
            results[arm][str(s)] = {sl.PRIMARY: curve(0.3 + 2 * g[i])}
        results["oracle,alpha0=0.5"][str(s)] = {sl.PRIMARY: curve(0.5)}
        results["fixed_verifier"][str(s)] = {
            sl.PRIMARY: curve(0.3 - 0.002),
            sl.INFORMED: [[1, 0.02, 1, 0], [2, 0.04, 2, 0]],
        }
    rows, fit = sl.dose_response(sl.summaries(results, arms, [1, 2]), arms)
    assert [r["arm"] for r in rows] == ["fixed_verifier", "noisy_oracle,q=0.3", "oracle"]
    assert rows[0]["measured"][0] == pytest.approx(0.03)
    assert rows[0]["gain"].mean == pytest.approx(-0.001)
    assert rows[2]["gain"].diffs == pytest.approx(gains["oracle"])
    # per-seed points (0.4, .004), (0.4, .006), (1, .010), (1, .012): slope 0.01, intercept 0.001
    assert fit["n"] == 4
    assert fit["b"] == pytest.approx(0.01) and fit["a"] == pytest.approx(0.001)
    text = "\n".join(sl.dose_lines(rows, fit))
    assert "| oracle | 1.0 by construction | 2 | 0.011 ± " in text
    assert "fixed_verifier: at its measured informedness 0.030 the line predicts +0.0013" in text
    assert "alpha0" not in text


def test_the_letters_summary_reads_committed_run_records_without_the_runs(tmp_path, monkeypatch):
    """Seeds run on another machine (their run directories gone) are summarised from their
    records in the summary directory, with any runs under --root, and are not run again; a
    record saved for the same arm and seed again replaces the old one, and a record under the
    wrong name is refused."""
    import argparse
    import json

    sl = _study_letters()
    root, out = tmp_path / "runs", tmp_path / "summary"
    curve = lambda ys: [[12 * i, y, 12 * i, 0] for i, y in enumerate(ys)]
    results = {"grpo": {}, "oracle": {}}
    for s in range(1, 6):
        (root / f"grpo_s{s}").mkdir(parents=True)
        (root / f"oracle_s{s}").mkdir(parents=True)
        results["grpo"][str(s)] = {sl.PRIMARY: curve([0.3, 0.32, 0.34, 0.36])}
        results["oracle"][str(s)] = {sl.PRIMARY: curve([0.3, 0.35 + s / 100, 0.4, 0.42])}
        for arm in results:
            (root / f"{arm}_s{s}" / "config.json").write_text(json.dumps({"seed": s}))
    ranking = {k: {"auroc": 0.6, "top1": 0.4, "gap": 0.1} for k in ("start", "final")}
    sl.save_records(out, root, results, {"oracle": {"1": ranking}})
    rec = json.loads((out / "runs" / "oracle_s1.json").read_text())
    assert rec["config"] == {"seed": 1} and rec["ranking"] == ranking
    loaded, ranks = sl.load_records(out, ["grpo", "oracle"], range(1, 6))
    assert loaded == results and ranks == {"oracle": {"1": ranking}}

    args = argparse.Namespace(
        root=str(tmp_path / "elsewhere"), variants=["grpo", "oracle"], seeds=[1, 2, 3, 4, 5],
        sft_per_seed=False, summary_only=True, summary_dir=str(out), jobs=1, set=[], sft_from="",
    )  # fmt: skip
    assert sl.main(args) == 0
    table = (out / "table.md").read_text()
    assert "| oracle | 5 |" in table and "the gate holds" in table and "s1 0.600 -> 0.600" in table
    assert json.loads((out / "results.json").read_text()) == results
    # running the study again trains nothing: every (arm, seed) has its record
    launched = []
    monkeypatch.setattr(sl.study, "run", lambda *a: launched.append(a) or "ran")
    assert sl.main(argparse.Namespace(**{**vars(args), "summary_only": False})) == 0
    assert launched == []
    assert sl.main(argparse.Namespace(**{**vars(args), "summary_only": False, "seeds": [6]})) == 0
    assert sorted(a[1] for a in launched) == ["grpo", "oracle"]
    assert {a[-1] for a in launched} == {",study"}  # the config option of each run's length
    launched.clear()
    fast = {**vars(args), "summary_only": False, "seeds": [7], "length": "fast"}
    assert sl.main(argparse.Namespace(**fast)) == 0
    assert sorted((a[1], a[-1]) for a in launched) == [("grpo", ",fast"), ("oracle", ",fast")]

    rerun = {"grpo": {"1": {sl.PRIMARY: curve([0.3, 0.5])}}}
    sl.save_records(out, root, rerun, {})
    assert sl.load_records(out, ["grpo"], [1])[0] == rerun
    (out / "runs" / "grpo_s1.json").rename(out / "runs" / "grpo_s2.json")
    with pytest.raises(SystemExit, match="grpo_s2.json: a record of arm 'grpo' seed 1"):
        sl.load_records(out, ["grpo"], [2])
    # the two lengths are not paired: a record of the other length stops the summary
    assert sl.run_length({"name": "tiny_letters_grpo_fast"}) == "fast"
    assert sl.run_length({"name": "tiny_letters_quick"}) == "quick"
    assert sl.run_length({"name": "tiny_letters_oracle"}) == "study"
    with pytest.raises(SystemExit, match="oracle_s1.json: a run of length 'study', not --length"):
        sl.load_records(out, ["oracle"], [1], "fast")
    # a finished run of the other length under --root: refused before any record is written
    (root / "grpo_s3" / "config.json").write_text(json.dumps({"name": "tiny_letters_grpo_fast"}))
    before = {p.name: p.read_text() for p in (out / "runs").iterdir()}
    with pytest.raises(SystemExit, match="grpo_s3: a run of length 'fast', not --length study"):
        sl.save_records(out, root, results, {}, "study")
    assert {p.name: p.read_text() for p in (out / "runs").iterdir()} == before


def test_the_letters_summary_reuses_a_recorded_ranking_of_an_unchanged_run(tmp_path, monkeypatch):
    """A run under --root whose record (written after the run's final verifier) has its step
    ranking is not probed again; a run changed since its record (or without one) is."""
    import argparse
    import json
    import os

    sl = _study_letters()
    root, out = tmp_path / "runs", tmp_path / "summary"
    ranking = {k: {"auroc": 0.6, "top1": 0.4, "gap": 0.1} for k in ("start", "final")}
    for s in (1, 2, 3):
        verifier = root / f"tango_s{s}" / "hf" / "verifier"
        verifier.mkdir(parents=True)
        (verifier / "config.json").write_text("{}")
        os.utime(verifier / "config.json", (1000, 1000))
    for s in (1, 2):  # records of seeds 1 and 2; seed 2's run changed after its record
        rec = sl.record_path(out, "tango", s)
        rec.parent.mkdir(parents=True, exist_ok=True)
        rec.write_text(json.dumps({"arm": "tango", "seed": s, "curves": {}, "ranking": ranking}))
        os.utime(rec, (2000, 2000))
    os.utime(root / "tango_s2" / "hf" / "verifier" / "config.json", (3000, 3000))
    assert sl.ranked_records(out, root, ["tango"], [1, 2, 3]) == {"tango": {"1": ranking}}

    probed = []
    monkeypatch.setattr(
        sl.study, "ranking", lambda root, seeds, items, arms, skip: probed.append(skip) or {}
    )
    args = argparse.Namespace(
        root=str(root), variants=["tango"], seeds=[1, 2, 3], sft_per_seed=False,
        summary_only=True, summary_dir=str(out), jobs=1, set=[], sft_from="",
    )  # fmt: skip
    assert sl.main(args) == 0
    assert probed == [{("tango", 1)}]


def test_the_letters_paired_curve_subtracts_grpo_of_the_same_seed():
    """Each seed's arm curve minus GRPO's at the same generator updates (Tango's repeated
    evaluation after its warm-up counted once); a seed without a GRPO run is left out."""
    sl = _study_letters()
    results = {
        "grpo": {"1": {sl.PRIMARY: [[0, 0.30, 0], [12, 0.32, 12]]}},
        "tango": {
            "1": {sl.PRIMARY: [[0, 0.30, 0], [0, 0.30, 10], [12, 0.35, 25]]},
            "2": {sl.PRIMARY: [[0, 0.30, 0], [12, 0.40, 25]]},
        },
    }
    (curve,) = sl.paired_curve(results, "tango", "grpo", [1, 2])
    assert curve == [[0, 0.0], [12, pytest.approx(0.03)]]


def test_mean_ci_is_the_student_t_interval():
    x = [0.2, 0.5, 0.35]
    mean, half = ps.mean_ci(x)
    assert mean == pytest.approx(0.35)
    assert half == pytest.approx(4.303 * np.std(x, ddof=1) / np.sqrt(3), rel=1e-4)  # t(2)
    # 11 values: t(10) = 2.228, where a table that stops at 9 degrees of freedom gave 1.96
    y = np.linspace(0.0, 1.0, 11)
    assert ps.mean_ci(y)[1] == pytest.approx(2.228 * np.std(y, ddof=1) / np.sqrt(11), rel=1e-3)
    assert ps.mean_ci([0.4, float("nan")]) == (0.4, pytest.approx(float("nan"), nan_ok=True))
    assert np.isnan(ps.mean_ci([])[0])
