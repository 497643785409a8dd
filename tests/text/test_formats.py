r"""Hand-worked examples for tango_jax.text.formats and its prompts, tango_jax.text.templates
(TANGO_SPEC §3.1-3.3, §4.1-4.2, §10).

Expected values are worked out by hand from the spec; the hypothesis properties are in
test_formats_properties.py.
"""

import time

import pytest

from tango_jax.text import formats as F
from tango_jax.text import templates as T

GOOD_VERIFICATION = (
    "<step_verification>\n"
    "<step>Step 1 Analysis: 3 * 2 = 6 is right. \\boxed{CORRECT}</step>\n"
    "<step>Step 2 Analysis: 15 - 6 is 9, not 8. \\boxed{INCORRECT}</step>\n"
    "</step_verification>\n"
    "<final_verification>\\boxed{INCORRECT}</final_verification>"
)


def _score(text, expected_steps=2, generator_format_score=1.0):
    return F.verifier_format_score(
        text, expected_steps=expected_steps, generator_format_score=generator_format_score
    )


# ----------------------------------------------------------------------------------------------
# Prompts.


def test_generator_prompt_ends_with_the_question_and_assistant_cue():
    prompt = T.render_generator_prompt("What is 2 + 2?")
    assert prompt.endswith("\n\nUser: What is 2 + 2?\nAssistant:")
    assert prompt.startswith("You are a helpful Assistant who solves mathematical problems")


def test_generator_prompt_keeps_braces_and_placeholder_names_in_the_question():
    question = "Find {x} in {0}, {{y}}, {solution} and \\boxed{z}"
    prompt = T.render_generator_prompt(question)
    assert prompt.endswith(f"User: {question}\nAssistant:")
    assert "{question}" not in prompt


def test_generator_prompt_has_the_official_structure():
    prompt = T.render_generator_prompt("Q")
    rules = [line for line in prompt.splitlines() if line[:2] in ("1.", "2.", "3.")]
    assert len(rules) == 3
    assert "<think>" in rules[0] and "<step> </step>" in rules[1] and "\\boxed{}" in rules[2]
    example = prompt[prompt.index("User: Calculate") : prompt.index("Keep strictly")]
    assert [s.text for s in F.split_steps(example)][1] == "3 * 2 gives 6."
    assert len(F.split_steps(example)) == 4
    assert F.extract_answer(example) == "9"
    assert F.generator_format_score(example.split("Assistant: ", 1)[1]) == 1.0


def test_evaluation_prompt_only_drops_the_word_mathematical():
    train = T.render_generator_prompt("Q")
    evaluation = T.render_generator_prompt("Q", variant=T.Variant.EVAL)
    assert train.count("mathematical ") == 1
    assert "mathematical" not in evaluation
    assert evaluation == train.replace("mathematical ", "")


def test_verifier_prompt_counts_steps_and_ends_with_the_cue():
    solution = F.render_generator_response(["a", "b", "c"], "9")
    prompt = T.render_verifier_prompt("What is {n}?", solution)
    assert prompt.endswith("\nYour Verification:\n")
    assert f"Problem: What is {{n}}?\nAssistant's Solution:\n{solution}\n\n" in prompt
    assert "The Assistant's solution has 3 steps inside <step> tags." in prompt
    assert "For each of the 3 <step> blocks" in prompt
    assert "MUST contain exactly 3 <step> tags" in prompt
    assert "{num_steps}" not in prompt and "{solution}" not in prompt


def test_verifier_prompt_example_is_read_by_our_own_parser():
    """The worked example in the prompt is a perfect verification under our parser."""
    prompt = T.render_verifier_prompt("P", "S")
    start = prompt.index("Your Verification:\n") + len("Your Verification:\n")
    example = prompt[start : prompt.index("IMPORTANT INSTRUCTIONS")]
    assert F.parse_verification(example) == F.Verification((1, 1), F.CORRECT, 2)
    assert _score(example, expected_steps=2) == 1.0


def test_verifier_prompt_with_no_steps_says_zero():
    prompt = T.render_verifier_prompt("P", "no tags at all")
    assert "The Assistant's solution has 0 steps" in prompt


# ----------------------------------------------------------------------------------------------
# Steps and answers.


def test_split_steps_spans_by_hand():
    response = "<think>\n<step>a</step>\n<step></step><step>b<step>c</step>x</step></think>"
    steps = F.split_steps(response)
    # "<think>\n" is 8 chars; "<step>a</step>" 14; "\n"; "<step></step>" 13; then 21 chars.
    assert steps == [F.Step("a", 8, 22), F.Step("", 23, 36), F.Step("b<step>c", 36, 57)]
    for step in steps:
        assert response[step.start : step.end] == f"<step>{step.text}</step>"


@pytest.mark.parametrize(
    "response, texts",
    [
        ("<step>a", []),
        ("</step><step>a", []),
        ("<step>a</step><step>b", ["a"]),
        ("<step>\n\n</step>", ["\n\n"]),
        ("<STEP>a</STEP>", []),
        ("<step>日本 🙂 9^{9^{9}}</step>", ["日本 🙂 9^{9^{9}}"]),
    ],
)
def test_split_steps_edge_cases(response, texts):
    assert [s.text for s in F.split_steps(response)] == texts


@pytest.mark.parametrize(
    "response, answer",
    [
        ("<answer>\\boxed{9}</answer>", "9"),
        ("<answer>\\boxed{\\frac{1}{2}}</answer>", "\\frac{1}{2}"),
        ("<think>\\boxed{1}</think><answer>\\boxed{2}</answer> \\boxed{3}", "2"),
        ("\\boxed{1} and finally \\boxed{2}", "2"),
        ("\\boxed{1} then the truncated \\boxed{2", None),
        ("<answer>\\box{5}</answer>", None),
        ("<answer>9</answer>", None),
        ("no answer", None),
        ("\\boxed{}", ""),
    ],
)
def test_extract_answer(response, answer):
    assert F.extract_answer(response) == answer


def test_last_boxed_only_looks_at_the_last_box():
    assert F.last_boxed("\\boxed{a} \\boxed {b}") is None
    assert F.last_boxed("\\boxed{a{b}c}d}") == "a{b}c"


THREE_STEPS = "<think><step>a</step><step>b</step><step>c</step></think>"


@pytest.mark.parametrize(
    "response, score",
    [
        (THREE_STEPS + "<answer>\\boxed{9}</answer>", 1.0),
        (THREE_STEPS + "<answer>  \\boxed{9} \n</answer>", 1.0),
        ("<step>a</step><step>b</step><answer>\\boxed{9}</answer>", 0.6),
        ("<answer>\\boxed{9}</answer>", 0.2),
        (THREE_STEPS + "<answer>9</answer>", 0.2),
        (THREE_STEPS + "<answer>\\boxed{}</answer>", 0.2),
        (THREE_STEPS + "<answer>\\boxed{9}.</answer>", 0.2),
        (THREE_STEPS + "<answer>\\box{9}</answer>", 0.2),
        ("<step>a</step><answer>9</answer>", 0.0),
        (THREE_STEPS + "\\boxed{9}", 0.0),
        # the first answer block is the one judged
        (THREE_STEPS + "<answer>9</answer><answer>\\boxed{9}</answer>", 0.2),
    ],
)
def test_generator_format_score_by_hand(response, score):
    assert F.generator_format_score(response) == score


# ----------------------------------------------------------------------------------------------
# Verifier outputs.


def test_parse_good_verification():
    v = F.parse_verification(GOOD_VERIFICATION)
    assert v == F.Verification(step_judgments=(1, -1), verdict=F.INCORRECT, num_step_blocks=2)
    assert _score(GOOD_VERIFICATION) == 1.0


@pytest.mark.parametrize(
    "final",
    [
        "<final_verification> \\boxed{CORRECT}</final_verification>",  # a space before the box
        "<final_verification>CORRECT</final_verification>",
        "<final_verification>The answer is \\boxed{CORRECT}</final_verification>",
        "<final_verification>\\boxed{CORRECT} I think</final_verification>",
        "<final_verification>\\boxed{RIGHT}</final_verification>",
        "<final_verification>\\boxed{CORRECT}",  # truncated
        "",
    ],
)
def test_unparsable_verdict_is_none(final):
    text = GOOD_VERIFICATION.split("<final_verification>")[0] + final
    assert F.parse_verification(text).verdict is None


@pytest.mark.parametrize(
    "final, verdict",
    [
        ("<final_verification>\\boxed{CORRECT}</final_verification>", F.CORRECT),
        ("<final_verification>\\boxed{correct}. \n</final_verification>", F.CORRECT),
        ("<final_verification>\\box{INCORRECT}</final_verification>", F.INCORRECT),
        ("<final_verification>\\boxed{InCorrect}.</final_verification>", F.INCORRECT),
    ],
)
def test_verdict_forms(final, verdict):
    assert F.parse_verification("junk " + final + " trailing").verdict == verdict


def test_first_verdict_wins():
    text = (
        "<final_verification>\\boxed{INCORRECT}</final_verification>"
        "<final_verification>\\boxed{CORRECT}</final_verification>"
    )
    assert F.parse_verification(text).verdict == F.INCORRECT


def _steps(*contents):
    body = "".join(f"<step>{c}</step>\n" for c in contents)
    return f"<step_verification>\n{body}</step_verification>\n"


@pytest.mark.parametrize(
    "contents, judgments",
    [
        (["ok \\boxed{CORRECT}", "bad \\boxed{INCORRECT}"], (1, -1)),
        (["\\box{CORRECT}", "\\boxed{incorrect}.  \n"], (1, -1)),
        # trailing text after a judgment: that block gives none
        (["ok \\boxed{CORRECT} but wait", "bad \\boxed{INCORRECT}"], (-1,)),
        (["\\boxed{CORRECT}..", "\\boxed{CORRECT} ."], ()),
        (["no label", "\\boxed{CORRECT}"], (1,)),
        (["\\boxed{CORRECT}\\boxed{INCORRECT}"], (-1,)),  # only the last label counts
        (["\\boxed{ CORRECT }"], ()),
    ],
)
def test_step_judgments(contents, judgments):
    v = F.parse_verification(_steps(*contents))
    assert v.step_judgments == judgments
    assert v.num_step_blocks == len(contents)


def test_step_judgments_only_from_the_first_step_verification_section():
    text = (
        "<step>\\boxed{CORRECT}</step>"  # before the section: ignored
        + _steps("\\boxed{INCORRECT}")
        + "<step>\\boxed{CORRECT}</step>"  # after it: ignored
        + _steps("\\boxed{CORRECT}", "\\boxed{CORRECT}")
    )
    assert F.parse_verification(text).step_judgments == (-1,)


def test_verifier_tags_in_any_case_as_the_official_parser_reads_them():
    r"""`<STEP>`, `<Step>` blocks and `<FINAL_VERIFICATION>` tags count (the official regexes
    use re.IGNORECASE); the `<step_verification>` section is found as written."""
    text = (
        "<step_verification>\n<STEP>ok \\boxed{CORRECT}</STEP>\n"
        "<Step>wrong \\BOXED{incorrect}.</step>\n<step>ok \\box{Correct}</sTeP>\n"
        "</step_verification>\n<FINAL_VERIFICATION>\\boxed{INCORRECT}</Final_Verification>"
    )
    v = F.parse_verification(text)
    assert v == F.Verification((1, -1, 1), F.INCORRECT, 3)
    upper_section = text.replace("step_verification>", "STEP_VERIFICATION>")
    assert F.parse_verification(upper_section) == F.Verification((), F.INCORRECT, 0)
    # The format score reads the tags as written: no <step> block (-0.8), stray text (-0.4).
    lower_final = text.replace("FINAL_VERIFICATION>", "final_verification>").replace(
        "Final_Verification>", "final_verification>"
    )
    assert F.parse_verification(lower_final) == v
    assert F.verifier_format_score(lower_final, expected_steps=3, generator_format_score=1.0) == 0


def test_unclosed_step_verification_gives_no_judgments():
    text = "<step_verification><step>\\boxed{CORRECT}</step>"
    assert F.parse_verification(text) == F.Verification((), None, 0)


FINAL_OK = "<final_verification>\\boxed{CORRECT}</final_verification>"


@pytest.mark.parametrize(
    "text, score",
    [
        # the skeleton must be the whole (stripped) output
        ("  \n" + _steps("\\boxed{CORRECT}", "\\boxed{CORRECT}") + FINAL_OK + "\n ", 1.0),
        ("Sure! " + _steps("\\boxed{CORRECT}", "\\boxed{CORRECT}") + FINAL_OK, 0.0),
        (_steps("\\boxed{CORRECT}", "\\boxed{CORRECT}") + FINAL_OK + " Done.", 0.0),
        (_steps("\\boxed{CORRECT}", "\\boxed{CORRECT}") + "and " + FINAL_OK, 0.0),
        (FINAL_OK, 0.0),
        # final section not ending in a boxed label: -0.8
        (_steps("\\boxed{CORRECT}", "\\boxed{CORRECT}") + "<final_verification>yes"
         "</final_verification>", 0.2),
        # text before the box is fine for the format (the verdict is unparsable, though)
        (_steps("\\boxed{CORRECT}", "\\boxed{CORRECT}") + "<final_verification>So: \\boxed"
         "{CORRECT}</final_verification>", 1.0),
        # step count != K: -0.8
        (_steps("\\boxed{CORRECT}") + FINAL_OK, 0.2),
        (_steps("\\boxed{CORRECT}", "no label") + FINAL_OK, 0.2),
        (_steps("\\boxed{CORRECT}", "\\boxed{CORRECT}", "\\boxed{CORRECT}") + FINAL_OK, 0.2),
        # no <step> block: -0.8, and the analysis outside steps: -0.4
        ("<step_verification>\n</step_verification>" + FINAL_OK, 0.2),
        ("<step_verification>all fine</step_verification>" + FINAL_OK, 0.0),
        # stray text between steps: -0.4
        ("<step_verification><step>\\boxed{CORRECT}</step> note <step>\\boxed{CORRECT}</step>"
         "</step_verification>" + FINAL_OK, 0.6),
        # everything wrong at once is clipped at 0
        ("<step_verification>x<step>y</step></step_verification><final_verification>z"
         "</final_verification>", 0.0),
    ],
)  # fmt: skip
def test_verifier_format_score_by_hand(text, score):
    assert _score(text, expected_steps=2) == score


def test_step_count_penalty_is_gated_on_the_generator_format_score():
    one_step = _steps("\\boxed{CORRECT}") + FINAL_OK
    assert _score(one_step, expected_steps=2, generator_format_score=1.0) == 0.2
    assert _score(one_step, expected_steps=2, generator_format_score=0.6) == 0.2
    assert _score(one_step, expected_steps=2, generator_format_score=1.0 - 0.4) == 0.2
    assert _score(one_step, expected_steps=2, generator_format_score=0.2) == 1.0
    assert _score(one_step, expected_steps=2, generator_format_score=0.0) == 1.0
    assert _score(one_step, expected_steps=None) == 1.0


def test_verifier_format_score_rejects_bad_arguments():
    with pytest.raises(ValueError, match="expected_steps"):
        _score(GOOD_VERIFICATION, expected_steps=-1)
    with pytest.raises(ValueError, match="generator_format_score"):
        _score(GOOD_VERIFICATION, generator_format_score=1.5)


def test_render_verification_round_trip_and_errors():
    text = F.render_verification([1, -1, -1], F.CORRECT, ["x", "y", "z"])
    assert F.parse_verification(text) == F.Verification((1, -1, -1), F.CORRECT, 3)
    assert _score(text, expected_steps=3) == 1.0
    with pytest.raises(ValueError, match="analyses"):
        F.render_verification([1], F.CORRECT, ["a", "b"])
    with pytest.raises(ValueError, match="must be"):
        F.render_verification([0], F.CORRECT)


# ----------------------------------------------------------------------------------------------
# No input hangs: the official regexes are quadratic on these.


@pytest.mark.parametrize(
    "text",
    [
        "<step>" * 200_000,
        "<step_verification>" * 50_000 + "</step_verification>",
        "<step_verification>" + "</step_verification> " * 50_000 + "<final_verification>",
        "<answer>" * 200_000,
        "<final_verification>\\boxed{CORRECT}" + " " * 500_000,
        "\\boxed{" * 100_000,
    ],
)
def test_adversarial_inputs_are_linear(text):
    start = time.perf_counter()
    F.split_steps(text)
    F.extract_answer(text)
    F.generator_format_score(text)
    F.parse_verification(text)
    _score(text)
    assert time.perf_counter() - start < 1.0


def test_line_steps_by_hand():
    """data.step_split=lines: non-blank lines, stripped, with spans into the response; the
    verifier is shown them tagged, which splits back into the same steps."""
    text = "  7 + 5 = 12\r\n\n \t\nThe answer is 12. "
    steps = F.split_lines(text)
    assert [s.text for s in steps] == ["7 + 5 = 12", "The answer is 12."]
    assert [text[s.start : s.end] for s in steps] == [s.text for s in steps]
    tagged = F.tagged_solution(text, F.StepSplit.LINES)
    assert tagged == "<step>7 + 5 = 12</step>\n<step>The answer is 12.</step>"
    assert [s.text for s in F.split_steps(tagged)] == [s.text for s in steps]
    assert F.tagged_solution(text, F.StepSplit.TAGS) == text
    assert F.response_steps(text, F.StepSplit.TAGS) == []
    assert F.split_lines("") == F.split_lines(" \n ") == []
