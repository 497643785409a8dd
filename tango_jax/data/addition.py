"""Small additions for a real instruct model: the problems and their reward, in one place.

    problems = addition_problems(TRAIN)                   # list[Problem], a fixed order
    write_jsonl(problems, "train.jsonl")                  # {"question", "answer", "id"} lines
    last_integer_reward("4 + 3 = 7", "7", question)       # 1.0

The task of configs/smollm2_addition.py and of its TRL twin (scripts/bench/compare_trl/trl_grpo.py):
"What is a + b? Answer with just the number." as the user turn of SmolLM2-135M-Instruct's chat
template, graded on the last integer of the reply. Both trainers import `last_integer_reward`
from here, so the reward they optimise cannot drift apart. Chosen by measurement
(docs/real_model.md): zero-shot at T = 1 the instruct
model gets it right often enough to learn from, not so often that there is nothing to learn,
and its replies are short.

The shipped problem files and prompt template (tango_jax/assets/addition/) are this module's
output:
`python -m tango_jax.data.addition` writes them again, byte for byte.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from tango_jax.data.datasets import Problem
from tango_jax.data.synthetic import Draws
from tango_jax.text import formats

QUESTION = "What is {a} + {b}? Answer with just the number."
ASSETS = Path(__file__).resolve().parents[1] / "assets" / "addition"
_INTEGER = re.compile(r"-?\d+")


@dataclasses.dataclass(frozen=True)
class Operands:
    """a in [a_lo, a_hi], b in [b_lo, b_hi], inclusive; every pair once."""

    a_lo: int
    a_hi: int
    b_lo: int
    b_hi: int

    def pairs(self) -> list[tuple[int, int]]:
        return [
            (a, b) for a in range(self.a_lo, self.a_hi + 1) for b in range(self.b_lo, self.b_hi + 1)
        ]


# One digit plus one digit, 2..9 each: 64 problems. Zero-shot at T = 1 the model is right on
# 0.24 of its replies here, and on 0.04 when a has two digits (10..99), too few groups with any
# signal (docs/real_model.md). Held out: the 16 questions
# with a = 3 or 7; training has the other 48. The questions are held out, not the facts: 7 + 4
# is held out, 4 + 7 is trained on.
TRAIN_AND_EVAL = Operands(2, 9, 2, 9)


def is_held_out(a: int, b: int) -> bool:
    return a in (3, 7)


def addition_problems(operands: Operands, split: str) -> list[Problem]:
    """The problems of `split` ("train" | "eval"), in (a, b) order."""
    if split not in ("train", "eval"):
        raise ValueError(f"split ({split!r}) must be 'train' or 'eval'.")
    held = split == "eval"
    return [
        Problem(QUESTION.format(a=a, b=b), str(a + b), "addition", f"{a}+{b}")
        for a, b in operands.pairs()
        if is_held_out(a, b) == held
    ]


def last_integer(text: str) -> str | None:
    """The last integer written in `text` (thousands commas removed), or None."""
    numbers = _INTEGER.findall(text.replace(",", ""))
    return numbers[-1] if numbers else None


def last_integer_reward(completion: str, answer: str, question: str) -> float:
    """1.0 when the last integer of the reply is the gold answer, else 0.0 (`data.reward`)."""
    del question  # the gold answer says all
    return float(last_integer(completion) == answer.strip())


# Replies of the shapes the instruct model writes (its zero-shot replies and what GRPO makes of
# them), for the verifier's format SFT; every line states the sum, so every step's truth is the
# reply's.
REPLY_SHAPES = (
    "{s}",
    "{a} + {b} = {s}",
    "The answer is {s}.",
    "{a} + {b} = {s}\nThe answer is {s}.",
)
# Two more of the instruct model's shapes at T = 0.7, for the restating transcripts: a sentence,
# and working before the answer (a line without the sum, judged by the reply's answer).
RESTATED_EXTRA_SHAPES = (
    "{a} + {b} equals {s}.",
    "To solve this, I add {a} and {b}.\n{a} + {b} = {s}\nSo, the answer is {s}.",
)
WRONG_BY = (-2, -1, 1, 2)


def _analysis(a: int, b: int, s: int, restate: bool) -> str:
    """One line's analysis: the sum recomputed ("7 + 5 = 12."), or with `restate` the reply's
    answer read back and compared with it ("The reply says 11. 7 + 5 = 12, not 11."), so that
    the verdict after it is a comparison written out rather than left to one token."""
    if not restate:
        return f"{a} + {b} = {a + b}."
    verdict = "as it says" if s == a + b else f"not {s}"
    return f"The reply says {s}. {a} + {b} = {a + b}, {verdict}."


def verifier_sft_records(
    problems: Sequence[Problem], restate: bool = False
) -> list[dict[str, str]]:
    """The verifier's format SFT set (`sft.verifier.data_path` records {"question", "solution",
    "response"}): each problem's reply in every `REPLY_SHAPES` (and with `restate` every
    `RESTATED_EXTRA_SHAPES`), once with the right sum and once with a wrong one (off by one of
    `WRONG_BY`, drawn per problem and shape); the solution as the verifier sees line steps
    (`formats.tagged_solution`), the response the Tango verification the smollm2_arith format
    SFT writes: one step per line, its analysis `_analysis` ("Step 1 Analysis: 7 + 5 = 12.",
    or with `restate` "Step 1 Analysis: The reply says 11. 7 + 5 = 12, not 11."), its label
    the reply's truth, the verdict the outcome."""
    shapes = REPLY_SHAPES + (RESTATED_EXTRA_SHAPES if restate else ())
    records = []
    for p in problems:
        a, b = (int(x) for x in p.id.split("+"))
        for k, shape in enumerate(shapes):
            wrong = a + b + Draws("addition-sft", p.id, k).choice(WRONG_BY)
            for s in (a + b, wrong):
                reply = shape.format(a=a, b=b, s=s)
                lines = formats.split_lines(reply)
                label = formats.CORRECT if s == a + b else formats.INCORRECT
                analysis = _analysis(a, b, s, restate)
                analyses = [f"Step {i + 1} Analysis: {analysis}" for i in range(len(lines))]
                judgments = [1 if label == formats.CORRECT else -1] * len(lines)
                records.append(
                    {
                        "question": p.question,
                        "solution": formats.tagged_solution(reply, formats.StepSplit.LINES),
                        "response": formats.render_verification(judgments, label, analyses),
                    }
                )
    return records


def write_jsonl(problems: Sequence[Problem], path: Path) -> None:
    lines = [json.dumps({"question": p.question, "answer": p.answer, "id": p.id}) for p in problems]
    path.write_text("\n".join(lines) + "\n")


def main() -> int:
    ASSETS.mkdir(parents=True, exist_ok=True)
    # The generator prompt is the bare question (the chat template wraps it).
    (ASSETS / "generator_prompt.json").write_text(json.dumps({"template": "{question}"}) + "\n")
    for split in ("train", "eval"):
        problems = addition_problems(TRAIN_AND_EVAL, split)
        write_jsonl(problems, ASSETS / f"{split}.jsonl")
        print(f"{ASSETS / split}.jsonl: {len(problems)} problems")
    train = addition_problems(TRAIN_AND_EVAL, "train")
    for name, restate in (("verifier_sft", False), ("verifier_sft_restated", True)):
        records = verifier_sft_records(train, restate=restate)
        lines = [json.dumps(r) for r in records]
        (ASSETS / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
        print(f"{ASSETS / name}.jsonl: {len(records)} records (training questions only)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
