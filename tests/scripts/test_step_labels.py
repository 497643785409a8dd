"""scripts/study/step_labels.py on a hand-written rollout log: the verifier's judgments of the
logged generator rollouts against the steps' truth."""

from __future__ import annotations

import json

import pytest
from scripts_loader import load_script

from tango_jax.data import last_letter as ll
from tango_jax.metrics.rollouts import step_file
from tango_jax.run.feedback import step_label_scores
from tango_jax.text import formats


def _row(phase, solution, judgments):
    p = solution.problem.to_problem()
    return {
        "phase": phase,
        "question": p.question,
        "answer": p.answer,
        "source": p.source,
        "id": p.id,
        "solution": solution.text,
        "verifications": [{"step_judgments": j} for j in judgments],
    }


def test_step_labels_from_a_rollout_log(tmp_path, capsys):
    """Rollout A is right (R R R), B has a wrong letter at step 2 (R W W). Judgments: A
    (+ + -) and (+ +) (wrong count, left out), B (+ - -). Right steps 4, 3 labelled CORRECT;
    wrong steps 2, both INCORRECT: right 5 / 6, informedness 3/4 + 2/2 - 1 = 0.75. The
    verifier step's row is not a generator rollout and is skipped."""
    script = load_script("study", "step_labels")
    problem = ll.LetterProblem(("kaz", "qup", "hjr"))
    a = ll.reference_solution(problem)
    b = ll.LetterSolution(problem, "zur", first_error=1)
    rows = [
        _row("generator", a, [[1, 1, -1], [1, 1]]),
        _row("generator", b, [[1, -1, -1]]),
        _row("verifier", b, [[-1, -1, -1]]),
    ]
    path = step_file(tmp_path, 10)
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert script.labelled(rows) == [(-1, [1, 1, -1]), (1, [1, -1, -1])]
    assert script.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "6 step judgments of 2 verifications: labelled right 0.833, informedness 0.750" in out
    empty = tmp_path / "empty"
    step_file(empty, 1).parent.mkdir(parents=True)
    step_file(empty, 1).write_text(json.dumps(rows[2]) + "\n")
    script.main([str(empty)])
    assert "no judged generator rollouts" in capsys.readouterr().out


def test_letter_analyses_by_hand():
    """A right solution (kaz qup hjr -> z p r) verified as: step 1 'kaz: z, z z' CORRECT (all
    as it should be), step 2 'qap: p, p p' CORRECT (word miscopied), step 3 'hjr: r, r r'
    INCORRECT (the judgment against its own comparison): word 2/3, letter 3/3, last 3/3,
    follows 2/3. A verifier step's row and a row without analyses add nothing."""
    script = load_script("study", "step_labels")
    a = ll.reference_solution(ll.LetterProblem(("kaz", "qup", "hjr")))
    analyses = ["Step 1 Analysis: kaz: z, z z", "Step 2 Analysis: qap: p, p p"]
    analyses.append("Step 3 Analysis: hjr: r, r r")
    row = _row("generator", a, [[1, 1, -1]])
    row["verifications"][0]["text"] = formats.render_verification([1, 1, -1], 0, analyses)
    other = _row("verifier", a, [[1, 1, 1]])
    other["verifications"][0]["text"] = row["verifications"][0]["text"]
    got = script.letter_analyses([row, other, _row("generator", a, [[1, 1, 1]])])
    assert got == pytest.approx(
        {"word": 2 / 3, "letter": 1.0, "last": 1.0, "follows": 2 / 3, "n": 3}
    )
    assert script.letter_analyses([other]) == {}


def test_only_right_steps_have_no_informedness():
    assert step_label_scores([(-1, [1, -1, 1])]) == {"process/step_label_accuracy": 2 / 3}
    assert step_label_scores([]) == {}
