"""Which published benchmarks and ProcessBench splits `python -m tango_jax.evaluate` evaluates,
read before any model loads: a missing file fails first. Data missing for a benchmark selected
through a group (all, math, ood) skips it with one line; one named on its own is required."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import logging
from pathlib import Path

from tango_jax.data.benchmarks import (
    BadRows,
    benchmark_names,
    load_benchmark_dir,
    load_process_bench,
    process_bench_splits,
)

log = logging.getLogger("tango_jax")


@dataclasses.dataclass(frozen=True)
class Selection:
    """The selected data, read: each benchmark's problems and each split's rows (the first
    --limit of each)."""

    problems: dict[str, list]  # benchmark name -> its problems
    rows: dict[str, list]  # ProcessBench split -> its rows


def select(args: argparse.Namespace) -> Selection:
    """--benchmarks and --process_bench (with --data: only what they name), read from
    --data_dir; ValueError when nothing is left to evaluate."""
    benchmarks = args.benchmarks or ("none" if args.data else "all")
    process_bench = args.process_bench or ("none" if args.data else "all")
    names = benchmark_names(benchmarks)
    splits = process_bench_splits(process_bench)
    if not names and not splits and not args.data:
        raise ValueError("nothing to evaluate: --benchmarks and --process_bench select none.")
    if splits and not has_verifier(args):  # a GRPO run, or --generator alone
        if _named(process_bench, {"all"}):  # splits named on their own
            raise ValueError(
                f"--process_bench {process_bench}: there is no verifier to evaluate (the "
                "run has none); pass --verifier HF_DIR, or --process_bench none."
            )
        log.info("ProcessBench skipped: no verifier to evaluate (the run has none)")
        splits = []
    on_bad = BadRows(args.on_bad_row)
    problems, rows = {}, {}
    named = _named(benchmarks, {"all", "math", "ood"})
    for n in names:
        load = functools.partial(load_benchmark_dir, n, args.data_dir, on_bad_row=on_bad)
        if (loaded := _load_or_skip(n, n in named, load)) is not None:
            problems[n] = loaded.items
    named = _named(process_bench, {"all"})
    for split in splits:
        load = functools.partial(load_process_bench, args.data_dir, split, on_bad_row=on_bad)
        if (loaded := _load_or_skip(f"ProcessBench/{split}", split in named, load)) is not None:
            rows[split] = loaded.items
    if not problems and not rows and not args.data:
        raise ValueError(
            f"nothing to evaluate: no data for the selected benchmarks under --data_dir "
            f"{args.data_dir} (docs/evaluation.md says how to get them)."
        )
    if args.limit:
        problems = {n: p[: args.limit] for n, p in problems.items()}
        rows = {s: r[: args.limit] for s, r in rows.items()}
    return Selection(problems, rows)


def has_verifier(args: argparse.Namespace) -> bool:
    """Whether this evaluation has a verifier: --verifier, or a run whose config has one."""
    if args.verifier:
        return True
    if args.generator and not args.run_dir:
        return False
    config = Path(args.run_dir) / "config.json" if args.run_dir else None
    if config is None or not config.is_file():
        return True  # a run directory without config.json: its checkpoints decide later
    return bool(json.loads(config.read_text()).get("verifier", {}).get("enable", True))


def _named(selection: str, groups: set[str]) -> set[str]:
    """What `--benchmarks` / `--process_bench` names on its own, not through a group."""
    return {p.strip() for p in selection.split(",")} - {"", "none"} - groups


def _load_or_skip(name: str, named: bool, load):
    """load(), or None with one line saying why when `name`'s data is missing and the selection
    did not name benchmarks on their own (`named`: then missing data is an error)."""
    try:
        return load()
    except FileNotFoundError as e:
        if named:
            raise
        log.info("%s skipped: %s", name, e)
        return None
