"""The claim-1 SmolLM2 study's summary (study/claim1_real.py), on hand-written records: the
paired change of each probe measure from step 0 to the run's last step, worked by hand, and a
one-line refusal of an unfinished or probe-less record."""

from __future__ import annotations

import json

import pytest

from tango_jax.study import claim1_real

KEYS = [k for k, _ in claim1_real.MEASURES]


def _record(root, seed, rows, total=9, tripped=()):
    d = root / f"rl_s{seed}"
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"schedule": {"total_steps": total}}))
    lines = []
    for step, (bal, inf, corr) in rows:
        guard = {claim1_real.GUARD: float(step in tripped)}  # a row with no probe
        lines.append(json.dumps({"step": step, "verifier/loss": 0.1} | guard))
        lines.append(json.dumps({"step": step, KEYS[0]: bal, KEYS[1]: inf, KEYS[2]: corr}))
    (d / "metrics.jsonl").write_text("\n".join(lines) + "\n")


def test_the_paired_change_from_the_sft_start_worked_by_hand(tmp_path):
    # balanced accuracy changes +0.1, +0.2, +0.3: mean 0.2, sd 0.1, t(0.975, 2) = 4.303,
    # half-width 4.303 * 0.1 / sqrt(3) = 0.248
    _record(tmp_path, 1, [(0, (0.5, 0.0, 0.5)), (3, (0.9, 0.9, 0.9)), (9, (0.6, 0.1, 0.5))])
    _record(tmp_path, 2, [(0, (0.6, 0.2, 0.5)), (9, (0.8, 0.4, 0.5))])
    _record(tmp_path, 3, [(0, (0.5, 0.1, 0.4)), (9, (0.8, 0.4, 0.6))])
    table = claim1_real.summary(tmp_path, [1, 2, 3])
    lines = table.splitlines()
    assert lines[2] == "| 1 | 0.500 → 0.600 | 0.000 → 0.100 | 0.500 → 0.500 |"
    # informedness +0.1, +0.2, +0.3 as well; CORRECT share 0, 0, +0.2: mean 0.067
    assert (
        lines[5]
        == "| after − before (3 seeds) | +0.200 ± 0.248 | +0.200 ± 0.248 | +0.067 ± 0.287 |"
    )
    # t = 0.2 / (0.1 / sqrt 3) = 3.464 on 2 degrees of freedom: p = 0.074; CORRECT: t = 1, 0.423
    assert lines[6] == "| p (paired t-test) | 0.074 | 0.074 | 0.423 |"
    assert lines[-1].startswith("No seed starts one-sided")


def test_a_one_sided_start_and_a_tripped_guard_are_named(tmp_path):
    _record(tmp_path, 1, [(0, (0.5, 0.0, 0.85)), (9, (0.6, 0.1, 0.5))])  # CORRECT on 85%
    _record(tmp_path, 2, [(0, (0.6, 0.2, 0.5)), (3, (0.7, 0.2, 0.5)), (9, (0.8, 0.4, 0.5))],
            tripped=(3, 9))  # fmt: skip
    _record(tmp_path, 3, [(0, (0.6, 0.2, 0.2)), (9, (0.8, 0.4, 0.5))])  # 20%: not over 80%
    notes = claim1_real.summary(tmp_path, [1, 2, 3]).splitlines()[-2:]
    assert notes == [
        "seed 1: its start is one-sided (CORRECT on 0.850 of the probe)",
        "seed 2: the collapse guard tripped at steps [3, 9]",
    ]


def test_an_unfinished_or_probeless_record_is_refused_in_one_line(tmp_path):
    _record(tmp_path, 1, [(0, (0.5, 0.0, 0.5)), (6, (0.6, 0.1, 0.5))])
    with pytest.raises(ValueError, match="last probe evaluation is at step 6 of 9; resume"):
        claim1_real.summary(tmp_path, [1])
    _record(tmp_path, 2, [(3, (0.5, 0.0, 0.5)), (9, (0.6, 0.1, 0.5))])
    with pytest.raises(ValueError, match="no probe evaluation at step 0"):
        claim1_real.summary(tmp_path, [2])
    with pytest.raises(ValueError, match="rl_s4/metrics.jsonl: no such file"):
        claim1_real.summary(tmp_path, [4])
    assert claim1_real.main(["--records", str(tmp_path), "--seeds", "1"]) == 2
