r"""Answer checkers for the outcome reward, each item under a time limit in this process.

TANGO_SPEC.md §2.1 and §4.3 define r_out in {0, 1}:

  * Math-Verify on the whole response against `\boxed{gold}` (training data and the math
    benchmarks: Eurus-2-RL-Data, MATH500, AIME24/25, AMC23, OlympiadBench);
  * for the OOD benchmarks, equality of the last boxed answers after Hendrycks-style
    normalisation with a sympy fallback (BGQA, StrategyQA, TableBench), or equality of Python
    literals (CRUXEval).

Time limits. Math-Verify and sympy can run for minutes on a pathological answer (`2^{2^{40}}`).
`score_item` runs one check under a SIGALRM limit when called on the main thread (no limit on
other threads), and turns a timeout or any error into a score of 0 with its status. The
single-item functions (`outcome_reward`, ...) are that, for tests and one-off use; training and
evaluation score batches with `scoring_pool.OutcomeScorer`, which calls `score_item` in worker
processes and kills a worker that a C call keeps past the limit.

This module is separate from `rewards` (the reward formulas) and `scoring_pool` (the worker
processes) because it is what the workers import: answer checking and nothing else.
"""

from __future__ import annotations

import ast
import enum
import functools
import logging
import re
import signal
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from tango_jax.text import formats

DEFAULT_TIMEOUT_S = 5.0  # per item; the official code gives Math-Verify 5 s per parse and compare


class RewardKind(enum.Enum):
    """Which answer checker scores a (response, gold) pair."""

    MATH = "math"  # Math-Verify: Eurus-2-RL-Data, MATH500, AIME24/25, AMC23, OlympiadBench
    BOXED = "boxed"  # normalised boxed-answer equality: BGQA, StrategyQA, TableBench
    CRUXEVAL = "cruxeval"  # Python-literal equality of the boxed answer: CRUXEval
    CUSTOM = "custom"  # the run's own function, config `data.reward` (text/reward_function.py)
    EXACT = "exact"  # the last boxed answer, stripped, equals the gold string: last letters


# --------------------------------------------------------------------------------------------
# Math-Verify (TANGO_SPEC §2.1, §4.3).


class _MathVerify(NamedTuple):
    parse: Callable[..., list]
    verify: Callable[..., bool]
    gold_targets: tuple
    pred_targets: tuple


@functools.cache
def _math_verify() -> _MathVerify:
    """Imports Math-Verify on first use (with sympy and antlr it takes ~0.7 s).

    Its own signal-based timeouts are switched off in every call (they would cancel our timer,
    and they fail off the main thread), so its one-time warning about that is filtered out.
    """
    import math_verify

    for name in ("math_verify.parser", "math_verify.grader"):
        logging.getLogger(name).addFilter(
            lambda record: not record.getMessage().startswith("Timeout is disabled")
        )
    return _MathVerify(
        parse=math_verify.parse,
        verify=math_verify.verify,
        gold_targets=(math_verify.LatexExtractionConfig(),),
        pred_targets=(math_verify.ExprExtractionConfig(), math_verify.LatexExtractionConfig()),
    )


def _math_score(response: str, gold: str) -> float:
    r"""The official `math_verify.compute_score`: gold wrapped in `\boxed{}`, the whole response
    as the prediction, 6-digit float rounding. Raises ValueError if the gold does not parse."""
    mv = _math_verify()
    golds = mv.parse("\\boxed{" + gold + "}", mv.gold_targets, parsing_timeout=None)
    if not golds:
        raise ValueError(f"gold answer {gold[:200]!r} does not parse as LaTeX; check the dataset.")
    preds = mv.parse(response, mv.pred_targets, parsing_timeout=None)
    return float(mv.verify(golds, preds, 6, timeout_seconds=None))


# --------------------------------------------------------------------------------------------
# OOD answer checks (TANGO_SPEC §4.3): the reference `basic.py`, `cruxeval.py`, `math_utils.py`.


def _answer_or_text(text: str) -> str:
    """The last boxed answer, or the whole text when it has none (reference `solution2answer`)."""
    boxed = formats.last_boxed(text)
    return text if boxed is None else boxed


def _fix_fracs(s: str) -> str:
    r"""`\frac12` -> `\frac{1}{2}`, `\frac1{72}` -> `\frac{1}{72}`; a `\frac` with fewer than two
    characters after it leaves the string as it is. An empty tail raises IndexError."""
    head, *tails = s.split("\\frac")
    out = [head]
    for tail in tails:
        if tail[0] == "{":
            out.append(tail)
        elif len(tail) < 2:
            return s
        elif tail[1] == "{":
            out.append("{" + tail[0] + "}" + tail[1:])
        else:
            out.append("{" + tail[0] + "}{" + tail[1] + "}" + tail[2:])
    return "\\frac".join(out)


def _fix_sqrt(s: str) -> str:
    r"""`\sqrt3` -> `\sqrt{3}`. An empty tail raises IndexError."""
    head, *tails = s.split("\\sqrt")
    return "\\sqrt".join([head] + [t if t[0] == "{" else "{" + t[0] + "}" + t[1:] for t in tails])


def _fix_slash_fraction(s: str) -> str:
    r"""`3/4` (two integers, nothing else) -> `\frac{3}{4}`."""
    a, sep, b = s.partition("/")
    if not sep or "/" in b:
        return s
    try:
        num, den = int(a), int(b)
    except ValueError:
        return s
    return f"\\frac{{{num}}}{{{den}}}" if s == f"{num}/{den}" else s


def _hendrycks_normalize(s: str) -> str:
    """Hendrycks et al.'s MATH answer normalisation (the reference `_strip_string`).

    Raises on the inputs where the reference raises (then the caller compares the raw strings).
    """
    for old, new in (("\n", ""), ("\\!", ""), ("\\\\", "\\"), ("tfrac", "frac"), ("dfrac", "frac")):
        s = s.replace(old, new)
    for junk in ("\\left", "\\right", "^{\\circ}", "^\\circ", "\\$", "$", ","):
        s = s.replace(junk, "")
    if "\\text{ " in s:  # a unit on the right, e.g. "5 \text{ cm}"
        value, *units = s.split("\\text{ ")
        if len(units) != 1:
            raise ValueError("more than one unit")
        s = value
    s = s.replace("\\%", "").replace(" .", " 0.").replace("{.", "{0.")
    if not s:
        return s
    if s[0] == ".":
        s = "0" + s
    lhs, eq, rhs = s.partition("=")
    if eq and "=" not in rhs and len(lhs) <= 2:  # "k = 3" -> "3"
        s = rhs
    s = _fix_fracs(_fix_sqrt(s).replace(" ", ""))
    if s == "0.5":
        s = "\\frac{1}{2}"
    return _fix_slash_fraction(s)


def _hendrycks_equal(a: str, b: str) -> bool:
    """Equal after normalisation, as numbers when both parse as floats (reference `is_equiv`)."""
    try:
        na, nb = _hendrycks_normalize(a), _hendrycks_normalize(b)
    except (ValueError, IndexError):
        return a == b
    try:
        return float(na) == float(nb)
    except ValueError:
        return na == nb


# Minerva's final-answer normalisation (Lewkowycz et al. 2022, App. D), before the sympy retry.
_MINERVA_SUBSTITUTIONS = (
    ("an ", ""), ("a ", ""), (".$", "$"), ("\\$", ""), ("\\ ", ""), (" ", ""), ("mbox", "text"),
    (",\\text{and}", ","), ("\\text{and}", ","), ("\\text{m}", "\\text{}"),
)  # fmt: skip
_MINERVA_REMOVED = (
    "square", "ways", "integers", "dollars", "mph", "inches", "ft", "hours", "km", "units",
    "\\ldots", "sue", "points", "feet", "minutes", "digits", "cents", "degrees", "cm", "gm",
    "pounds", "meters", "meals", "edges", "students", "childrentickets", "multiples", "\\text{s}",
    "\\text{.}", "\\text{\ns}", "\\text{}^2", "\\text{}^3", "\\text{\n}", "\\text{}",
    "\\mathrm{th}", "^\\circ", "^{\\circ}", "\\;", ",\\!", "{,}", '"', "\\dots",
)  # fmt: skip
_MINERVA_UNWRAP = [re.compile(rf"\\{cmd}\{{(.*?)\}}") for cmd in ("text", "textbf", "overline")]


def _minerva_normalize(s: str) -> str:
    for old, new in _MINERVA_SUBSTITUTIONS:
        s = s.replace(old, new)
    for junk in _MINERVA_REMOVED:
        s = s.replace(junk, "")
    if (m := re.search(r"\$(.*?)\$", s)) is not None:  # keep the first $...$ span
        s = m.group(1)
    for pattern in _MINERVA_UNWRAP:
        s = pattern.sub(r"\1", s)
    s = re.sub(r"\\boxed\{(.*)\}", r"\1", s)
    s = re.sub(r"(frac)([^{])(.)", r"frac{\2}{\3}", s)
    s = re.sub(r"(sqrt)([^{])", r"sqrt{\2}", s).replace("$", "")
    if s.replace(",", "").isdigit():
        s = s.replace(",", "")
    return s


_SYMPY_MAX_CHARS = 512  # longer answers skip the sympy fallback (the reference skips long
# repetitive ones); the time limit bounds the rest
_WORDS = re.compile(r"[^\W\d_]{2,}(?:\s+[^\W\d_]+)*")  # "True", "not proved": text, not algebra


def _sympy_equal(a: str, b: str) -> bool:
    r"""The reference `is_latex_equal` fallback: the same sympy expression or the same numeric
    value, first as written, then after Minerva normalisation; if that normalised form does not
    parse, equality of the normalised strings.

    The reference parses with sympy's antlr LaTeX parser, which needs antlr 4.11; Math-Verify
    pins antlr 4.13, so we parse with latex2sympy2_extended (Math-Verify's own sympy front end).
    Answers made of words are compared as strings, never by sympy (which reads "listen" and
    "silent" as the same product). The word test runs on the strings as written and again after
    normalisation, so `\text{True}`, `\textbf{True}` and `True` are all the word True: in the
    reference sympy fails on `\text{}` and the normalised strings then match.
    """
    if max(len(a), len(b)) > _SYMPY_MAX_CHARS:
        return False
    from latex2sympy2_extended import latex2sympy

    def same(x: str, y: str) -> bool:
        ex, ey = latex2sympy(x), latex2sympy(y)
        return bool(ex == ey) or bool(ex.evalf() == ey.evalf())

    if not (_WORDS.fullmatch(a) or _WORDS.fullmatch(b)):
        try:
            if same(a, b):
                return True
        except Exception:
            pass
    na, nb = _minerva_normalize(a), _minerva_normalize(b)
    if _WORDS.fullmatch(na) or _WORDS.fullmatch(nb):
        return na == nb
    try:
        return same(na, nb)
    except Exception:
        return na == nb


def _boxed_score(response: str, gold: str) -> float:
    """Reference `basic.compute_score`: last boxed answers (or whole strings) equal after
    Hendrycks normalisation, else by the sympy fallback."""
    a, b = _answer_or_text(gold), _answer_or_text(response)
    return float(_hendrycks_equal(a, b) or _sympy_equal(a, b))


def _literal(s: str) -> Any:
    try:
        return ast.literal_eval(s)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return s


def _cruxeval_score(response: str, gold: str) -> float:
    """Reference `cruxeval.compute_score`: the last boxed answer (or the whole response), read as
    a Python literal where possible, equals the gold read the same way; an empty answer is 0."""
    answer = _answer_or_text(response)
    if not answer.strip():
        return 0.0
    return float(bool(_literal(answer) == _literal(gold)))


def _exact_score(response: str, gold: str) -> float:
    """1 when the response's last boxed answer, stripped, is the gold string itself (no boxed
    answer scores 0): for answers that a symbolic checker would misread, such as a string of
    letters (Math-Verify reads "zpr" as a product and accepts "rpz")."""
    answer = formats.last_boxed(response)
    return float(answer is not None and answer.strip() == gold.strip())


_SCORE_FNS: dict[RewardKind, Callable[[str, str], float]] = {
    RewardKind.MATH: _math_score,
    RewardKind.BOXED: _boxed_score,
    RewardKind.CRUXEVAL: _cruxeval_score,
    RewardKind.EXACT: _exact_score,
}

# --------------------------------------------------------------------------------------------
# Time limit inside one process.


class _ItemTimeout(BaseException):
    """Raised by the alarm. A BaseException, so that the `except Exception` clauses inside
    Math-Verify and sympy cannot swallow it."""


def _on_alarm(signum, frame):
    raise _ItemTimeout


def _run_with_alarm(fn: Callable[[str, str], float], a: str, b: str, timeout_s: float | None):
    """fn(a, b) under an ITIMER_REAL alarm of timeout_s seconds; main thread only.

    A timer the caller already had (pytest-timeout uses SIGALRM too) is re-armed afterwards with
    what was left of it. Pure-Python work is interrupted between bytecodes; a single long C call
    is not, which is why OutcomeScorer also has a hard limit that kills the worker.
    """
    if timeout_s is None or threading.current_thread() is not threading.main_thread():
        return fn(a, b)
    start = time.monotonic()
    old_handler = signal.signal(signal.SIGALRM, _on_alarm)
    old_delay, old_interval = signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        try:
            return fn(a, b)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        signal.signal(signal.SIGALRM, old_handler)
        if old_delay > 0:
            left = max(1e-3, old_delay - (time.monotonic() - start))
            signal.setitimer(signal.ITIMER_REAL, left, old_interval)


class ItemStatus(enum.Enum):
    """How one item's check ended; all but OK score 0 and are counted apart by the pool."""

    OK = "ok"
    TIMEOUT = "timeout"
    ERROR = "error"  # the check raised
    OUT_OF_RANGE = "out_of_range"  # it returned a number outside [0, 1], or NaN
    NOT_A_NUMBER = "not_a_number"  # it returned something else than a number or a bool


class BadScore(ValueError):
    """A check returned something that is not a score; `status` is the kind."""

    status = ItemStatus.ERROR


class ScoreOutOfRange(BadScore):
    status = ItemStatus.OUT_OF_RANGE


class ScoreNotANumber(BadScore):
    status = ItemStatus.NOT_A_NUMBER


class ItemResult(NamedTuple):
    """One item's score and how its check ended; `error`: "<type>: <message>" of an ERROR."""

    score: float
    status: ItemStatus
    error: str = ""


def check_timeout(timeout_s: float | None) -> None:
    """Rejects a limit that is not a positive number of seconds (None means no limit)."""
    if timeout_s is not None and not timeout_s > 0:
        raise ValueError(f"timeout_s ({timeout_s}) must be > 0 seconds, or None for no limit.")


def score_call(
    fn: Callable[[str, str], float], response: str, gold: str, timeout_s: float | None
) -> ItemResult:
    """fn(response, gold) under `timeout_s` (main thread only; None: no limit).

    The score is 0 on a timeout or any error, so a bad item never stops a run.
    """
    try:
        return ItemResult(_run_with_alarm(fn, response, gold, timeout_s), ItemStatus.OK)
    except _ItemTimeout:
        return ItemResult(0.0, ItemStatus.TIMEOUT)
    except BadScore as e:
        return ItemResult(0.0, e.status, f"{type(e).__name__}: {e}"[:500])
    except Exception as e:
        return ItemResult(0.0, ItemStatus.ERROR, f"{type(e).__name__}: {e}"[:500])


def score_item(kind: RewardKind, response: str, gold: str, timeout_s: float | None) -> ItemResult:
    """The `kind` check of one item under `timeout_s` (`score_call`); CUSTOM is scored by the
    pool's workers, which hold the run's function."""
    return score_call(_SCORE_FNS[kind], response, gold, timeout_s)


def outcome_reward(response: str, gold: str, *, timeout_s: float | None = DEFAULT_TIMEOUT_S):
    r"""1.0 if Math-Verify finds the response's answer equal to `\boxed{gold}`, else 0.0.

    0.0 as well when the gold does not parse, on any error, and after timeout_s seconds (only
    on the main thread; see the module docstring). Use OutcomeScorer for batches.
    """
    check_timeout(timeout_s)
    return score_item(RewardKind.MATH, response, gold, timeout_s).score


def boxed_equal_reward(response: str, gold: str, *, timeout_s: float | None = DEFAULT_TIMEOUT_S):
    """1.0 if the last boxed answer of the response (or the response itself, if it has none)
    equals the gold after Hendrycks normalisation or by sympy, else 0.0 (BGQA, StrategyQA,
    TableBench). Errors and timeouts give 0.0."""
    check_timeout(timeout_s)
    return score_item(RewardKind.BOXED, response, gold, timeout_s).score


def cruxeval_reward(response: str, gold: str, *, timeout_s: float | None = DEFAULT_TIMEOUT_S):
    """1.0 if the last boxed answer of the response equals the gold as a Python literal
    (`ast.literal_eval`, raw strings when that fails), else 0.0."""
    check_timeout(timeout_s)
    return score_item(RewardKind.CRUXEVAL, response, gold, timeout_s).score
