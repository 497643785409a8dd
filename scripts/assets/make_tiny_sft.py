"""Reproduces the SFT checkpoints that configs/tiny_arith.py starts RL from.

    python scripts/assets/make_tiny_sft.py                       # ~26 min on a 2-core CPU
    python scripts/assets/make_tiny_sft.py --seed 1 --out runs/tiny_sft_s1/out   # another SFT seed
    python scripts/assets/make_tiny_sft.py --config configs/tiny_chains.py \
        --work runs/tiny_chains_sft --out tango_jax/assets/tiny_chains_sft     # the long chains

Three runs of the train command, SFT only (`schedule.total_steps=0`), from random init, on the
config given (`--config`, an arithmetic config with a `tango,scratch` variant; the numbers below
are configs/tiny_arith.py's, the default):

1. `configs/tiny_arith.py:tango,scratch`: the generator's SFT (1200 steps x 32, cosine lr
   3e-3), then the verifier's first SFT phase from that generator (2000 steps x 32, lr 3e-3,
   half of the examples one-equation fact checks).
2. The verifier's second phase from the first (`PHASE_2`: 3000 steps x 32, lr 2e-3, three
   quarters fact checks). In the first phase the fact checks are learned only partly; with the
   second they are learned completely and carry over to the step judgments of transcripts
   (docs/miniature.md, "The current configuration and why").
3. A short calibration of the verifier from the second (`PHASE_3`: 10 steps x 32, lr 3e-4) in
   which a right solution's step judgments carry their outcome label, CORRECT
   (`verifier_sft_labels=unlabelled_wrong`; a wrong one's stay unlabelled). After phase 2 the
   verifier flags some step of 98% of right solutions; after phase 3, of 59%, and its step F1
   is 0.45 instead of 0.03. Outcome-reward RL with consistent verdicts needs a start that
   passes some right solutions (from the phase-2 verifier it collapses to INCORRECT
   everywhere; docs/miniature.md, History, 2026-11-25). The length was chosen on seed 0 and checked
   on other ProcessBench items (`data.seed=2`: 0.35 against 0.08); 30 steps at lr 1e-3 already
   pass every solution.

Everything stays outcome-labelled: no step label of a wrong solution anywhere. The generator
of phase 1 and the verifier of phase 3 are copied to --out (by default the shipped
tango_jax/assets/tiny_arith_sft/) with `recipe.json`: the commands, the commit, the date and
the held-out evaluation of the two checkpoints (the step-0 evaluation of phase 3; phases 1 and
2 skip theirs, `eval.before_train=False`: evaluate an intermediate checkpoint with
`python -m tango_jax.evaluate` when it is wanted).
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIG = str(ROOT / "configs" / "tiny_arith.py")
DEFAULT_OUT = ROOT / "tango_jax" / "assets" / "tiny_arith_sft"
# The verifier's second SFT phase: more fact checks, a lower learning rate, from phase 1.
PHASE_2 = (
    "data.arith.verifier_sft_facts=0.75",
    "sft.verifier.steps=3000",
    "sft.verifier.num_examples=96000",
    "sft.verifier.trainer.optimizer.learning_rate=2e-3",
)
# The verifier's calibration: right solutions' step judgments labelled CORRECT, briefly.
PHASE_3 = (
    "data.arith.verifier_sft_labels=unlabelled_wrong",
    "data.arith.verifier_sft_facts=0.75",
    "sft.verifier.steps=10",
    "sft.verifier.num_examples=320",
    "sft.verifier.trainer.optimizer.learning_rate=3e-4",
)
# Copied into recipe.json: the SFT checkpoints' held-out numbers.
EVAL_KEYS = (
    "eval/generator/accuracy",
    "eval/generator/sampled_accuracy",
    "eval/verifier/verdict_accuracy",
    "eval/verifier/step_f1",
    "eval/verifier/step_acc_erroneous",
    "eval/verifier/step_acc_correct",
)


def phase_commands(
    work: Path, seed: int, extra: list[str], config: str = CONFIG
) -> list[list[str]]:
    base = [sys.executable, "-m", "tango_jax.train", "--config", f"{config}:tango,scratch"]
    common = [f"--config.seed={seed}", "--config.schedule.total_steps=0"]
    unevaluated = ["--config.eval.before_train=False"]  # only phase 3's evaluation is kept
    overrides = [f"--config.{o}" for o in extra]  # last: they win over PHASE_2
    generator = work / "phase1" / "sft" / "generator"

    def verifier_phase(phase: int, fields: tuple[str, ...]) -> list[str]:
        """The verifier's SFT phase `phase`, from phase `phase - 1`'s verifier."""
        return [
            *base,
            f"--config.run_dir={work / f'phase{phase}'}",
            *common,
            *(unevaluated if phase < 3 else []),
            f"--config.generator.model.path={generator}",
            "--config.generator.model.preset=",
            f"--config.verifier.model.path={work / f'phase{phase - 1}' / 'sft' / 'verifier'}",
            "--config.verifier.model.preset=",
            "--config.sft.generator.enable=False",
            "--config.sft.verifier.start_from_generator=False",
            *(f"--config.{o}" for o in fields),
            *overrides,
        ]

    return [
        [*base, f"--config.run_dir={work / 'phase1'}", *common, *unevaluated, *overrides],
        verifier_phase(2, PHASE_2),
        verifier_phase(3, PHASE_3),
    ]


def shown(cmd: list[str]) -> str:
    """A command as recipe.json records it: `python`, paths relative to the repository."""
    text = " ".join(["python", *cmd[1:]])
    return text.replace(f"{ROOT}/", "")


def step0_eval(run_dir: Path) -> dict[str, float]:
    """The run's evaluation before RL (step 0), restricted to EVAL_KEYS."""
    from tango_jax.eval import analysis

    run = analysis.load_runs({"r": run_dir})["r"]
    out = {}
    for key in EVAL_KEYS:
        steps, values = analysis.series(run, key)
        if steps.size and steps[0] == 0:
            out[key] = float(values[0])
    if not out:
        raise SystemExit(f"{run_dir}/metrics.jsonl has no step-0 evaluation.")
    return out


def run_phases(commands: list[list[str]], done: list[Path]) -> None:
    """Each command from the repository root, skipped when its `done` path exists; stops at
    the first that fails."""
    for phase, (cmd, marker) in enumerate(zip(commands, done), 1):
        if marker.exists():
            print(f"phase {phase}: done before ({marker})", flush=True)
            continue
        t0 = time.perf_counter()
        print(f"phase {phase}: {' '.join(cmd)}", flush=True)
        rc = subprocess.run(cmd, cwd=ROOT).returncode
        if rc:
            raise SystemExit(f"phase {phase} failed (exit {rc}); its log is above.")
        print(f"phase {phase}: {(time.perf_counter() - t0) / 60:.1f} min", flush=True)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seed", type=int, default=0, help="the SFT's seed (data, sampling)")
    p.add_argument(
        "--config", default=CONFIG, help="the arithmetic config whose tango,scratch variant runs"
    )
    p.add_argument("--work", default="runs/tiny_arith_sft", help="the three runs' directories")
    p.add_argument("--out", default=str(DEFAULT_OUT), help="where the two checkpoints go")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="a --config.FIELD=VALUE override for every phase (repeatable)",
    )
    args = p.parse_args(argv)
    work, out = Path(args.work).resolve(), Path(args.out).resolve()
    commands = phase_commands(work, args.seed, args.set, str(Path(args.config).resolve()))
    run_phases(commands, [work / f"phase{i}" / "sft" / "verifier" for i in (1, 2, 3)])
    staging = out.with_name(out.name + ".tmp")  # never a half-written --out
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    shutil.copytree(work / "phase1" / "sft" / "generator", staging / "generator")
    last = work / f"phase{len(commands)}"
    shutil.copytree(last / "sft" / "verifier", staging / "verifier")
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    recipe = {
        "made_by": "python scripts/assets/make_tiny_sft.py " + " ".join(argv),
        "commands": [shown(c) for c in commands],
        "commit": commit,
        "date": datetime.date.today().isoformat(),
        "held_out_eval": step0_eval(last),
    }
    (staging / "recipe.json").write_text(json.dumps(recipe, indent=1) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    print(json.dumps(recipe["held_out_eval"], indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
