"""Reproduces the SFT checkpoints that configs/tiny_letters.py starts RL from.

    python scripts/assets/make_letters_sft.py   # seed 0, into tango_jax/assets/tiny_letters_sft/
    python scripts/assets/make_letters_sft.py --seed 1 --out runs/letters_sft_s1/out

Four runs of the train command, SFT only (`schedule.total_steps=0`):

1. the generator's format SFT from random init (`configs/tiny_letters.py:grpo,scratch`: 500
   steps x 32 on 2-3 words, cosine lr 3e-3, a fifth of the solutions with one wrong letter);
2. the generator's length SFT from phase 1 (`--length-steps` steps x 32 on 2-6 words, the RL
   range; cosine lr 1e-3). A 2-layer model does not carry the format beyond the lengths it
   was trained on: after phase 1 alone it stops after 2-3 words (sampled accuracy 0.05 on 2-6
   words, docs/last_letter.md), and from random init on 2-6 words it had not learned to copy
   the words after 500 steps (greedy 0.004);
3. the verifier's check of one step, from the phase-2 generator (`tango,scratch` with the
   generator's SFT off; `--one-word-steps` steps x 32 of one-word problems, lr 3e-3, each
   labelled by its outcome, which is its one step's label): what a pretrained verifier brings.
   Mixed with longer lists from the start, the 2-layer verifier did not learn to compare the
   letters (docs/last_letter.md);
4. the verifier's format SFT from phase 3 (`--verifier-steps` steps x 32 on 1-6 words, lr
   3e-3, outcome labels only, half of the examples one-word problems; last_letter_labels.py).

Each phase is skipped when its checkpoint exists. The two checkpoints are copied to --out with
`recipe.json`: the commands, the commit, the date, and each phase's step-0 held-out evaluation.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import subprocess
import sys
from pathlib import Path

from make_tiny_sft import run_phases

ROOT = Path(__file__).resolve().parents[2]
CONFIG = str(ROOT / "configs" / "tiny_letters.py")
DEFAULT_OUT = ROOT / "tango_jax" / "assets" / "tiny_letters_sft"


def phase_commands(
    work: Path,
    seed: int,
    verifier_steps: int,
    extra: list[str],
    length_steps: int = 500,
    one_word_steps: int = 900,
    verifier_lr: float = 3e-3,
) -> list[list[str]]:
    train = [sys.executable, "-m", "tango_jax.train", "--config"]
    # the SFT covers the short lists too (2-6 words), whatever word counts RL draws
    common = [
        f"--config.seed={seed}",
        "--config.schedule.total_steps=0",
        "--config.data.letters.min_words=2",
    ]
    overrides = [f"--config.{o}" for o in extra]
    return [
        [
            *train,
            f"{CONFIG}:grpo,scratch",
            f"--config.run_dir={work / 'phase1'}",
            *common,
            "--config.data.letters.sft_max_words=3",
            *overrides,
        ],
        [
            *train,
            f"{CONFIG}:grpo",
            f"--config.run_dir={work / 'phase2'}",
            *common,
            f"--config.generator.model.path={work / 'phase1' / 'sft' / 'generator'}",
            "--config.sft.generator.enable=True",
            f"--config.sft.generator.steps={length_steps}",
            f"--config.sft.generator.num_examples={length_steps * 32}",
            "--config.sft.generator.trainer.optimizer.learning_rate=1e-3",
            *overrides,
        ],
        [
            *train,
            f"{CONFIG}:tango,scratch",
            f"--config.run_dir={work / 'phase3'}",
            *common,
            f"--config.generator.model.path={work / 'phase2' / 'sft' / 'generator'}",
            "--config.generator.model.preset=",
            "--config.sft.generator.enable=False",
            "--config.data.letters.verifier_one_word=1.0",
            # one-word transcripts are short: pad responses to 32 tokens, not the RL's 224
            "--config.verifier.response_bucket=32",
            f"--config.sft.verifier.steps={one_word_steps}",
            f"--config.sft.verifier.num_examples={one_word_steps * 32}",
            *overrides,
        ],
        [
            *train,
            f"{CONFIG}:tango,scratch",
            f"--config.run_dir={work / 'phase4'}",
            *common,
            f"--config.generator.model.path={work / 'phase2' / 'sft' / 'generator'}",
            "--config.generator.model.preset=",
            "--config.sft.generator.enable=False",
            f"--config.verifier.model.path={work / 'phase3' / 'sft' / 'verifier'}",
            "--config.verifier.model.preset=",
            "--config.sft.verifier.start_from_generator=False",
            f"--config.sft.verifier.trainer.optimizer.learning_rate={verifier_lr}",
            f"--config.sft.verifier.steps={verifier_steps}",
            f"--config.sft.verifier.num_examples={verifier_steps * 32}",
            *overrides,
        ],
    ]


def step0_eval(run_dir: Path) -> dict[str, float]:
    """Every eval/ metric of the run's step-0 evaluation (empty when it has none)."""
    from tango_jax.eval import analysis

    if not (run_dir / "metrics.jsonl").exists():  # a phase placed by hand, not run here
        return {}
    run = analysis.load_runs({"r": run_dir})["r"]
    out = {}
    for key in sorted(k for k in run if k.startswith("eval/")):
        steps, values = analysis.series(run, key)
        if steps.size and steps[0] == 0:
            out[key] = float(values[0])
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--work", default="runs/tiny_letters_sft")
    p.add_argument("--out", default=str(DEFAULT_OUT))
    p.add_argument("--verifier-steps", type=int, default=600)
    p.add_argument("--one-word-steps", type=int, default=900)
    p.add_argument("--verifier-lr", type=float, default=3e-3, help="phase 4's peak lr")
    p.add_argument("--length-steps", type=int, default=500)
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    args = p.parse_args(argv)
    work, out = Path(args.work).resolve(), Path(args.out).resolve()
    commands = phase_commands(
        work,
        args.seed,
        args.verifier_steps,
        args.set,
        args.length_steps,
        args.one_word_steps,
        args.verifier_lr,
    )
    done = [work / f"phase{i}" / "sft" / r for i, r in ((1, "generator"), (2, "generator"))]
    done += [work / f"phase{i}" / "sft" / "verifier" for i in (3, 4)]
    run_phases(commands, [d / "config.json" for d in done])
    done = [done[1], done[3]]  # the length-SFT generator and the verifier
    staging = out.with_name(out.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    shutil.copytree(done[0], staging / "generator")
    shutil.copytree(done[1], staging / "verifier")
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    recipe = {
        "commands": [" ".join(["python", *c[1:]]).replace(f"{ROOT}/", "") for c in commands],
        "commit": commit,
        "date": datetime.date.today().isoformat(),
        "eval_generator_phase1": step0_eval(work / "phase1"),
        "eval_generator": step0_eval(work / "phase2"),
        "eval_verifier": step0_eval(work / "phase4"),
    }
    (staging / "recipe.json").write_text(json.dumps(recipe, indent=1) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    print(f"wrote {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
