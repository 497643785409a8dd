r"""Tango's rewards: outcome correctness, step rewards, the verifier reward, and where they land.

TANGO_SPEC.md §2.1-2.2, §3.3 and §4.3 define them:

  * outcome reward r_out in {0, 1}: Math-Verify on the whole response against `\boxed{gold}`
    (training data and math benchmarks); for the OOD benchmarks, equality of the last boxed
    answers after Hendrycks-style normalisation with a sympy fallback (BGQA, StrategyQA,
    TableBench) or equality of Python literals (CRUXEval);
  * step rewards ±1/K, only when the verifier gave exactly K step judgments;
  * verifier reward 1[verdict == r_out] + 0.8 · format, 0 when the verdict is unparsable.

Time limits. Math-Verify and sympy can run for minutes on a pathological answer (`2^{2^{40}}`).
`OutcomeScorer` is what training and evaluation use: a pool of worker processes, each started as
a fresh interpreter (never forked from the JAX process), that scores one item at a time under a
SIGALRM limit in the worker's main thread, and is killed and replaced if an item outlives the
limit anyway (C code that never returns to the interpreter). A timed-out or failing item scores 0
and is counted; nothing blocks the run. The single-item functions (`outcome_reward`, ...) apply
the same SIGALRM limit when called on the main thread, and no limit on other threads.

Step-reward positions. The official code decodes the response, re-tokenises the text with
offsets, and puts step k's reward on the token containing the character just after `</step>`
(usually the next token, a newline). Re-tokenisation need not reproduce the generated ids, so
tango_jax (TANGO_SPEC §11) maps each step to the generated token that completes its `</step>`,
using character offsets of the generator's own token ids (`token_char_ends`,
`step_end_token_indices`). The reward then sits on a token the policy actually produced, at the
moment the step is complete; the reverse cumulative sum of step advantages credits that token and
everything before it.
"""

from __future__ import annotations

import ast
import bisect
import codecs
import collections
import dataclasses
import enum
import functools
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any, NamedTuple

import numpy as np

from tango_jax.tango import formats

VERIFIER_FORMAT_WEIGHT = 0.8  # γ in r_v = 1[verdict == gold] + γ · format
DEFAULT_TIMEOUT_S = 5.0  # per item; the official code gives Math-Verify 5 s per parse and compare


class RewardKind(enum.Enum):
    """Which answer checker scores a (response, gold) pair."""

    MATH = "math"  # Math-Verify: Eurus-2-RL-Data, MATH500, AIME24/25, AMC23, OlympiadBench
    BOXED = "boxed"  # normalised boxed-answer equality: BGQA, StrategyQA, TableBench
    CRUXEVAL = "cruxeval"  # Python-literal equality of the boxed answer: CRUXEval


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
    """The reference `is_latex_equal` fallback: the same sympy expression or the same numeric
    value, first as written, then after Minerva normalisation; if that normalised form does not
    parse, equality of the normalised strings.

    The reference parses with sympy's antlr LaTeX parser, which needs antlr 4.11; Math-Verify
    pins antlr 4.13, so we parse with latex2sympy2_extended (Math-Verify's own sympy front end).
    Answers made of words skip it: sympy reads "listen" and "silent" as the same product.
    """
    if max(len(a), len(b)) > _SYMPY_MAX_CHARS or _WORDS.fullmatch(a) or _WORDS.fullmatch(b):
        return False
    from latex2sympy2_extended import latex2sympy

    def same(x: str, y: str) -> bool:
        ex, ey = latex2sympy(x), latex2sympy(y)
        return bool(ex == ey) or bool(ex.evalf() == ey.evalf())

    try:
        if same(a, b):
            return True
    except Exception:
        pass
    na, nb = _minerva_normalize(a), _minerva_normalize(b)
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


_SCORE_FNS: dict[RewardKind, Callable[[str, str], float]] = {
    RewardKind.MATH: _math_score,
    RewardKind.BOXED: _boxed_score,
    RewardKind.CRUXEVAL: _cruxeval_score,
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


class _Status(enum.Enum):
    OK = "ok"
    TIMEOUT = "timeout"
    ERROR = "error"


def _check_timeout(timeout_s: float | None) -> None:
    if timeout_s is not None and not timeout_s > 0:
        raise ValueError(f"timeout_s ({timeout_s}) must be > 0 seconds, or None for no limit.")


def _score_item(kind: RewardKind, response: str, gold: str, timeout_s: float | None):
    """(score, status): the score is 0 on a timeout or any error."""
    try:
        return _run_with_alarm(_SCORE_FNS[kind], response, gold, timeout_s), _Status.OK
    except _ItemTimeout:
        return 0.0, _Status.TIMEOUT
    except Exception:
        return 0.0, _Status.ERROR


def outcome_reward(response: str, gold: str, *, timeout_s: float | None = DEFAULT_TIMEOUT_S):
    r"""1.0 if Math-Verify finds the response's answer equal to `\boxed{gold}`, else 0.0.

    0.0 as well when the gold does not parse, on any error, and after timeout_s seconds (only
    on the main thread; see the module docstring). Use OutcomeScorer for batches.
    """
    _check_timeout(timeout_s)
    return _score_item(RewardKind.MATH, response, gold, timeout_s)[0]


def boxed_equal_reward(response: str, gold: str, *, timeout_s: float | None = DEFAULT_TIMEOUT_S):
    """1.0 if the last boxed answer of the response (or the response itself, if it has none)
    equals the gold after Hendrycks normalisation or by sympy, else 0.0 (BGQA, StrategyQA,
    TableBench). Errors and timeouts give 0.0."""
    _check_timeout(timeout_s)
    return _score_item(RewardKind.BOXED, response, gold, timeout_s)[0]


def cruxeval_reward(response: str, gold: str, *, timeout_s: float | None = DEFAULT_TIMEOUT_S):
    """1.0 if the last boxed answer of the response equals the gold as a Python literal
    (`ast.literal_eval`, raw strings when that fails), else 0.0."""
    _check_timeout(timeout_s)
    return _score_item(RewardKind.CRUXEVAL, response, gold, timeout_s)[0]


# --------------------------------------------------------------------------------------------
# Step rewards and the verifier reward (TANGO_SPEC §2.2, §3.3).


def step_rewards(num_steps: int, judgments: Sequence[int]) -> list[float] | None:
    """The step rewards of a response with `num_steps` (K) steps: judgment_k / K for each step,
    or None (no step rewards at all, no partial alignment) unless K > 0 and the verifier gave
    exactly K judgments (each +1 or -1, from `parse_verification`)."""
    if num_steps < 0:
        raise ValueError(f"num_steps ({num_steps}) must be >= 0.")
    if any(j not in (1, -1) for j in judgments):
        raise ValueError(f"judgments {tuple(judgments)} must each be +1 or -1.")
    if num_steps == 0 or len(judgments) != num_steps:
        return None
    return [j / num_steps for j in judgments]


def verifier_reward(
    verification: formats.Verification,
    *,
    solution_correct: bool,
    format_score: float,
    format_weight: float = VERIFIER_FORMAT_WEIGHT,
) -> float:
    """r_v = 1[verdict == solution_correct] + format_weight · format_score, in [0, 1.8]; exactly
    0 when the verdict is unparsable (then the format score does not count either).

    solution_correct: the rule-based outcome of the verified solution (r_out > 0.5).
    format_score: `formats.verifier_format_score` of the verifier output, in [0, 1].
    """
    if not 0.0 <= format_score <= 1.0:
        raise ValueError(
            f"format_score ({format_score}) must be in [0, 1] (formats.verifier_format_score)."
        )
    if verification.verdict is None:
        return 0.0
    return float(verification.verdict == int(solution_correct)) + format_weight * format_score


# --------------------------------------------------------------------------------------------
# Token positions of the step ends.


@functools.cache
def _byte_of_char() -> dict[str, int]:
    """The inverse of GPT-2's byte -> printable-character table used by byte-level BPE
    (Qwen2, Llama 3): printable Latin-1 bytes stand for themselves, the other 68 bytes for the
    characters 256, 257, ... in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    others = [b for b in range(256) if b not in printable]
    table = {chr(b): b for b in printable}
    table.update({chr(256 + i): b for i, b in enumerate(others)})
    return table


def _special_ids(tokenizer) -> set[int]:
    added = getattr(tokenizer, "added_tokens_decoder", {})
    return set(tokenizer.all_special_ids) | {i for i, t in added.items() if t.special}


def _byte_level_pieces(tokenizer, token_ids: list[int]) -> list[bytes]:
    """The bytes each token adds to the decoded text, read as byte-level BPE does: a token whose
    characters are all in the byte table stands for those bytes, any other token (an added token
    such as `<think>` with a space) for its own UTF-8; special tokens add nothing."""
    table, special = _byte_of_char(), _special_ids(tokenizer)
    pieces = []
    for tid, tok in zip(token_ids, tokenizer.convert_ids_to_tokens(token_ids)):
        if tok is None or tid in special:
            pieces.append(b"")
            continue
        try:
            pieces.append(bytes([table[c] for c in tok]))
        except KeyError:
            pieces.append(tok.encode("utf-8"))
    return pieces


def _char_ends_from_bytes(pieces: list[bytes]) -> tuple[list[int], str]:
    """Char ends by incremental UTF-8 decoding: a character counts once all its bytes are in, so
    it lands on the token that completes it; invalid bytes count as U+FFFD where they become
    invalid, and an incomplete tail as one U+FFFD on the last token (as a lossy decode does)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    chunks, ends, n = [], [], 0
    for piece in pieces:
        chunk = decoder.decode(piece)
        chunks.append(chunk)
        n += len(chunk)
        ends.append(n)
    tail = decoder.decode(b"", final=True)
    if tail and ends:
        chunks.append(tail)
        ends[-1] += len(tail)
    return ends, "".join(chunks)


def _windowed_char_ends(tokenizer, ids: list[int], text: str) -> list[int]:
    """Char ends for tokenizers that are not byte-level (SentencePiece, WordPiece): incremental
    detokenisation over short windows, as vLLM does, two small decodes per token. A window whose
    text ends in U+FFFD waits for the token that completes the character."""

    def decode(lo: int, hi: int) -> str:
        return tokenizer.decode(ids[lo:hi], skip_special_tokens=True)

    ends, emitted, prefix, read = [], 0, 0, 0
    for i in range(len(ids)):
        old, new = decode(prefix, read), decode(prefix, i + 1)
        if len(new) > len(old) and not new.endswith("\ufffd"):
            emitted += len(new) - len(old)
            prefix, read = read, i + 1
        ends.append(min(emitted, len(text)))
    if ends:
        ends[-1] = len(text)
    return ends


def token_char_ends(tokenizer, token_ids: Sequence[int]) -> list[int]:
    """For each generated token, the character offset just after it in
    `tokenizer.decode(token_ids, skip_special_tokens=True)`.

    [T] ints, non-decreasing, the last equal to the length of the decoded text. Special tokens
    add 0 characters. A character whose UTF-8 bytes are spread over several byte-level tokens
    counts at the token that completes it: text[:char_ends[i]] is exactly the part of the text
    that tokens 0..i have fixed.

    Byte-level BPE tokenizers (Qwen2/2.5, Llama 3, GPT-2) take an O(T) path: one
    convert_ids_to_tokens, one decode to check the result against, and an incremental UTF-8
    decode (about 5 ms for 4096 tokens). Other tokenizers, or a decode that does more than join
    bytes (clean-up of spaces), fall back to windowed decoding (two short decodes per token).
    """
    ids = [int(t) for t in token_ids]
    text = tokenizer.decode(ids, skip_special_tokens=True)
    ends, fast_text = _char_ends_from_bytes(_byte_level_pieces(tokenizer, ids))
    if fast_text == text:
        return ends
    return _windowed_char_ends(tokenizer, ids, text)


def step_end_token_indices(steps: Sequence[formats.Step], char_ends: Sequence[int]) -> list[int]:
    """For each step, the index of the generated token that completes its closing `</step>`:
    the first token whose char end is >= step.end.

    steps: `formats.split_steps` of the decoded response. char_ends: `token_char_ends` of the
    same token ids ([T], non-decreasing). A step end past the last char end (text and ids that
    do not belong together) is clamped to the last token, as the official code clamps to the
    last valid token. The official code instead rewards the token holding the character just
    after `</step>` in a re-tokenisation of the text (TANGO_SPEC §2.2, §10.4, §11).
    """
    if not len(char_ends):
        if steps:
            raise ValueError(f"{len(steps)} steps but no tokens: pass the response's char ends.")
        return []
    last = len(char_ends) - 1
    return [min(bisect.bisect_left(char_ends, step.end), last) for step in steps]


# --------------------------------------------------------------------------------------------
# OutcomeScorer: a pool of worker interpreters with a hard per-item time limit.


@dataclasses.dataclass(frozen=True, eq=False)
class ScoredBatch:
    """Scores of one `OutcomeScorer.score` call.

    scores: [N] float32 in {0, 1}. timed_out, errored: [N] bool; such items scored 0.
    seconds: wall time of the call.
    """

    scores: np.ndarray
    timed_out: np.ndarray
    errored: np.ndarray
    seconds: float

    @property
    def timeouts(self) -> int:
        return int(self.timed_out.sum())

    @property
    def errors(self) -> int:
        return int(self.errored.sum())

    def metrics(self, prefix: str) -> dict[str, float]:
        """E.g. prefix "generator/outcome": mean, timeouts, errors, seconds."""
        mean = float(self.scores.mean()) if len(self.scores) else 0.0
        return {
            f"{prefix}/mean": mean,
            f"{prefix}/timeouts": float(self.timeouts),
            f"{prefix}/errors": float(self.errors),
            f"{prefix}/seconds": self.seconds,
        }


@dataclasses.dataclass(frozen=True)
class ScorerStats:
    """Totals over a scorer's life: items scored, timeouts, errors, workers restarted."""

    items: int
    timeouts: int
    errors: int
    restarts: int


def _serve(fd: int) -> None:
    """A worker's loop: receive (index, kind, response, gold, timeout_s) on socket `fd`, send back
    (index, score, status); a None message or a closed socket ends it. Runs in a fresh
    interpreter started by OutcomeScorer, on its main thread, so the alarm works."""
    conn = Connection(fd)
    for kind in RewardKind:  # import everything and warm the caches before saying ready
        _score_item(kind, "\\boxed{1}", "1", None)
    conn.send(("ready", os.getpid()))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        index, kind, response, gold, timeout_s = message
        score, status = _score_item(RewardKind(kind), response, gold, timeout_s)
        conn.send((index, score, status.value))


_MAX_FAILED_STARTS = 3  # workers that die before ready, in a row, before score() gives up


@dataclasses.dataclass
class _Worker:
    proc: subprocess.Popen
    conn: Connection
    started: float
    ready: bool = False
    item: int | None = None
    deadline: float = 0.0


def _start_worker() -> _Worker:
    """Starts `python -c "..._serve(fd)"` with one end of a socket pair. A fresh interpreter
    (fork+exec in C, safe beside JAX's threads) imports only this module, not the caller's
    __main__ as multiprocessing's spawn would (for `python -m tango_jax.train`: all of JAX)."""
    parent, child = socket.socketpair()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    code = f"from tango_jax.tango.rewards import _serve; _serve({child.fileno()})"
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", code],
            pass_fds=(child.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            env=env,
        )
    finally:
        child.close()
    return _Worker(proc, Connection(parent.detach()), time.monotonic())


def _stop_worker(worker: _Worker, *, kill: bool) -> None:
    if not kill:
        try:
            worker.conn.send(None)
            worker.proc.wait(timeout=2.0)
        except (OSError, subprocess.TimeoutExpired):
            kill = True
    if kill:
        worker.proc.kill()
        worker.proc.wait()
    worker.conn.close()


def _stop_all(workers: list[_Worker]) -> None:
    for worker in workers:  # a busy or still-starting worker has nothing to finish
        _stop_worker(worker, kill=worker.item is not None or not worker.ready)
    workers.clear()


class OutcomeScorer:
    """Scores (response, gold) pairs in worker processes, each item under a time limit.

    with OutcomeScorer(num_workers=8) as scorer:
        batch = scorer.score(responses, golds, RewardKind.MATH)
        rewards = batch.scores                      # [N] float32
        metrics.update(batch.metrics("generator/outcome"))

    Each item gets `timeout_s` seconds under an alarm inside its worker (a timeout scores 0, is
    counted, and costs nothing more). A worker that has not answered `grace_s` later is stuck in
    C code: it is killed and replaced (about 1 s to start, while the other workers go on), and its
    item scores 0 as a timeout. An item that crashes its worker scores 0 as an error. Per-item
    overhead is one message each way over a local socket (tens of microseconds).

    One `score` call at a time (a lock serialises them). Workers start in the constructor and
    stop in `close` (or at exit of the `with` block).
    """

    def __init__(
        self,
        *,
        num_workers: int = 4,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        grace_s: float = 2.0,
        startup_timeout_s: float = 120.0,
    ):
        if num_workers < 1:
            raise ValueError(f"num_workers ({num_workers}) must be >= 1.")
        if min(timeout_s, grace_s, startup_timeout_s) <= 0:
            raise ValueError(
                f"timeout_s ({timeout_s}), grace_s ({grace_s}) and startup_timeout_s "
                f"({startup_timeout_s}) must be > 0 seconds."
            )
        self.timeout_s, self.grace_s, self.startup_timeout_s = timeout_s, grace_s, startup_timeout_s
        self._lock = threading.Lock()
        self._totals = collections.Counter()
        self._failed_starts = 0  # consecutive workers that died before saying ready
        self._workers: list[_Worker] = []
        # Stops the workers on close(), on garbage collection, or at interpreter exit.
        self._finalizer = weakref.finalize(self, _stop_all, self._workers)
        try:
            self._workers.extend(_start_worker() for _ in range(num_workers))
        except BaseException:
            self._finalizer()
            raise

    def __enter__(self) -> OutcomeScorer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def stats(self) -> ScorerStats:
        t = self._totals
        return ScorerStats(t["items"], t["timeouts"], t["errors"], t["restarts"])

    def close(self) -> None:
        with self._lock:
            self._finalizer()

    def score(
        self,
        responses: Sequence[str],
        golds: Sequence[str],
        kind: RewardKind = RewardKind.MATH,
        timeout_s: float | None = None,
    ) -> ScoredBatch:
        """Scores responses[i] against golds[i] with the `kind` checker: [N] results.

        timeout_s: this call's per-item limit (evaluation may allow more than training);
        default the scorer's `timeout_s`.
        """
        if len(responses) != len(golds):
            raise ValueError(
                f"responses ({len(responses)}) and golds ({len(golds)}) must have the same length."
            )
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        _check_timeout(timeout_s)
        n, start = len(responses), time.monotonic()
        scores = np.zeros(n, np.float32)
        status = np.full(n, _Status.OK.value, dtype=object)
        with self._lock:
            if not self._workers:
                raise RuntimeError("OutcomeScorer.score called after close(); make a new scorer.")
            for worker in list(self._workers):  # still busy from a call that was interrupted
                if worker.item is not None:
                    self._replace(worker, kill=True)
            todo, left = collections.deque(range(n)), n
            while left:
                self._dispatch(todo, responses, golds, kind, timeout_s)
                for index, score, item_status in self._collect():
                    scores[index], status[index] = score, item_status
                    left -= 1
        timed_out, errored = status == _Status.TIMEOUT.value, status == _Status.ERROR.value
        self._totals.update(items=n, timeouts=int(timed_out.sum()), errors=int(errored.sum()))
        return ScoredBatch(scores, timed_out, errored, time.monotonic() - start)

    def _dispatch(self, todo: collections.deque, responses, golds, kind, timeout_s) -> None:
        for worker in self._workers:
            if worker.ready and worker.item is None and todo:
                index = todo.popleft()
                message = (index, kind.value, responses[index], golds[index], timeout_s)
                try:
                    worker.conn.send(message)
                except OSError:  # it died while idle: retry the item on another worker
                    todo.appendleft(index)
                    self._replace(worker, kill=True)
                    continue
                worker.item = index
                worker.deadline = time.monotonic() + timeout_s + self.grace_s

    def _collect(self) -> list[tuple[int, float, str]]:
        """Waits for the next message or deadline; returns the items finished meanwhile."""
        now = time.monotonic()
        deadlines = [w.deadline for w in self._workers if w.item is not None]
        deadlines += [w.started + self.startup_timeout_s for w in self._workers if not w.ready]
        timeout = max(0.0, min(deadlines) - now) if deadlines else None
        by_conn = {w.conn: w for w in self._workers}
        done = []
        for conn in wait(list(by_conn), timeout=timeout):
            worker = by_conn[conn]
            try:
                message = conn.recv()
            except (EOFError, OSError):  # the worker died (crash, out of memory, killed)
                if not worker.ready:
                    self._failed_starts += 1
                    if self._failed_starts >= _MAX_FAILED_STARTS:
                        raise RuntimeError(self._startup_failure(worker)) from None
                if worker.item is not None:
                    done.append((worker.item, 0.0, _Status.ERROR.value))
                self._replace(worker, kill=True)
                continue
            if message[0] == "ready":
                worker.ready = True
                self._failed_starts = 0
            else:
                done.append(message)
                worker.item = None
        now = time.monotonic()
        for worker in list(self._workers):
            if worker.item is not None and now > worker.deadline:
                done.append((worker.item, 0.0, _Status.TIMEOUT.value))
                self._replace(worker, kill=True)
            elif not worker.ready and now > worker.started + self.startup_timeout_s:
                raise RuntimeError(self._startup_failure(worker))
        return done

    def _replace(self, worker: _Worker, *, kill: bool) -> None:
        worker.item = None
        _stop_worker(worker, kill=kill)
        self._workers[self._workers.index(worker)] = _start_worker()
        self._totals.update(restarts=1)

    def _startup_failure(self, worker: _Worker) -> str:
        return (
            f"OutcomeScorer workers fail to start: worker pid {worker.proc.pid} exited with code "
            f"{worker.proc.poll()} (None: still running after startup_timeout_s = "
            f"{self.startup_timeout_s} s), {self._failed_starts} deaths in a row. Its error is "
            f'on stderr above; check that `{sys.executable} -c "import tango_jax.tango.rewards, '
            'math_verify"` works, or raise startup_timeout_s on a loaded machine.'
        )
