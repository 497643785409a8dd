"""tango_jax.text.process_bench: ProcessBench-style step scores, on hand-worked examples."""

import pytest

from tango_jax.text.process_bench import (
    NO_ERROR,
    harmonic_mean,
    no_skill_baseline,
    predicted_error_step,
    process_scores,
    step_ranking,
)


@pytest.mark.parametrize(
    ("judgments", "num_steps", "expected"),
    [
        ((1, 1, 1), 3, NO_ERROR),  # every step judged CORRECT: "no error"
        ((1, -1, 1), 3, 1),  # the first INCORRECT is the predicted location
        ((-1, -1, -1), 3, 0),  # all INCORRECT: step 0 (what the outcome-copying SFT predicts)
        ((1, 1, -1, 1), 3, 2),  # a located error counts even with a count mismatch
        ((1, 1), 3, None),  # two CORRECT judgments for three steps: unreadable
        ((1, 1, 1, 1), 3, None),  # four for three: unreadable
        ((), 0, NO_ERROR),
        ((), 2, None),
    ],
)
def test_predicted_error_step(judgments, num_steps, expected):
    assert predicted_error_step(judgments, num_steps) == expected


def test_predicted_error_step_rejects_bad_input():
    with pytest.raises(ValueError, match="must be \\+1 or -1"):
        predicted_error_step((1, 0, 1), 3)
    with pytest.raises(ValueError, match="num_steps"):
        predicted_error_step((), -1)


def test_process_scores_hand_worked():
    """Six items, worked by hand.

    erroneous (label >= 0): labels 0, 2, 1, 1 with predictions 0 (hit), 1 (early), None
    (unreadable), 1 (hit) -> 2 of 4 = 0.5.
    correct (label -1): predictions -1 (hit), 0 (false alarm) -> 1 of 2 = 0.5.
    F1 = 2 * 0.5 * 0.5 / (0.5 + 0.5) = 0.5; unreadable 1 of 6.
    """
    labels = [0, 2, 1, 1, -1, -1]
    predictions = [0, 1, None, 1, -1, 0]
    s = process_scores(labels, predictions)
    assert (s.num_erroneous, s.num_correct) == (4, 2)
    assert s.acc_erroneous == pytest.approx(0.5)
    assert s.acc_correct == pytest.approx(0.5)
    assert s.f1 == pytest.approx(0.5)
    assert s.unreadable == pytest.approx(1 / 6)
    assert s.metrics("eval/verifier/") == {
        "eval/verifier/step_f1": s.f1,
        "eval/verifier/step_acc_erroneous": 0.5,
        "eval/verifier/step_acc_correct": 0.5,
        "eval/verifier/step_unreadable": pytest.approx(1 / 6),
    }


def test_process_scores_uneven_and_trivial_baselines():
    """acc 3/4 and 1/3: F1 = 2 * (3/4)(1/3) / (3/4 + 1/3) = (1/2) / (13/12) = 6/13. And the
    trivial verifiers of the miniature score F1 = 0: always CORRECT (no error found) and always
    "step 1 wrong" (no correct solution passes)."""
    labels = [0, 0, 1, 2, -1, -1, -1]
    s = process_scores(labels, [0, 0, 1, 0, -1, 1, 2])
    assert s.acc_erroneous == pytest.approx(3 / 4)
    assert s.acc_correct == pytest.approx(1 / 3)
    assert s.f1 == pytest.approx(6 / 13)
    assert process_scores(labels, [NO_ERROR] * 7).f1 == 0.0
    always_first = process_scores(labels, [0] * 7)
    assert always_first.acc_erroneous == pytest.approx(2 / 4)
    assert always_first.acc_correct == 0.0 and always_first.f1 == 0.0


def test_no_skill_baseline_hand_worked_and_simulated():
    """Pass rate 0.4; wrong items with 3 and 2 steps: acc_erroneous = (0.6/3 + 0.6/2) / 2 = 1/4,
    acc_correct = 0.4, F1 = 2 (1/4)(2/5) / (1/4 + 2/5) = 4/13. A simulated verifier that
    passes with probability 0.4 and otherwise names a uniform step scores the same."""
    import numpy as np

    labels, steps = [2, 1, NO_ERROR, NO_ERROR], [3, 2, 3, 4]  # 0-based first-error steps
    b = no_skill_baseline(labels, steps, 0.4)
    assert (b.acc_erroneous, b.acc_correct) == (pytest.approx(0.25), pytest.approx(0.4))
    assert b.f1 == pytest.approx(4 / 13)
    rng = np.random.default_rng(0)
    acc_e, acc_c = [], []
    for _ in range(4000):
        pred = [NO_ERROR if rng.random() < 0.4 else int(rng.integers(k)) for k in steps]
        s = process_scores(labels, pred)
        acc_e.append(s.acc_erroneous)
        acc_c.append(s.acc_correct)
    assert np.mean(acc_e) == pytest.approx(0.25, abs=0.01)
    assert np.mean(acc_c) == pytest.approx(0.4, abs=0.02)
    with pytest.raises(ValueError, match="pass_rate"):
        no_skill_baseline(labels, steps, 1.5)


def test_process_scores_edge_cases():
    assert harmonic_mean(0.0, 0.0) == 0.0
    empty = process_scores([], [])
    assert (empty.f1, empty.unreadable) == (0.0, 0.0)
    only_correct = process_scores([-1, -1], [-1, -1])
    assert (only_correct.acc_correct, only_correct.acc_erroneous, only_correct.f1) == (1, 0, 0)
    with pytest.raises(ValueError, match="2 labels but 1 predictions"):
        process_scores([0, 1], [0])
    with pytest.raises(ValueError, match=">= -1"):
        process_scores([-2], [0])


def test_step_ranking_hand_worked():
    """First errors at steps 1, 1, 0 and one correct item. First-error scores 0.2, 0.8, 0.5;
    the six other steps 0.9, 0.1, 0.3, 0.5, 0.4, 0.5. Pairs won: 0.2 beats 1, 0.8 beats 5, 0.5
    beats 3 and ties 2 -> AUROC (1 + 5 + 3 + 1) / 18 = 5/9. Top-1: item 0 misses (0.9 is its
    highest), item 1 hits, item 2 ties two steps (1/2) -> 1.5 / 3 = 0.5. Gap: 1.5/3 - 2.7/6 =
    0.05."""
    scores = [[0.9, 0.2, 0.1], [0.3, 0.8], [0.5, 0.5], [0.4, 0.5]]
    r = step_ranking(scores, [1, 1, 0, NO_ERROR])
    assert r.auroc == pytest.approx(5 / 9)
    assert r.top1 == pytest.approx(0.5)
    assert r.gap == pytest.approx(0.05)
    assert (r.num_erroneous, r.num_steps) == (3, 9)
    perfect = step_ranking([[0.9, 0.1], [0.2, 0.3]], [0, NO_ERROR])
    assert (perfect.auroc, perfect.top1) == (1.0, 1.0)


def test_step_ranking_auroc_is_the_mann_whitney_statistic():
    """Against the rank-sum form of the Mann-Whitney U (average ranks for ties), on random
    scores with many ties; chance-level scores give about 0.5 and top-1 about 1/K."""
    import numpy as np

    rng = np.random.default_rng(0)
    k = 3
    scores = rng.integers(0, 6, size=(400, k)).tolist()
    labels = rng.integers(-1, k, size=400).tolist()
    r = step_ranking(scores, labels)
    flat = np.asarray(scores, dtype=float).ravel()
    is_pos = np.array([j == y for y in labels for j in range(k)])
    order = flat.argsort(kind="stable")
    ranks = np.empty_like(flat)
    ranks[order] = np.arange(1, flat.size + 1)
    for v in np.unique(flat):  # average ranks of ties
        ranks[flat == v] = ranks[flat == v].mean()
    n_pos, n_neg = is_pos.sum(), (~is_pos).sum()
    u = ranks[is_pos].sum() - n_pos * (n_pos + 1) / 2
    assert r.auroc == pytest.approx(u / (n_pos * n_neg))
    assert r.auroc == pytest.approx(0.5, abs=0.05)
    assert r.top1 == pytest.approx(1 / k, abs=0.06)


def test_step_ranking_rejects_bad_input():
    with pytest.raises(ValueError, match="label 3"):
        step_ranking([[0.1, 0.2]], [3])
    with pytest.raises(ValueError, match="2 score lists but 1 labels"):
        step_ranking([[0.1], [0.2]], [0])
    with pytest.raises(ValueError, match="at least one first-error step"):
        step_ranking([[0.1, 0.2]], [NO_ERROR])
