r"""Last-letter concatenation, the paper's small synthetic task (§4.3, App. D.2), Tango formats.

A problem is a list of random words; the answer is the string of their last letters. The
reference solution has one `<step>` per word: the word, its last letter, and the letters so far:

    Last letters of: kaz qup hjr

    <think>
    <step>kaz: z, z</step>
    <step>qup: p, zp</step>
    <step>hjr: r, zpr</step>
    </think>
    <answer>\boxed{zpr}</answer>

The reward is exact string equality of the boxed answer (`answer_check.RewardKind.EXACT`; a
symbolic checker would read "zpr" as a product and accept "rpz"). Step truth is known, so the
first wrong step of any solution (`first_error`), the miniature ProcessBench
(`process_bench`) and the oracle step labels of `oracle_labels.py` work as on arithmetic.

Alphabet. The default 14 letters are the largest set in which the project's 512-token
tokenizer (tango_jax/assets/tiny_tokenizer) merges no two letters, so every letter after a
word's first is its own token and a word's last letter is never hidden inside a merged token
(tests/data/test_last_letter.py checks this on the real tokenizer).

Lengths. The paper trains with 2-10 words and tests on 2-12. `LetterConfig` scales this for a
2-layer model on a CPU: the word counts of RL (`min_words`..`max_words`) form the
in-distribution bucket, `max_words + 1`..`unseen_max_words` the unseen-length bucket (never
trained on), and the generator SFT sees only `sft_max_words` words at most (the paper's short
format SFT on 2-4 words).

Splits and determinism are those of `synthetic.py`: a problem is held out when a hash of its
question says so (`eval_fraction`), and every random choice is BLAKE2b of (purpose, seed,
index, attempt), so problem i of a stream is the same everywhere.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Sequence

from tango_jax.data.datasets import Problem
from tango_jax.data.synthetic import MAX_ATTEMPTS, Draws, SyntheticStream
from tango_jax.text import formats

SOURCE = "synthetic-last-letter"
QUESTION_PREFIX = "Last letters of: "
# A step as the solutions write it: "word: letter, letters so far".
STEP = re.compile(r"([a-z]+): ([a-z]), ([a-z]+)")


@dataclasses.dataclass(frozen=True)
class LetterConfig:
    """Sizes of the last-letter problems and the mix of their SFT data (see the module doc)."""

    min_words: int = 2  # RL prompts: word count uniform in [min_words, max_words]
    max_words: int = 6
    unseen_max_words: int = 8  # held-out only: max_words + 1 .. unseen_max_words (unseen bucket)
    sft_max_words: int = 3  # generator and verifier SFT: min_words .. sft_max_words words
    min_word_len: int = 2  # letters per word, uniform in [min_word_len, max_word_len]
    max_word_len: int = 4
    alphabet: str = "afghjkpqruvxyz"  # no two of these merge in the tiny tokenizer
    eval_fraction: float = 0.1  # share of all problems (by question hash) that is held out
    slip_fraction: float = 0.2  # generator SFT: share of solutions with one wrong letter
    verifier_correct_fraction: float = 0.5  # verifier SFT: share of correct solutions
    verifier_one_word: float = 0.5  # verifier SFT: share of one-word problems (labelled step)

    def __post_init__(self):
        checks = [
            (1 <= self.min_words <= self.max_words, "1 <= min_words <= max_words"),
            (self.unseen_max_words >= self.max_words, "unseen_max_words >= max_words"),
            (self.min_words <= self.sft_max_words, "min_words <= sft_max_words"),
            (2 <= self.min_word_len <= self.max_word_len, "2 <= min_word_len <= max_word_len"),
            (
                len(self.alphabet) >= 2
                and len(set(self.alphabet)) == len(self.alphabet)
                and set(self.alphabet) <= set("abcdefghijklmnopqrstuvwxyz"),
                "an alphabet of >= 2 distinct lower-case letters",
            ),
            (0.0 < self.eval_fraction < 1.0, "0 < eval_fraction < 1"),
            (0.0 <= self.slip_fraction <= 1.0, "0 <= slip_fraction <= 1"),
            (0.0 <= self.verifier_correct_fraction <= 1.0, "0 <= verifier_correct_fraction <= 1"),
            (0.0 <= self.verifier_one_word <= 1.0, "0 <= verifier_one_word <= 1"),
        ]
        for ok, rule in checks:
            if not ok:
                raise ValueError(f"LetterConfig needs {rule}; got {self}.")

    def bucket(self, num_words: int) -> str:
        """'in' for the RL range of word counts, 'unseen' beyond it (the length buckets)."""
        return "in" if num_words <= self.max_words else "unseen"


@dataclasses.dataclass(frozen=True)
class LetterProblem:
    words: tuple[str, ...]

    @property
    def question(self) -> str:
        return QUESTION_PREFIX + " ".join(self.words)

    @property
    def letters(self) -> str:
        return "".join(w[-1] for w in self.words)

    @property
    def answer(self) -> str:
        return self.letters

    @property
    def id(self) -> str:
        return _digest(self.question).hex()[:16]

    def to_problem(self) -> Problem:
        return Problem(self.question, self.answer, SOURCE, self.id)


def _digest(question: str) -> bytes:
    return hashlib.blake2b(question.encode(), digest_size=16, person=b"tango-letters").digest()


def is_held_out(question: str, config: LetterConfig) -> bool:
    """Whether a question belongs to the held-out split: a hash of its text alone decides."""
    return int.from_bytes(_digest(question)[:8], "little") < config.eval_fraction * 2.0**64


def parse_question(question: str) -> LetterProblem | None:
    """The problem a question text describes, or None for text that is not one."""
    if not question.startswith(QUESTION_PREFIX):
        return None
    words = tuple(question[len(QUESTION_PREFIX) :].split(" "))
    if not words or not all(re.fullmatch(r"[a-z]{2,}", w) for w in words):
        return None
    return LetterProblem(words)


def _draw_problem(config: LetterConfig, draws: Draws, lo: int, hi: int) -> LetterProblem:
    num_words = lo + draws.below(hi - lo + 1)
    words = []
    for _ in range(num_words):
        n = config.min_word_len + draws.below(config.max_word_len - config.min_word_len + 1)
        words.append("".join(draws.choice(config.alphabet) for _ in range(n)))
    return LetterProblem(tuple(words))


def problem_at(
    config: LetterConfig,
    index: int,
    *,
    seed: int,
    held_out: bool = False,
    purpose: str = "rl",
    words: tuple[int, int] | None = None,
) -> LetterProblem:
    """Problem `index` of the stream (purpose, seed) of one split, with a word count uniform in
    `words` (default: the RL range). Pure: the same arguments give the same problem."""
    lo, hi = words or (config.min_words, config.max_words)
    for attempt in range(MAX_ATTEMPTS):
        problem = _draw_problem(config, Draws(purpose, seed, index, attempt), lo, hi)
        if is_held_out(problem.question, config) == held_out:
            return problem
    raise ValueError(
        f"no problem of the {'held-out' if held_out else 'training'} split found in "
        f"{MAX_ATTEMPTS} draws for {config}; change eval_fraction."
    )


def held_out_problems(config: LetterConfig, n: int, *, seed: int = 0) -> list[LetterProblem]:
    """The first `n` distinct held-out problems of stream ("eval", seed), word counts uniform
    over min_words .. unseen_max_words: both length buckets (`LetterConfig.bucket`)."""
    seen: dict[str, LetterProblem] = {}
    index, span = 0, (config.min_words, config.unseen_max_words)
    while len(seen) < n:
        if index >= 50 * n + MAX_ATTEMPTS:
            raise ValueError(
                f"only {len(seen)} distinct held-out problems found for n = {n} with {config}; "
                "ask for fewer, or make the words longer or more numerous."
            )
        problem = problem_at(config, index, seed=seed, held_out=True, purpose="eval", words=span)
        seen.setdefault(problem.question, problem)
        index += 1
    return list(seen.values())


class LetterStream(SyntheticStream):
    """The endless training stream of last-letter problems (`SyntheticStream`'s interface:
    batch b holds problems b·B ... (b+1)·B - 1 of stream ("rl", seed); resumable by position)."""

    def batch_at(self, index: int) -> list[Problem]:
        seed, size = self.position.seed, self.batch_size
        return [
            problem_at(self.config, i, seed=seed).to_problem()
            for i in range(index * size, (index + 1) * size)
        ]


# --------------------------------------------------------------------------------------------
# Solutions and step truth.


@dataclasses.dataclass(frozen=True)
class LetterSolution:
    """A step-by-step solution: the letter written for each word. A wrong letter at step k
    (`first_error`) is carried on correctly by later steps, so the answer is wrong too."""

    problem: LetterProblem
    letters: str
    first_error: int | None = None

    @property
    def correct(self) -> bool:
        return self.letters == self.problem.answer

    @property
    def steps(self) -> list[str]:
        return [
            f"{w}: {c}, {self.letters[: k + 1]}"
            for k, (w, c) in enumerate(zip(self.problem.words, self.letters))
        ]

    @property
    def text(self) -> str:
        return formats.render_generator_response(self.steps, self.letters)


def reference_solution(problem: LetterProblem) -> LetterSolution:
    return LetterSolution(problem, problem.letters)


def slipped_solution(problem: LetterProblem, *, seed: int, alphabet: str) -> LetterSolution:
    """One wrong letter at a random step: the word's second-to-last letter when it differs from
    the last (the natural slip), else another letter of the alphabet. A function of (seed,
    question)."""
    draws = Draws("letter-slip", seed, problem.question)
    k = draws.below(len(problem.words))
    word, right = problem.words[k], problem.letters[k]
    wrong = word[-2] if word[-2] != right else draws.choice([c for c in alphabet if c != right])
    letters = problem.letters[:k] + wrong + problem.letters[k + 1 :]
    return LetterSolution(problem, letters, first_error=k)


def first_error(problem: LetterProblem, steps: Sequence[str]) -> int:
    """The 0-based index of the first wrong step of a solution written as `steps`, or -1 when
    all K steps are right and there are exactly K of them.

    Step k is right when it reads "word: c, s" with the problem's k-th word, c its last letter,
    and s the previous step's s (as written; "" before step 0) followed by c. As in
    ProcessBench, a step that carries an earlier mistake forward correctly is not an error. A
    missing step is an error at its position; an extra step after K right ones is an error too.
    """
    so_far = ""
    for k, text in enumerate(steps):
        m = STEP.fullmatch(text.strip())
        if k >= len(problem.words) or m is None:
            return k
        word, letter, written = m.groups()
        if word != problem.words[k] or letter != word[-1] or written != so_far + letter:
            return k
        so_far = written
    return -1 if len(steps) == len(problem.words) else len(steps)
