r"""Tango's text formats: generator steps and answers, verifier outputs, format scores.

TANGO_SPEC.md §3.1-3.3 and §4.1-4.2 define them. The generator writes

    <think>
    <step>...</step>            (K steps)
    </think>
    <answer>\boxed{...}</answer>

and the verifier answers with

    <step_verification>
    <step>... \boxed{CORRECT}</step>         (one judgment per generator step)
    </step_verification>
    <final_verification>\boxed{INCORRECT}</final_verification>

The prompts that ask for them are in `templates.py`.

Every parser here scans with `str.find` rather than a backtracking regex over unbounded text, so
any output, however long or malformed, parses in time linear in its length. (The official
`<step>(.*?)</step>` regexes are quadratic on an unclosed tag repeated many times.) The matches are
those of the official non-greedy regexes: a block is an opening tag and the first closing tag after
it, and the next block is looked for after that closing tag.

Tag case follows the official regexes: the verifier's step judgments (`<step>` blocks inside
the step-verification section) and its final verdict (`<final_verification>` tags, the
`\boxed{}` label) are matched case-insensitively (`<STEP>`, `<Step>`, `<FINAL_VERIFICATION>`,
`\BOXED{correct}`; `\box{}` is accepted for `\boxed{}`), as the official parser does with
re.IGNORECASE (TANGO_SPEC §3.2); the `<step_verification>` section, the generator's steps and
the format scores match tags exactly as written, as the official code does. The scanners stay
linear: they search an ASCII-case-folded copy of the text (same length, same indices).

One deliberate difference from the official code, only visible on malformed output:
  * a verifier step judgment belongs to one `<step>` block: a block that does not end with a boxed
    label gives no judgment. (The official regex can let a judgment reach back across a closing
    tag into an earlier block.) So the judgments are exactly the blocks that the format score
    counts as valid.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Sequence

STEP_OPEN, STEP_CLOSE = "<step>", "</step>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
STEP_VERIFICATION_OPEN, STEP_VERIFICATION_CLOSE = "<step_verification>", "</step_verification>"
FINAL_VERIFICATION_OPEN, FINAL_VERIFICATION_CLOSE = "<final_verification>", "</final_verification>"

# Format-score penalties (TANGO_SPEC §3.3, §4.2).
MISSING_PENALTY = 0.8  # no boxed answer / no steps / no boxed verdict / step-count mismatch
FEW_STEPS_PENALTY = 0.4  # fewer than MIN_STEPS generator steps
MIN_STEPS = 3
STRAY_TEXT_PENALTY = 0.4  # text inside <step_verification> but outside its <step> blocks
# The verifier is penalised for a step-count mismatch only when the generator's own format score
# reaches this value: a badly formatted solution has no reliable step count to match.
GENERATOR_FORMAT_GATE = 0.6


# --------------------------------------------------------------------------------------------
# Scanning helpers.


@dataclasses.dataclass(frozen=True)
class _Block:
    start: int  # index of the opening tag
    content_start: int
    content_end: int
    end: int  # index just after the closing tag


def _blocks(text: str, open_tag: str, close_tag: str, lo: int = 0, hi: int | None = None):
    """The matches of the regex `open(.*?)close` (DOTALL) inside text[lo:hi], left to right.

    Linear time: once an opening tag has no closing tag after it, no later one can have one.
    """
    hi = len(text) if hi is None else hi
    pos = lo
    while True:
        start = text.find(open_tag, pos, hi)
        if start < 0:
            return
        content_start = start + len(open_tag)
        content_end = text.find(close_tag, content_start, hi)
        if content_end < 0:
            return
        end = content_end + len(close_tag)
        yield _Block(start, content_start, content_end, end)
        pos = end


def _first_block(text: str, open_tag: str, close_tag: str) -> _Block | None:
    return next(_blocks(text, open_tag, close_tag), None)


_BRACE = re.compile(r"[{}]")


def last_boxed(text: str) -> str | None:
    r"""The content of the last `\boxed{...}` in `text`, braces balanced; None if there is none.

    Only the last `\boxed` counts: if it is not followed by `{` or its braces never close
    (a truncated output), the result is None even when an earlier box is complete. This is the
    rule of the reference answer extractor (`last_boxed_only_string` + `remove_boxed`).
    """
    idx = text.rfind("\\boxed")
    brace = idx + len("\\boxed")
    if idx < 0 or not text.startswith("{", brace):
        return None
    depth = 0
    for m in _BRACE.finditer(text, brace):
        depth += 1 if m.group() == "{" else -1
        if depth == 0:
            return text[brace + 1 : m.start()]
    return None


def _clip_score(score: float) -> float:
    """Clips to [0, 1]; rounding hides float noise such as 1 - 0.8 = 0.19999999999999996."""
    return round(min(1.0, max(0.0, score)), 6)


# --------------------------------------------------------------------------------------------
# Generator responses.


@dataclasses.dataclass(frozen=True)
class Step:
    """One `<step>...</step>` span of a generator response.

    text: what lies between the tags. start: index of the `<` of `<step>`. end: index just after the
    `>` of `</step>` (exclusive), the character offset that step rewards are anchored to.
    """

    text: str
    start: int
    end: int


def split_steps(response: str) -> list[Step]:
    """The steps of a generator response: every `<step>...</step>` span, left to right.

    The same spans as the official `re.finditer(r"<step>(.*?)</step>", DOTALL)`: empty steps
    count, a `<step>` nested inside a step is part of its text, and an unclosed `<step>` is not a
    step. Steps are found anywhere in the response, not only inside `<think>`.
    """
    return [
        Step(response[b.content_start : b.content_end], b.start, b.end)
        for b in _blocks(response, STEP_OPEN, STEP_CLOSE)
    ]


class StepSplit(enum.Enum):
    """Where a generator response's steps are (`data.step_split`)."""

    TAGS = "tags"  # its `<step>...</step>` spans (the paper's format)
    # each non-empty line (PRM800K's steps; TRL's PRMTrainer step_separator="\n"): for a model
    # that writes no tags, such as an instruct model answering in its own words
    LINES = "lines"


def split_lines(response: str) -> list[Step]:
    """The non-blank lines of `response` as steps: each line's text without its surrounding
    whitespace, `end` just after its last non-blank character (where its step reward sits)."""
    steps, pos = [], 0
    for line in response.split("\n"):
        text = line.strip()
        if text:
            start = pos + len(line) - len(line.lstrip())
            steps.append(Step(text, start, start + len(text)))
        pos += len(line) + 1
    return steps


def response_steps(response: str, split: StepSplit = StepSplit.TAGS) -> list[Step]:
    """The steps of a generator response under `split`."""
    return split_steps(response) if split is StepSplit.TAGS else split_lines(response)


def tagged_solution(response: str, split: StepSplit = StepSplit.TAGS) -> str:
    """The response as the verifier is shown it: as written when its steps are tagged; one
    `<step>` line per step otherwise, so that the verifier's prompt counts and shows the same K
    steps that the step rewards are anchored to."""
    if split is StepSplit.TAGS:
        return response
    return "\n".join(f"{STEP_OPEN}{s.text}{STEP_CLOSE}" for s in split_lines(response))


def extract_answer(response: str) -> str | None:
    r"""The final answer of a generator response: the content of the last `\boxed{}` inside the
    first `<answer>...</answer>` block, or, when there is no such block, the last `\boxed{}` of
    the whole response. None when there is no complete box there.

    For display and logs. The rewards do their own extraction (Math-Verify reads the whole
    response; the OOD checks take the last box anywhere), as in the official code.
    """
    block = _first_block(response, ANSWER_OPEN, ANSWER_CLOSE)
    region = response if block is None else response[block.content_start : block.content_end]
    return last_boxed(region)


def _is_boxed_answer(answer: str) -> bool:
    r"""Whether `answer` is exactly `\boxed{...}`, not empty (the reference `remove_boxed`)."""
    return len(answer) > len("\\boxed{}") and answer.startswith("\\boxed{") and answer.endswith("}")


def generator_format_score(response: str) -> float:
    r"""The generator format score in [0, 1] (TANGO_SPEC §4.2).

    0 without an `<answer>...</answer>` block. Otherwise 1, minus 0.8 if the first answer block
    (stripped) is not exactly `\boxed{...}`, minus 0.8 if there is no `<step>` block or 0.4 if
    there are fewer than 3. Possible values: 1, 0.6, 0.2, 0.

    Tango does not reward the generator with it (weight 0); it gates the verifier's step-count
    penalty (GENERATOR_FORMAT_GATE) and goes to the logs.
    """
    block = _first_block(response, ANSWER_OPEN, ANSWER_CLOSE)
    if block is None:
        return 0.0
    penalty = 0.0
    if not _is_boxed_answer(response[block.content_start : block.content_end].strip()):
        penalty += MISSING_PENALTY
    num_steps = sum(1 for _ in _blocks(response, STEP_OPEN, STEP_CLOSE))
    if num_steps == 0:
        penalty += MISSING_PENALTY
    elif num_steps < MIN_STEPS:
        penalty += FEW_STEPS_PENALTY
    return _clip_score(1.0 - penalty)


def render_generator_response(steps: Sequence[str], answer: str) -> str:
    r"""A generator response in the prompted format (`<think>`, one line per step, `</think>`,
    `<answer>\boxed{answer}</answer>`): for synthetic SFT data and tests."""
    lines = ["<think>", *(f"{STEP_OPEN}{s}{STEP_CLOSE}" for s in steps), "</think>"]
    return "\n".join(lines) + f"\n{ANSWER_OPEN}\\boxed{{{answer}}}{ANSWER_CLOSE}"


# --------------------------------------------------------------------------------------------
# Verifier outputs.

CORRECT, INCORRECT = 1, 0  # verdict values; step judgments are +1 / -1

# A boxed label at the very end of a (right-stripped, one final period removed) block.
_LABEL_AT_END = re.compile(r"\\box(?:ed)?\{(CORRECT|INCORRECT)\}\Z", re.IGNORECASE)
# The official verdict pattern, case-insensitive: nothing, not even a space, between the tag
# and the box.
_VERDICT = re.compile(
    r"<final_verification>\\box(?:ed)?\{(CORRECT|INCORRECT)\}\.?\s*</final_verification>",
    re.IGNORECASE,
)
# Every character that Python's re.IGNORECASE matches to an ASCII letter, to that letter in
# lower case; one character to one, so indices into the folded text are indices into the text.
_FOLD = str.maketrans(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZ\u0130\u0131\u017f\u212a", "abcdefghijklmnopqrstuvwxyziisk"
)


def _casefolded(text: str) -> str:
    """`text` with tags findable case-insensitively: `_casefolded(t).find("<step>")` finds what
    `re.search("<step>", t, re.IGNORECASE)` finds, at the same index."""
    return text.translate(_FOLD)


_SKELETON_JOIN = re.compile(r"</step_verification>\s*<final_verification>")
_LONGEST_LABEL = len("\\boxed{INCORRECT}")


def _label_at_end(content: str) -> bool | None:
    r"""True/False for a block ending in `\boxed{CORRECT}` / `\boxed{INCORRECT}` (optionally
    followed by one period and whitespace: the official `\.?\s*$`), None for any other ending."""
    tail = content.rstrip()
    if tail.endswith("."):
        tail = tail[:-1]
    m = _LABEL_AT_END.search(tail[-_LONGEST_LABEL:])
    return None if m is None else m.group(1).upper() == "CORRECT"


@dataclasses.dataclass(frozen=True)
class Verification:
    """A parsed verifier output.

    step_judgments: +1 (CORRECT) or -1 (INCORRECT) for each `<step>` block of the first
        `<step_verification>` section whose content ends with a boxed label, in order.
    verdict: CORRECT (1) or INCORRECT (0) from the first
        `<final_verification>\\boxed{LABEL}</final_verification>` anywhere in the output, or None
        when there is none (then the verifier reward is 0, TANGO_SPEC §3.2).
    num_step_blocks: all `<step>` blocks in that section, judged or not (for logs).
    """

    step_judgments: tuple[int, ...]
    verdict: int | None
    num_step_blocks: int


def parse_verification(text: str) -> Verification:
    """Reads the step judgments and the final verdict of a verifier output (TANGO_SPEC §3.2).

    Never raises: a missing section gives no judgments, a missing or malformed verdict gives
    verdict None. The step blocks' tags and the verdict's are matched in any case (module
    docstring). A judgment must end its block: `\\boxed{CORRECT} because ...</step>` is not
    one, so that block gives no judgment (and the count then differs from K: no step rewards).
    """
    judgments: list[int] = []
    num_blocks = 0
    section = _first_block(text, STEP_VERIFICATION_OPEN, STEP_VERIFICATION_CLOSE)
    if section is not None:
        folded = _casefolded(text)  # <step> tags in any case (the official re.IGNORECASE)
        lo, hi = section.content_start, section.content_end
        for b in _blocks(folded, STEP_OPEN, STEP_CLOSE, lo, hi):
            num_blocks += 1
            label = _label_at_end(text[b.content_start : b.content_end])
            if label is not None:
                judgments.append(1 if label else -1)
    m = _VERDICT.search(text)
    verdict = None if m is None else (CORRECT if m.group(1).upper() == "CORRECT" else INCORRECT)
    return Verification(tuple(judgments), verdict, num_blocks)


def _has_skeleton(text: str) -> bool:
    """Whether stripped `text` matches the official
    `^<step_verification>.*?</step_verification>\\s*<final_verification>.*?</final_verification>$`
    (DOTALL), checked without backtracking: it starts and ends with the outer tags and has a
    join after the opening tag. (A join's `<final_verification>` cannot overlap the closing
    `</final_verification>`, so any join leaves room for it.)"""
    if not (text.startswith(STEP_VERIFICATION_OPEN) and text.endswith(FINAL_VERIFICATION_CLOSE)):
        return False
    return _SKELETON_JOIN.search(text, len(STEP_VERIFICATION_OPEN)) is not None


def verifier_format_score(
    text: str, *, expected_steps: int | None, generator_format_score: float
) -> float:
    """The verifier format score in [0, 1] (TANGO_SPEC §3.3).

    0 unless the stripped output is `<step_verification>...</step_verification>`, whitespace,
    `<final_verification>...</final_verification>` and nothing else. Otherwise 1 minus:
      0.8 if the final section does not end with a boxed CORRECT/INCORRECT;
      0.8 if the step section has no `<step>` block; else, when `generator_format_score` >= 0.6
          and `expected_steps` is given, 0.8 if the number of judged blocks != expected_steps;
      0.4 if the step section has non-whitespace text outside its `<step>` blocks;
    clipped to [0, 1].

    expected_steps: K, the generator response's step count (None skips the count check).
    generator_format_score: that response's `generator_format_score`, in [0, 1].
    """
    if expected_steps is not None and expected_steps < 0:
        raise ValueError(f"expected_steps ({expected_steps}) must be >= 0 or None.")
    if not 0.0 <= generator_format_score <= 1.0:
        raise ValueError(
            f"generator_format_score ({generator_format_score}) must be in [0, 1]; pass the value "
            "of formats.generator_format_score for the verified response."
        )
    text = text.strip()
    if not _has_skeleton(text):
        return 0.0
    steps = _first_block(text, STEP_VERIFICATION_OPEN, STEP_VERIFICATION_CLOSE)
    final = _first_block(text, FINAL_VERIFICATION_OPEN, FINAL_VERIFICATION_CLOSE)
    assert steps is not None and final is not None  # the skeleton guarantees both
    penalty = 0.0
    if _label_at_end(text[final.content_start : final.content_end].strip()) is None:
        penalty += MISSING_PENALTY
    blocks = list(_blocks(text, STEP_OPEN, STEP_CLOSE, steps.content_start, steps.content_end))
    if not blocks:
        penalty += MISSING_PENALTY
    elif expected_steps is not None and generator_format_score >= GENERATOR_FORMAT_GATE - 1e-9:
        judged = sum(
            _label_at_end(text[b.content_start : b.content_end]) is not None for b in blocks
        )
        if judged != expected_steps:
            penalty += MISSING_PENALTY
    if _has_text_between(text, blocks, steps.content_start, steps.content_end):
        penalty += STRAY_TEXT_PENALTY
    return _clip_score(1.0 - penalty)


def _has_text_between(text: str, blocks: list[_Block], lo: int, hi: int) -> bool:
    """Whether text[lo:hi], with the blocks removed, has a non-whitespace character."""
    edges = [lo, *(i for b in blocks for i in (b.start, b.end)), hi]
    return any(a < b and not text[a:b].isspace() for a, b in zip(edges[::2], edges[1::2]))


def render_verification(
    step_judgments: Sequence[int], verdict: int, analyses: Sequence[str] | None = None
) -> str:
    """A verifier output in the prompted format: one `<step>` per judgment (+1 CORRECT,
    -1 INCORRECT), each ending with its boxed label, then the boxed verdict (1 CORRECT,
    0 INCORRECT). `analyses` gives the text before each label (default "Step i Analysis: ...").

    For synthetic SFT data and tests: parse_verification(render_verification(j, v)) gives j, v.
    """
    if analyses is not None and len(analyses) != len(step_judgments):
        raise ValueError(
            f"analyses has {len(analyses)} entries but step_judgments has {len(step_judgments)}; "
            "pass one analysis per judgment or None."
        )
    if any(j not in (1, -1) for j in step_judgments) or verdict not in (CORRECT, INCORRECT):
        raise ValueError(
            f"step_judgments {tuple(step_judgments)} must be +1/-1 and verdict ({verdict}) 1/0."
        )
    label = {1: "CORRECT", -1: "INCORRECT", 0: "INCORRECT"}
    lines = [STEP_VERIFICATION_OPEN]
    for i, j in enumerate(step_judgments):
        analysis = f"Step {i + 1} Analysis: ..." if analyses is None else analyses[i]
        lines.append(f"{STEP_OPEN}{analysis} \\boxed{{{label[j]}}}{STEP_CLOSE}")
    lines.append(STEP_VERIFICATION_CLOSE)
    lines.append(f"{FINAL_VERIFICATION_OPEN}\\boxed{{{label[verdict]}}}{FINAL_VERIFICATION_CLOSE}")
    return "\n".join(lines)
