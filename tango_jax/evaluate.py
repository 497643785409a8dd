"""Evaluate a generator and a verifier as the paper does (Tables 1 and 3).

    python -m tango_jax.evaluate --run_dir runs/tiny_arith [--step latest|start|final|N]
        [--benchmarks all] [--process_bench all] [--data_dir data/benchmarks]
    python -m tango_jax.evaluate --generator HF_DIR --verifier HF_DIR --out_dir DIR ...
    python -m tango_jax.evaluate --run_dir RUN --step final --data my_test.jsonl \
        [--reward my_rewards:exact_match] [--question_field problem --answer_field gold]

Generator: greedy zero-shot pass@1 on each selected benchmark (MATH500, AIME2024, AIME2025,
AMC2023, OlympiadBench; BGQA, CRUXEval, StrategyQA, TableBench). Verifier: ProcessBench F1 per
split (gsm8k, math, olympiadbench, omnimath), the first INCORRECT step being the predicted
error location. Data: `data_dir/<name>/` as the hub repositories download
(tango_jax/data/benchmarks.py; docs/evaluation.md).

Models: a run directory's checkpoint at any saved step (exported once to
`out_dir/models/<role>`), the run's RL starting point (`start`: after SFT) or its final HF
export (`final`); or any HF checkpoint directory (`--generator`, `--verifier`). Sampling
settings (backend jax|vllm, prompt and token budgets, dtype) come from the run's config.json,
or from `--config` (a training config file), or the defaults; `--backend`, `--max_tokens` and
`--dtype` override them. So do the prompt templates (`data.prompt_style`, overridden by
`--prompt_style`, and the user's `data.template_files`): the math benchmarks in the
generator's eval variant, the OOD ones in its ood variant, ProcessBench in the verifier's eval
variant.

Own data (`--data`, eval/own_data.py): the generator on a held-out file of one's own, read
with the run's field names and scored by the run's reward unless --question_field,
--answer_field or --reward say otherwise: greedy pass@1 and sampled pass@1 (`--sampled_n` samples
per problem at the training temperature), the same evaluation as the run's held-out one, in
results.json ("data") and data.md. The published benchmarks are then evaluated only where
--benchmarks / --process_bench name them.

Writes to out_dir (default run_dir/eval/<step>): generator/<benchmark>.jsonl and
verifier/<split>.jsonl (one record per problem, appended as it goes: a killed evaluation run
again continues where it stopped), results.json, table1.md, table3.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from tango_jax.config.roles import SamplerBackend
from tango_jax.data.benchmarks import BENCHMARKS, PROCESS_BENCH_SPLITS, BadRows
from tango_jax.data.datasets import Fields
from tango_jax.eval import report
from tango_jax.eval.selection import select
from tango_jax.eval.settings import SAMPLED_N, Settings, load_settings
from tango_jax.parallel.mesh import make_mesh
from tango_jax.tango.kind import Kind
from tango_jax.text.templates import PromptStyle

if TYPE_CHECKING:
    from tango_jax.eval.own_data import OwnData
    from tango_jax.run.roles import Role

log = logging.getLogger("tango_jax")

STEP_KEYWORDS = ("latest", "start", "final")
GENERATOR, VERIFIER = Kind.GENERATOR, Kind.VERIFIER


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The evaluation `args` asks for: the data read first (a missing file fails before any
    model loads), the weights found, the out_dir checked to hold this evaluation's results
    only, then each selected part, results.json last (with the earlier calls' parts)."""
    selection = select(args)
    settings = load_settings(args)
    own, own_problems = _own_data(args, settings)  # read, its reward imported, before models
    out_dir = _out_dir(args)
    generator = bool(selection.problems) or own is not None
    paths = _role_paths(args, out_dir, generator=generator, verifier=bool(selection.rows))
    _check_same_evaluation(out_dir, _identity(settings, paths))
    previous = {}
    if (out_dir / "results.json").is_file():  # earlier calls: their benchmarks stay in the tables
        previous = json.loads((out_dir / "results.json").read_text())
    results: dict[str, Any] = {k: v for k, v in previous.items() if k in ("generator", "verifier")}
    results["out_dir"] = str(out_dir)
    roles = _build_roles(settings, paths, make_mesh(settings.mesh))
    labels = {kind: label for kind, (_, label) in paths.items()}
    ev = _Evaluation(roles, labels, settings, args.batch_size, out_dir, previous)
    try:
        if own is not None:
            results["data"] = _own_data_part(ev, own, own_problems)
        if selection.problems:
            results["generator"] = _benchmark_part(ev, selection.problems)
        if selection.rows:
            results["verifier"] = _process_bench_part(ev, selection.rows)
    finally:
        for role in roles.values():
            role.sampler.close()
    (out_dir / "results.json").write_text(json.dumps(results, indent=2))
    return results


# --- what to evaluate ---------------------------------------------------------------------------


def _own_data(args: argparse.Namespace, settings: Settings) -> tuple[OwnData | None, list]:
    """--data's file and its problems (None, [] without --data), with the run's field names
    and reward unless --question_field, --answer_field or --reward say otherwise."""
    if not args.data:
        return None, []
    from tango_jax.eval import own_data
    from tango_jax.eval.own_data import OwnData

    d = settings.data
    fields = Fields(args.question_field or d.question_field, args.answer_field or d.answer_field)
    reward = d.reward if args.reward is None else args.reward
    kind = dataclasses.replace(d, reward="").reward_kind  # the check without a function
    own = OwnData(Path(args.data), fields, reward, kind)
    return own, own_data.load(own, limit=args.limit)


def _out_dir(args: argparse.Namespace) -> Path:
    if args.out_dir:
        return Path(args.out_dir)
    if args.run_dir:
        return Path(args.run_dir) / "eval" / step_label(Path(args.run_dir), args.step)
    raise ValueError("--out_dir is required without --run_dir.")


# --- which weights ------------------------------------------------------------------------------


def _role_paths(
    args: argparse.Namespace, out_dir: Path, *, generator: bool, verifier: bool
) -> dict[Kind, tuple[Path, str]]:
    """(HF directory, label) of each role the evaluation needs (`generator`, `verifier`):
    --generator / --verifier, else the run's weights at --step."""
    run_dir = Path(args.run_dir) if args.run_dir else None
    paths: dict[Kind, tuple[Path, str]] = {}
    for kind, given, needed in (
        (GENERATOR, args.generator, generator),
        (VERIFIER, args.verifier, verifier),
    ):
        if not needed:
            continue
        if given:
            paths[kind] = (_existing(Path(given), f"--{kind.value}"), str(given))
        elif run_dir is not None:
            path, label = _run_role_path(run_dir, args.step, kind, out_dir)
            paths[kind] = (path, f"{run_dir} {label}")
        else:
            raise ValueError(f"--{kind.value} (an HF checkpoint directory) or --run_dir needed.")
    return paths


def _run_role_path(run_dir: Path, step: str, kind: Kind, out_dir: Path) -> tuple[Path, str]:
    """(HF directory, label) of `kind` in run `run_dir` at `step`."""
    from tango_jax.checkpoint.run import CHECKPOINT_SUBDIR, RunCheckpointer

    name = kind.value
    start = run_dir / "sft" / name
    start = start if start.is_dir() else run_dir / "initial" / name
    if step == "start":
        return _existing(start, f"{run_dir}: no RL starting checkpoint for the {name}"), "start"
    if step == "final":
        return _existing(run_dir / "hf" / name, f"{run_dir}: no final export"), "final"
    ckpt_dir = run_dir / CHECKPOINT_SUBDIR
    if not ckpt_dir.is_dir():
        raise FileNotFoundError(
            f"{ckpt_dir}: no checkpoints in this run; use --step start or --step final, or "
            "pass HF directories with --generator / --verifier."
        )
    reader = RunCheckpointer(ckpt_dir, keep=1, read_only=True)
    try:
        steps = reader.all_steps()
        chosen = steps[-1] if step == "latest" and steps else int(step) if step.isdigit() else None
        if chosen not in steps:
            raise ValueError(f"--step {step}: {ckpt_dir} holds steps {steps}.")
        in_ckpt = name in reader.host(chosen)["models"]
    finally:
        reader.close()
    if not in_ckpt:  # a frozen verifier: the run's starting weights throughout
        return _existing(start, f"{run_dir}: no checkpoint of the {name}"), "start"
    out = out_dir / "models" / f"step_{chosen}" / name
    if not (out / "config.json").is_file():
        from tango_jax.export import ExportOptions, export_hf

        log.info("exporting the %s of step %d to %s", name, chosen, out)
        merged = ExportOptions(overwrite=True, merged=True)  # LoRA: the adapters merged
        export_hf(ckpt_dir, chosen, name, out, merged)
    return out, f"step {chosen}"


def _existing(path: Path, what: str) -> Path:
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{what}: {path} is not an HF checkpoint directory.")
    return path


def step_label(run_dir: Path, step: str) -> str:
    """The out_dir name for `step` (latest resolved to its number)."""
    if step != "latest":
        return step if step in STEP_KEYWORDS else f"step_{int(step)}"
    from tango_jax.checkpoint.run import CHECKPOINT_SUBDIR, RunCheckpointer

    ckpt_dir = run_dir / CHECKPOINT_SUBDIR
    if not ckpt_dir.is_dir():
        raise FileNotFoundError(f"{ckpt_dir}: no checkpoints; use --step start or --step final.")
    with RunCheckpointer(ckpt_dir, keep=1, read_only=True) as reader:
        latest = reader.latest_step()
    if latest is None:
        raise FileNotFoundError(f"{ckpt_dir}: no saved step; use --step start or --step final.")
    return f"step_{latest}"


# --- the evaluation -----------------------------------------------------------------------------


def _check_same_evaluation(out_dir: Path, identity: dict[str, Any]) -> None:
    """Results in out_dir must come from the same models and settings (resuming is only
    right then)."""
    path = out_dir / "evaluation.json"
    if path.is_file():
        before = json.loads(path.read_text())
        changed = sorted(k for k in identity.keys() & before.keys() if identity[k] != before[k])
        if changed:
            detail = ", ".join(f"{k}: {before[k]!r} -> {identity[k]!r}" for k in changed)
            raise ValueError(
                f"{out_dir} holds results of another evaluation ({detail}); choose another "
                "--out_dir or delete it."
            )
        identity = before | identity
    out_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(identity, indent=2))


def _template_identity(settings: Settings) -> dict[str, Any]:
    """The user's template files and a hash of their content (only when some are set, so the
    results of evaluations without any stay resumable as before)."""
    given = settings.template_files.given()
    if not given:
        return {}
    digest = {
        field: hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
        for field, path in given.items()
    }
    return {"template_files": given, "template_sha256": digest}


def _identity(settings: Settings, paths: dict[Kind, tuple[Path, str]]) -> dict[str, Any]:
    """What makes two evaluations the same: the prompts, and each role's weights and token
    budgets."""
    identity = {"prompt_style": settings.prompt_style.value} | _template_identity(settings)
    for kind, (_, label) in paths.items():
        role_cfg = settings.generator if kind is GENERATOR else settings.verifier
        identity[f"{kind.value}"] = label
        identity[f"{kind.value}_max_tokens"] = (
            role_cfg.eval_max_tokens or role_cfg.rollout.max_tokens
        )
        identity[f"{kind.value}_max_prompt_len"] = role_cfg.max_prompt_len
    return identity


def _build_roles(settings: Settings, paths: dict[Kind, tuple[Path, str]], mesh) -> dict:
    """The roles to evaluate, loaded; their vLLM servers, if any, started side by side (as a
    run starts them: `start_samplers`), so the verifier's server comes up while the generator's
    does rather than after the generator's evaluation."""
    from tango_jax.run.roles import build_role, start_samplers

    roles = {}
    try:
        for kind, (path, _) in paths.items():
            cfg = settings.generator if kind is Kind.GENERATOR else settings.verifier
            roles[kind] = build_role(kind, cfg, path, mesh, with_trainer=False, start_sampler=False)
        start_samplers(roles.values())  # closes every role's sampler if one fails
    except BaseException:
        for role in roles.values():
            role.sampler.close()
        raise
    return roles


@dataclasses.dataclass(frozen=True)
class _Evaluation:
    """One evaluation's models and where its parts write: what each part needs."""

    roles: dict[Kind, Role]
    labels: dict[Kind, str]  # each role's weights, as the tables name them
    settings: Settings
    batch_size: int  # problems per generate call
    out_dir: Path
    previous: dict[str, Any]  # results.json of earlier calls on out_dir (their parts stay)


def _own_data_part(ev: _Evaluation, own: OwnData, problems: list) -> dict[str, Any]:
    """--data: greedy and sampled pass@1 under the file's own reward; data.md."""
    from tango_jax.eval import own_data

    s, label = ev.settings, ev.labels[GENERATOR]
    summary = own_data.run(
        ev.roles[GENERATOR],
        problems,
        own,
        templates=s.templates,
        sampled_n=s.sampled_n,
        seed=s.seed,
        scorer_workers=s.scorer_workers,
        timeout_s=s.scorer_timeout_s,
    )
    (ev.out_dir / "data.md").write_text(own_data.table(label, summary))
    return {"model": label, **summary}


def _benchmark_part(ev: _Evaluation, problems: dict[str, list]) -> dict[str, Any]:
    """Table 1: greedy pass@1 of each benchmark, its records appended to out_dir/generator/ as
    they come (a killed evaluation continues), and the problems each left out for a prompt
    longer than generator.max_prompt_len (as the official loader does); table1.md."""
    from tango_jax.eval.benchmarks import (
        BenchmarkSettings,
        ResultLog,
        fits_prompt,
        run_generator_benchmark,
    )
    from tango_jax.text.scoring_pool import OutcomeScorer

    generator, s, label = ev.roles[GENERATOR], ev.settings, ev.labels[GENERATOR]
    records, dropped = {}, {}
    with OutcomeScorer(num_workers=s.scorer_workers, timeout_s=s.scorer_timeout_s) as scorer:
        for name, items in problems.items():
            how = BenchmarkSettings.of(
                name, style=s.templates, timeout_s=s.scorer_timeout_s, batch_size=ev.batch_size
            )
            kept, left_out = fits_prompt(generator, items, s.templates, how.variant)
            dropped[name] = len(left_out)
            if left_out:
                log.warning(
                    "%s: %d problems whose prompt exceeds generator.max_prompt_len (%d) "
                    "left out, as the official loader does",
                    name,
                    len(left_out),
                    generator.config.max_prompt_len,
                )
            results = ResultLog(ev.out_dir / "generator" / f"{name}.jsonl")
            records[name] = run_generator_benchmark(
                generator, name, kept, results, scorer=scorer, settings=how
            )
    summary = report.generator_summary(records, ev.previous.get("generator"))
    for name in problems:
        summary[name]["dropped_overlong"] = dropped[name]
    (ev.out_dir / "table1.md").write_text(report.table1(label, summary))
    return {"model": label, **summary}


def _process_bench_part(ev: _Evaluation, rows: dict[str, list]) -> dict[str, Any]:
    """Table 3: the verifier's ProcessBench F1 per split, its records appended to
    out_dir/verifier/ as they come; table3.md."""
    from tango_jax.eval.benchmarks import ResultLog, run_process_bench

    label = ev.labels[VERIFIER]
    records = {
        split: run_process_bench(
            ev.roles[VERIFIER],
            split,
            split_rows,
            ResultLog(ev.out_dir / "verifier" / f"{split}.jsonl"),
            style=ev.settings.templates,
            batch_size=ev.batch_size,
        )
        for split, split_rows in rows.items()
    }
    summary = report.verifier_summary(records, ev.previous.get("verifier"))
    (ev.out_dir / "table3.md").write_text(report.table3(label, summary))
    return {"model": label, **summary}


class _DefaultsHelp(argparse.ArgumentDefaultsHelpFormatter):
    """Each flag's default in --help, where it has one (a None default's help says it)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None:
            return action.help or ""
        return super()._get_help_string(action)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m tango_jax.evaluate",
        description=__doc__.split("\n\n")[0],
        formatter_class=_DefaultsHelp,  # --help shows each default
        allow_abbrev=False,  # --data is not --data_dir
    )
    p.add_argument("--run_dir", help="a training run directory (config.json, checkpoints/)")
    p.add_argument(
        "--step",
        default="latest",
        help="with --run_dir: a saved step number, latest, start (the RL starting point, after "
        "SFT) or final (the run's hf/ export)",
    )
    p.add_argument("--generator", help="an HF checkpoint directory for the generator")
    p.add_argument("--verifier", help="an HF checkpoint directory for the verifier")
    p.add_argument("--config", help="a training config file (configs/x.py[:variant]) to take "
                   "sampling settings from instead of the run's config.json")  # fmt: skip
    p.add_argument("--data_dir", default="data/benchmarks", help="holds <benchmark>/ folders")
    p.add_argument(
        "--benchmarks",
        help="comma-separated: all, math, ood, none, or names: "
        + ", ".join(BENCHMARKS)
        + " (default: all; none with --data)",
    )
    p.add_argument(
        "--process_bench",
        help="ProcessBench splits: all, none, or "
        + ", ".join(PROCESS_BENCH_SPLITS)
        + " (default: all; none with --data)",
    )
    own = p.add_argument_group(
        "own data",
        "the generator on a held-out file of your own, scored by your own reward: greedy and "
        "sampled pass@1 (a reward above 0.5 counts as right) in results.json and data.md",
    )
    own.add_argument("--data", help="a JSONL / JSON / parquet file (or glob) of problems")
    own.add_argument(
        "--question_field", help="its question's field, dotted for nested (default: the run's)"
    )
    own.add_argument("--answer_field", help="its gold answer's field (default: the run's)")
    own.add_argument(
        "--reward",
        help="module:function scoring (completion, answer, question) -> [0, 1], importable "
        "from the current directory or PYTHONPATH (default: the run's data.reward, else "
        "Math-Verify); '' for the built-in check",
    )
    own.add_argument(
        "--sampled_n",
        type=int,
        help=f"samples per problem at the training temperature; 0: greedy only (default: the "
        f"run's eval.sampled_n when its evaluations sample, else {SAMPLED_N})",
    )
    own.add_argument("--seed", type=int, help="the samples' seed (default: the run's seed)")
    p.add_argument("--out_dir", help="default: RUN_DIR/eval/<step>")
    p.add_argument("--limit", type=int, default=0, help="first N problems per benchmark (0: all)")
    p.add_argument("--batch_size", type=int, default=64, help="problems per generate call")
    p.add_argument("--backend", choices=[b.value for b in SamplerBackend], help="sampler")
    p.add_argument("--max_tokens", type=int, default=0, help="greedy budget (0: the config's)")
    p.add_argument("--dtype", help="compute dtype (float32, bfloat16)")
    p.add_argument("--prompt_style", choices=[s.value for s in PromptStyle])
    p.add_argument("--scorer_workers", type=int, default=0, help="answer-check processes")
    p.add_argument(
        "--on_bad_row",
        default=BadRows.ERROR.value,
        choices=[b.value for b in BadRows],
        help="a malformed data row: error or skip (reported)",
    )
    args = p.parse_args(argv)
    if args.step not in STEP_KEYWORDS and not args.step.isdigit():
        p.error(f"--step {args.step!r}: a step number or one of {', '.join(STEP_KEYWORDS)}.")
    if not args.run_dir and not (args.generator or args.verifier):
        p.error("pass --run_dir, or HF checkpoint directories with --generator / --verifier.")
    if args.sampled_n is not None and args.sampled_n < 0:
        _refuse(
            f"--sampled_n {args.sampled_n}: the samples per problem must be >= 0; pass a count "
            f"(--sampled_n {SAMPLED_N}), or --sampled_n 0 for greedy pass@1 only."
        )
    if args.run_dir and not Path(args.run_dir).is_dir():  # before its absent config decides
        _refuse(
            f"--run_dir {args.run_dir}: no such directory; pass a training run's directory (it "
            "holds config.json), or HF checkpoint directories with --generator / --verifier."
        )
    return args


def _refuse(message: str) -> NoReturn:
    """A command line refused before anything loads: one line, as every evaluate error."""
    sys.exit(f"tango_jax.evaluate: error: {message}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("tango_jax").setLevel(logging.INFO)
    try:
        results = run(args)
    except (FileNotFoundError, ValueError) as e:  # ConfigError and RowError included
        _refuse(str(e))
    out = Path(results["out_dir"])
    for role, table in (("data", "data.md"), ("generator", "table1.md"), ("verifier", "table3.md")):
        if (out / table).is_file() and role in results:
            print((out / table).read_text())
    print(f"results in {out}")
    return results


if __name__ == "__main__":
    main()
