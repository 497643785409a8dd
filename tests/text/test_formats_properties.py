"""Hypothesis properties of tango_jax.text.formats over random and adversarial strings.

The independent references are the official regexes of TANGO_SPEC §3.2-3.3 and §4.2, written
out here as the spec states them (fine on the short strings hypothesis makes; the module under
test scans without them so that long inputs stay linear).
"""

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from tango_jax.text import formats as F
from tango_jax.text import templates as T

FRAGMENTS = [
    "<step>", "</step>", "<step_verification>", "</step_verification>", "<final_verification>",
    "</final_verification>", "<answer>", "</answer>", "<think>", "</think>", "\\boxed{",
    "\\boxed{CORRECT}", "\\boxed{INCORRECT}", "\\box{correct}", "\\boxed{CORRECT}.",
    " \\boxed{INCORRECT}. \n", "\\boxed{correct} x", ".</step>", "\\boxed{9}", "{", "}", ".",
    " ", "\n", "x", "é", "🙂", "9" * 30,
    # other cases: the verifier's step and verdict tags match them, the rest does not
    "<STEP>", "</Step>", "<sTeP>", "</STEP>", "<FINAL_VERIFICATION>", "</Final_Verification>",
    "<STEP_VERIFICATION>", "</Step_Verification>", "\\BOXED{correct}", "<\u017fTEP>", "</\u0131>",
]  # fmt: skip
# No letters in the free text: the only tags are the fragments'.
FREE_TEXT = st.text(alphabet=" \n\t.{}\\<>/_x9é日🙂\u00a0", max_size=12)
TAG_SOUP = st.lists(st.sampled_from(FRAGMENTS) | FREE_TEXT, max_size=40).map("".join)
JUNK = st.sampled_from(["", "", "", " ", "\n", "x", "<step>", "</step>", "note", "</answer>"])
EDGE = st.sampled_from(["", "", "", "", "", "", " \n", "x", "<step>"])  # before/after a section
LABEL = st.sampled_from(
    ["\\boxed{CORRECT}", "\\boxed{INCORRECT}", "\\box{correct}", "\\boxed{maybe}", "\\boxed{9}", ""]
)
ENDING = st.sampled_from(["", ".", ". \n", " ", "..", " .", " x", "\n.", "}"])
STEP_BLOCK = st.builds("<step>{}{}{}</step>".format, FREE_TEXT, LABEL, ENDING)
# Verifier step blocks and verdict tags in other cases too (what a real model may write).
OPEN, CLOSE = (st.sampled_from([t, t, t, t.upper(), t.title()]) for t in ("<step>", "</step>"))
ANY_CASE_BLOCK = st.builds("{}{}{}{}{}".format, OPEN, FREE_TEXT, LABEL, ENDING, CLOSE)
FINAL_TAGS = st.sampled_from(
    [("<final_verification>", "</final_verification>")] * 3
    + [("<FINAL_VERIFICATION>", "</Final_Verification>")]
)


@st.composite
def verifier_like(draw):
    """Outputs near the verifier format, so that every penalty and label rule gets exercised."""
    blocks = draw(st.lists(ANY_CASE_BLOCK, max_size=5))
    steps = "".join(draw(JUNK) + b for b in blocks) + draw(JUNK)
    final = draw(st.sampled_from(["", " ", "So "])) + draw(LABEL) + draw(ENDING)
    mid = draw(st.sampled_from(["", "", "\n", " x "]))
    final_open, final_close = draw(FINAL_TAGS)
    return (
        f"{draw(EDGE)}<step_verification>{steps}</step_verification>{mid}"
        f"{final_open}{final}{final_close}{draw(EDGE)}"
    )


@st.composite
def generator_like(draw):
    blocks = draw(st.lists(STEP_BLOCK, max_size=5))
    answer = draw(st.sampled_from(["", " ", "\n"])) + draw(LABEL) + draw(ENDING)
    return f"{draw(EDGE)}<think>{''.join(blocks)}</think><answer>{answer}</answer>{draw(EDGE)}"


ANY_TEXT = TAG_SOUP | st.text(max_size=200) | verifier_like() | generator_like()
VERIFIER_TEXT = verifier_like() | TAG_SOUP
GENERATOR_TEXT = generator_like() | TAG_SOUP
PLAIN = st.text(alphabet="abc 123+=.é日🙂\n", max_size=20)  # step text without tag characters
SETTINGS = settings(max_examples=150, deadline=None)

# ----------------------------------------------------------------------------------------------
# The official rules, transcribed from TANGO_SPEC.


def ref_steps(text):
    return [
        (m.group(1), m.start(), m.end()) for m in re.finditer(r"<step>(.*?)</step>", text, re.S)
    ]


def ref_remove_boxed(s):
    return s[len("\\boxed{") : -1] if s.startswith("\\boxed{") and s.endswith("}") else None


def ref_generator_format(text):
    m = re.search(r"<answer>(.*?)</answer>", text.rstrip(), re.S)
    if not m:
        return 0.0
    score = 1.0
    if not ref_remove_boxed(m.group(1).strip()):
        score -= 0.8
    k = len(re.findall(r"<step>(.*?)</step>", text, re.S))
    score -= 0.8 if k == 0 else (0.4 if k < 3 else 0.0)
    return max(0.0, min(1.0, score))


JUDGMENT_AT_END = r"\\box(?:ed)?\{(CORRECT|INCORRECT)\}(?:\.?\s*)?$"


def ref_valid_step_labels(content, tag_flags=0):
    """The official judgments; the parser finds their <step> tags with re.I (tag_flags), the
    format score's count is of the tags as written."""
    labels = []
    for step in re.findall(r"<step>(.*?)</step>", content, re.S | tag_flags):
        m = re.search(JUDGMENT_AT_END, step, re.I)
        if m:
            labels.append(1 if m.group(1).upper() == "CORRECT" else -1)
    return labels


def ref_verifier_format(text, k, gen_score):
    text = text.strip()
    skeleton = r"^<step_verification>.*?</step_verification>\s*<final_verification>.*?</final_verification>$"  # noqa: E501
    if not re.match(skeleton, text, re.S):
        return 0.0
    steps = re.search(r"<step_verification>(.*?)</step_verification>", text, re.S).group(1).strip()
    final = re.search(r"<final_verification>(.*?)</final_verification>", text, re.S).group(1)
    score = 1.0
    if not re.search(JUDGMENT_AT_END, final.strip(), re.I):
        score -= 0.8
    if not re.findall(r"<step>(.*?)</step>", steps, re.S):
        score -= 0.8
    else:
        if gen_score >= 0.6 and len(ref_valid_step_labels(steps)) != k:
            score -= 0.8
    if re.sub(r"\s+", "", re.sub(r"<step>.*?</step>", "", steps, flags=re.S)):
        score -= 0.4
    return max(0.0, min(1.0, score))


def ref_verdict(text):
    pattern = (
        r"<final_verification>\\box(?:ed)?\{(CORRECT|INCORRECT)\}(?:\.?\s*)?</final_verification>"
    )
    m = re.search(pattern, text, re.I)
    return None if m is None else int(m.group(1).upper() == "CORRECT")


def ref_last_boxed(text):
    """The reference last_boxed_only_string + remove_boxed, character by character."""
    idx = text.rfind("\\boxed")
    if idx < 0:
        return None
    depth, i = 0, idx
    while i < len(text):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if text[i] == "}" and depth == 0:
            return ref_remove_boxed(text[idx : i + 1])
        i += 1
    return None


# ----------------------------------------------------------------------------------------------


@SETTINGS
@given(ANY_TEXT)
def test_split_steps_matches_the_official_regex(text):
    steps = F.split_steps(text)
    assert [(s.text, s.start, s.end) for s in steps] == ref_steps(text)
    for s in steps:
        assert text[s.start : s.end] == f"<step>{s.text}</step>"


@SETTINGS
@given(GENERATOR_TEXT)
def test_generator_format_score_matches_the_official_rule(text):
    score = F.generator_format_score(text)
    assert score in (0.0, 0.2, 0.6, 1.0)
    assert abs(score - ref_generator_format(text)) < 1e-9


@SETTINGS
@given(VERIFIER_TEXT, st.integers(0, 3), st.sampled_from([0.0, 0.2, 0.6, 1.0]))
def test_verifier_format_score_matches_the_official_rule(text, k, gen_score):
    score = F.verifier_format_score(text, expected_steps=k, generator_format_score=gen_score)
    assert score in (0.0, 0.2, 0.6, 1.0)
    assert abs(score - ref_verifier_format(text, k, gen_score)) < 1e-9


@SETTINGS
@given(VERIFIER_TEXT)
def test_parse_verification_matches_the_official_rules(text):
    v = F.parse_verification(text)
    assert v.verdict == ref_verdict(text)
    m = re.search(r"<step_verification>(.*?)</step_verification>", text, re.S)
    content = m.group(1) if m else ""
    assert list(v.step_judgments) == ref_valid_step_labels(content, re.I)
    assert v.num_step_blocks == len(re.findall(r"<step>(.*?)</step>", content, re.S | re.I))


@SETTINGS
@given(ANY_TEXT)
def test_last_boxed_matches_the_reference(text):
    assert F.last_boxed(text) == ref_last_boxed(text)


@SETTINGS
@given(st.lists(PLAIN, max_size=8), PLAIN.filter(lambda a: a.strip() != ""))
def test_k_well_formed_steps_split_into_k_steps(texts, answer):
    response = F.render_generator_response(texts, answer)
    assert [s.text for s in F.split_steps(response)] == texts
    assert F.extract_answer(response) == answer
    k = len(texts)
    assert F.generator_format_score(response) == (1.0 if k >= 3 else 0.6 if k else 0.2)
    assert f"has {k} steps" in T.render_verifier_prompt("P", response)


@SETTINGS
@given(
    st.lists(st.sampled_from([1, -1]), min_size=1, max_size=8),
    st.sampled_from([F.CORRECT, F.INCORRECT]),
    st.data(),
)
def test_rendered_verification_round_trips(judgments, verdict, data):
    analyses = data.draw(st.lists(PLAIN, min_size=len(judgments), max_size=len(judgments)))
    text = F.render_verification(judgments, verdict, analyses)
    assert F.parse_verification(text) == F.Verification(tuple(judgments), verdict, len(judgments))
    k = len(judgments)
    assert F.verifier_format_score(text, expected_steps=k, generator_format_score=1.0) == 1.0
    assert F.verifier_format_score(text, expected_steps=k + 1, generator_format_score=1.0) == 0.2


@SETTINGS
@given(st.text(max_size=300), st.text(max_size=300))
def test_prompts_insert_user_text_verbatim(question, solution):
    assert T.render_generator_prompt(question).endswith(f"User: {question}\nAssistant:")
    prompt = T.render_verifier_prompt(question, solution)
    assert f"Problem: {question}\nAssistant's Solution:\n{solution}\n\n" in prompt
    assert prompt.endswith("Your Verification:\n")
