"""What a last-letter verifier checkpoint says about right and wrong solutions, by word count.

    python scripts/study/probe_letters_verifier.py tango_jax/assets/tiny_letters_sft/verifier
    python scripts/study/probe_letters_verifier.py runs/x/phase3/sft/verifier --words 1 5 --n 30

For each word count, `--n` held-out problems (alternately the reference solution and one with
a wrong letter at a random step, as the miniature ProcessBench draws them) are verified by the
checkpoint, greedy, with PyTorch/transformers (independent of tango_jax's model code). Prints
the verdicts per kind of solution, the step judgments' accuracy against the true first wrong
step, and with `--show K` the first K transcripts. docs/last_letter.md reports what it showed.
"""

from __future__ import annotations

import argparse
import collections
import sys

from tango_jax.data.last_letter import (
    LetterConfig,
    first_error,
    problem_at,
    reference_solution,
    slipped_solution,
)
from tango_jax.run.oracle_feedback import oracle_judgments
from tango_jax.text import formats, templates


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("checkpoint")
    p.add_argument("--words", type=int, nargs="+", default=[1, 5])
    p.add_argument("--n", type=int, default=30)
    p.add_argument("--max-tokens", type=int, default=224)
    p.add_argument("--show", type=int, default=0)
    args = p.parse_args(argv)
    import transformers  # only here: the script's one heavy import

    tok = transformers.AutoTokenizer.from_pretrained(args.checkpoint)
    model = transformers.AutoModelForCausalLM.from_pretrained(args.checkpoint).eval()
    config = LetterConfig(min_words=1, max_words=max(args.words), sft_max_words=max(args.words))
    shown = 0
    for k in args.words:
        verdicts, steps_right, steps = collections.Counter(), 0, 0
        for i in range(args.n):
            problem = problem_at(config, i, seed=0, held_out=True, purpose="probe", words=(k, k))
            solution = (
                reference_solution(problem)
                if i % 2 == 0
                else slipped_solution(problem, seed=0, alphabet=config.alphabet)
            )
            prompt = templates.render_verifier_prompt(
                problem.question, solution.text, style=templates.PromptStyle.COMPACT
            )
            ids = tok(prompt, return_tensors="pt").input_ids
            out = model.generate(ids, max_new_tokens=args.max_tokens, do_sample=False)
            text = tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
            v = formats.parse_verification(text)
            kind = "right" if solution.correct else "wrong"
            said = {1: "CORRECT", 0: "INCORRECT"}.get(v.verdict, "unreadable")
            verdicts[f"{kind} -> {said}"] += 1
            wrong_at = first_error(problem, [s.text for s in formats.split_steps(solution.text)])
            truth = oracle_judgments(wrong_at, k)
            steps += k
            steps_right += sum(a == b for a, b in zip(v.step_judgments, truth))
            if shown < args.show:
                shown += 1
                print(f"== {problem.question} ({kind}, first error {wrong_at})\n{text}\n")
        print(
            f"{k} words: verdicts {dict(sorted(verdicts.items()))}; "
            f"step judgments right {steps_right}/{steps} ({steps_right / steps:.2f})",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
