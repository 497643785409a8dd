"""The verifier's step scores, read by teacher forcing (PyTorch and transformers, independent
of tango_jax's model code): P(INCORRECT) at every step judgment of the ideal transcript (every
earlier judgment CORRECT) of miniature-ProcessBench solutions, and how well those numbers order
the steps (`process_bench.step_ranking`: AUROC of the first error against the other steps,
first error ranked first). A verifier's greedy step F1 moves with its threshold alone; these
numbers move only when its judgments single out the wrong step better.

Used by `python -m tango_jax.train`'s final lines on the generated tasks (arithmetic, last
letters), tango_jax/study/arith.py's ranking table and tango_jax/study/letters.py. Needs a
tokenizer with single tokens for '{', CORRECT and INCORRECT (the project's tiny one).
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

import numpy as np

from tango_jax.data.task import Task
from tango_jax.data.tasks import task_of
from tango_jax.text import formats, process_bench, templates


def ideal_transcript(solution, task: Task) -> tuple[str, list[str]]:
    """The all-CORRECT transcript of `solution` and its per-step analyses, each step analysed
    as its task's verifier SFT writes it (`Task.step_analyses`)."""
    analyses = task.step_analyses(solution)
    return formats.render_verification([1] * len(analyses), 1, analyses), analyses


def bench(data, n: int) -> tuple[list, Task]:
    """(the first `n` miniature-ProcessBench solutions of a run's task, the task for `probe`):
    the items its evaluation verifies, first ones first.

    data: the run's `DataConfig`; raises ValueError for a task without step truth."""
    task = task_of(data)
    return task.process_bench(n, seed=data.seed), task


@dataclasses.dataclass
class Probe:
    """What `probe` read off a verifier, one entry per solution."""

    p_incorrect: list[list[float]]  # P(INCORRECT) at each step judgment
    first_error: list[int]  # 0-based first wrong step, -1 for a correct solution
    verdict: list[float]  # P(INCORRECT) of the verdict after all-CORRECT judgments
    features: list[list[list[np.ndarray]]]  # [solution][step][layer] hidden state

    def ranking(self) -> process_bench.StepRanking:
        return process_bench.step_ranking(self.p_incorrect, self.first_error)


def load(checkpoint: str):
    """(model, tokenizer, ids of '{', CORRECT, INCORRECT) of an HF verifier checkpoint."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one "Loading weights" bar per checkpoint otherwise
    tok = AutoTokenizer.from_pretrained(checkpoint)
    ids = tuple(tok.convert_tokens_to_ids(w) for w in ("{", "CORRECT", "INCORRECT"))
    if tok.unk_token_id in ids or ids[1] == ids[2]:  # refused before the model is loaded
        raise ValueError(
            f"{checkpoint}: this probe needs single tokens for '{{', CORRECT and INCORRECT "
            "(the project's tiny tokenizer); this tokenizer splits them."
        )
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    return model, tok, ids


def probe(checkpoint: str, solutions, task: Task, *, style, features: bool = False) -> Probe:
    """Teacher-force the ideal transcript of every solution (`ideal_transcript`) through the
    verifier and read P(INCORRECT) at each step judgment and at the verdict (and, with
    `features`, each layer's hidden state at the judgments)."""
    import torch

    model, tok, (brace, correct_id, incorrect_id) = load(checkpoint)
    out = Probe([], [], [], [])
    with _one_torch_thread():
        for s in solutions:
            prompt = templates.render_verifier_prompt(s.problem.question, s.text, style=style)
            text, _ = ideal_transcript(s, task)
            a = tok(prompt, add_special_tokens=False)["input_ids"]
            b = tok(text, add_special_tokens=False)["input_ids"]
            with torch.no_grad():
                res = model(torch.tensor([a + b]), output_hidden_states=features)
            logp = res.logits[0].log_softmax(-1)
            braces = [len(a) + i for i, t in enumerate(b) if t == brace]
            judged, final = braces[: len(s.steps)], braces[-1]
            p = (logp[:, incorrect_id] - logp[:, correct_id]).sigmoid()
            out.p_incorrect.append([p[pos].item() for pos in judged])
            out.first_error.append(-1 if s.first_error is None else s.first_error)
            out.verdict.append(p[final].item())
            if features:
                hidden = res.hidden_states
                out.features.append([[h[0, pos].numpy() for h in hidden] for pos in judged])
    return out


@contextlib.contextmanager
def _one_torch_thread():
    """PyTorch with one intra-op thread, restored afterwards. The probe's model is tiny (each op
    takes microseconds), so a pool of one thread per core only adds waiting, and on cores that
    are busy (a training run, the test suite) the waiting dominates: 128 solutions took 18.6 s
    with 2 threads on a loaded 2-core machine and 1.0 s with one."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def start_verifier(run_dir: str | Path, model_path: str) -> Path | None:
    """The verifier checkpoint a run began RL from: its own SFT (run_dir/sft/verifier), else
    the configured checkpoint, else its random init (run_dir/initial/verifier); None if none
    of them is there."""
    run_dir = Path(run_dir)
    for path in (run_dir / "sft" / "verifier", model_path, run_dir / "initial" / "verifier"):
        if path and (Path(path) / "config.json").exists():
            return Path(path)
    return None


def ranking_lines(start: Path, final: Path, solutions, task: Task, *, style) -> list[str]:
    """One line per checkpoint (before / after RL): `step_ranking` of its step scores."""
    chance = np.mean([1 / len(s.steps) for s in solutions if s.first_error is not None])
    lines = []
    for when, path in (("before RL", start), ("after RL", final)):
        r = probe(str(path), solutions, task, style=style).ranking()
        lines.append(
            f"{when}: AUROC of the first error's P(INCORRECT) against the other steps "
            f"{r.auroc:.3f} (chance 0.5), first error ranked first {r.top1:.3f} (chance "
            f"{chance:.3f}) [{path}]"
        )
    return lines
