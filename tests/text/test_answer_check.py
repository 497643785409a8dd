r"""tango_jax.text.answer_check: word answers of the OOD benchmarks (BGQA, StrategyQA, TableBench).

The official `basic.py` scores `\boxed{\text{True}}` against the gold True as 1: sympy's LaTeX
parser fails on `\text{}`, and the Minerva-normalised strings are then equal. The other boxed,
Math-Verify and CRUXEval cases are in tests/tango/test_rewards.py.
"""

import pytest

from tango_jax.text import answer_check as A


@pytest.mark.parametrize(
    "response, gold",
    [
        ("so \\boxed{\\text{True}}", "True"),
        ("\\boxed{\\textbf{True}}", "True"),
        ("\\boxed{\\text{Yes}}", "Yes"),
        ("\\boxed{\\text{Unknown}}", "Unknown"),
        ("\\boxed{True}", "\\text{True}"),
        ("\\boxed{\\text{True}}", "\\text{True}"),
        ("\\boxed{\\textbf{No}}", "\\text{No}"),
        ("\\boxed{\\text{not proved}}", "not proved"),
    ],
)
def test_word_answers_in_text_commands_score_one(response, gold):
    assert A.boxed_equal_reward(response, gold) == 1.0


@pytest.mark.parametrize(
    "response, gold",
    [
        ("\\boxed{\\text{False}}", "True"),
        ("\\boxed{\\text{true}}", "True"),  # case matters, as in the reference
        ("\\boxed{\\text{listen}}", "silent"),  # words are never compared by sympy
        ("\\boxed{\\textbf{Yes}}", "\\text{No}"),
        ("\\boxed{\\text{Unknown}}", "False"),
    ],
)
def test_different_word_answers_score_zero(response, gold):
    assert A.boxed_equal_reward(response, gold) == 0.0


def test_math_answers_in_text_commands_still_use_sympy():
    assert A.boxed_equal_reward("\\boxed{\\text{0.50}}", "\\frac{1}{2}") == 1.0
    assert A.boxed_equal_reward("\\boxed{\\text{3}}", "4") == 0.0
