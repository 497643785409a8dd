"""Builds the tiny tokenizer shipped in tango_jax/assets/tiny_tokenizer from the tiny task's text.

    .venv/bin/python scripts/assets/build_tiny_tokenizer.py     # rewrite the shipped tokenizer
    .venv/bin/python scripts/assets/build_tiny_tokenizer.py --out DIR  # elsewhere, to compare

The corpus is what the tiny models read and write, in proportion: for `--examples` synthetic
problems (tango_jax.data.synthetic, default difficulty), the generator prompt (training and
evaluation variants) in both prompt styles (full and compact, templates.PromptStyle), the reference
solution and a solution with a slip, the verifier prompt for each in both styles, and their
outcome-only verification transcripts. The BPE merges therefore go to the
template's frequent words and to the task's tags and phrases ("<step>", "\\boxed{", " then ",
"multiply by"), which is where the tokens are spent. Digits stay single tokens (the
pre-tokenizer splits them before BPE sees them).

Deterministic: the corpus is a pure function of the arguments and the BPE trainer breaks ties
the same way every time, so two runs write byte-identical files (`--check` verifies that by
building twice). It prints the token counts of a typical example of each kind.
"""

from __future__ import annotations

import argparse
import filecmp
import statistics
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tango_jax.data import synthetic, synthetic_labels
from tango_jax.models.presets import TINY_VOCAB_SIZE
from tango_jax.models.tokenizer import TINY_TOKENIZER_DIR, train_tiny_tokenizer
from tango_jax.text import templates

SEED = 12345  # corpus stream, apart from every training / evaluation seed


def corpus(num_examples: int, config: synthetic.ArithConfig) -> Iterator[str]:
    """The texts of `num_examples` synthetic problems, in the formats the models see."""
    for i in range(num_examples):
        problem = synthetic.problem_at(config, i, seed=SEED, purpose="tokenizer")
        for style in templates.PromptStyle:
            yield templates.render_generator_prompt(problem.question, style=style)
            yield templates.render_generator_prompt(
                problem.question, variant=templates.Variant.EVAL, style=style
            )
        slipped = synthetic.slipped_solution(problem, seed=SEED)
        for solution in (synthetic.reference_solution(problem), slipped):
            yield solution.text
            for style in templates.PromptStyle:
                yield templates.render_verifier_prompt(problem.question, solution.text, style=style)
            yield synthetic_labels.verification_transcript(solution)


def token_counts(tokenizer, num_examples: int, config: synthetic.ArithConfig) -> dict[str, float]:
    """Mean token counts per kind of text over held-out problems (half with a slip)."""
    kinds: dict[str, list[int]] = {}

    def count(kind: str, text: str) -> None:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        kinds.setdefault(kind, []).append(len(ids))

    for i, problem in enumerate(synthetic.held_out_problems(config, num_examples)):
        slip = i % 2 == 1
        solution = (
            synthetic.slipped_solution(problem, seed=0)
            if slip
            else synthetic.reference_solution(problem)
        )
        count("question", problem.question)
        for style in templates.PromptStyle:
            prompt = templates.render_generator_prompt(problem.question, style=style)
            count(f"generator prompt ({style.value})", prompt)
        count("generator response", solution.text)
        for style in templates.PromptStyle:
            prompt = templates.render_verifier_prompt(problem.question, solution.text, style=style)
            count(f"verifier prompt ({style.value})", prompt)
        count("verifier response", synthetic_labels.verification_transcript(solution))
    return {kind: statistics.mean(values) for kind, values in kinds.items()}


def build(out: Path, num_examples: int) -> None:
    config = synthetic.ArithConfig()
    tokenizer = train_tiny_tokenizer(corpus(num_examples, config), vocab_size=TINY_VOCAB_SIZE)
    if len(tokenizer) != TINY_VOCAB_SIZE:
        sys.exit(f"the tokenizer has {len(tokenizer)} entries, expected {TINY_VOCAB_SIZE}.")
    tokenizer.save_pretrained(str(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=TINY_TOKENIZER_DIR)
    parser.add_argument("--examples", type=int, default=2000, help="synthetic problems")
    parser.add_argument("--check", action="store_true", help="build twice, compare the files")
    args = parser.parse_args()
    build(args.out, args.examples)
    if args.check:
        with tempfile.TemporaryDirectory() as again:
            build(Path(again), args.examples)
            names = sorted(p.name for p in args.out.iterdir())
            _, mismatch, errors = filecmp.cmpfiles(args.out, again, names, shallow=False)
            if mismatch or errors:
                sys.exit(f"not deterministic: {mismatch + errors} differ between two builds.")
            print(f"deterministic: {names} identical over two builds.")
    from tango_jax.models.tokenizer import load_tokenizer

    counts = token_counts(load_tokenizer(args.out), 200, synthetic.ArithConfig())
    print(f"wrote {args.out}; mean tokens over 200 held-out problems (half with a slip):")
    for kind, value in counts.items():
        print(f"  {kind:28s} {value:7.1f}")


if __name__ == "__main__":
    main()
