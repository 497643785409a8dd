r"""The paper's evaluation sets from local files, in their published schemas (TANGO_SPEC §7).

    problems = load_benchmark_dir("BGQA", data_dir).items            # list[Problem]
    items = load_process_bench(data_dir, "gsm8k").items               # list[ProcessItem]

Each benchmark lives in `data_dir/<name>/` as its hub repository downloads (`huggingface-cli
download --repo-type dataset <hub id> --local-dir data_dir/<name>`): every parquet / JSON /
JSONL / arrow file under it whose name matches the benchmark's `files` patterns is read with
the `datasets` library (hub_files.py), in sorted order; a `datasets.save_to_disk` directory
works too, and so does a Hugging Face hub cache as `data_dir` (its snapshot of the benchmark's
repository, `hub_files.dataset_dir`). Nothing is downloaded at run time: a missing directory
is a FileNotFoundError naming the expected path and the command that fetches it.

Each row becomes a `Problem` the way the official `prepare_eval_benchmarks.py` builds it:
  * math (MATH500, AIME 2024/2025, AMC 2023, OlympiadBench): the question and the answer
    fields (datasets.BENCHMARKS), scored by Math-Verify;
  * BGQA: `example` + " Answer with True, False, or Uncertain."; label proved/disproved/other
    -> True/False/Uncertain;
  * CRUXEval: a code-and-input prompt asking for the output; gold `output`, compared as a Python
    literal;
  * StrategyQA: the facts, then the instruction to answer True or False, then the question;
  * TableBench: rows with qtype NumericalReasoning or FactChecking; the table in JSON, the
    instruction to copy answers exactly, then the question.
The OOD suffixes are part of the question, so the generator's evaluation template wraps them
like any other question. ProcessBench rows (problem, steps, label = first wrong step or -1)
become `ProcessItem`s with every step in `<step>` tags.

A row that cannot be used (a missing or empty field, a label out of range) is never guessed
at: with `BadRows.SKIP` it is left out and reported (file and row index) in `Loaded.skipped`
and the log; with `BadRows.ERROR` the load fails on it.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Generic, TypeVar

from tango_jax.data import datasets as ds
from tango_jax.data.datasets import Problem
from tango_jax.data.hub_files import data_files, dataset_dir, read_rows
from tango_jax.text import formats
from tango_jax.text.answer_check import RewardKind
from tango_jax.text.process_bench import ProcessItem

log = logging.getLogger(__name__)

T = TypeVar("T")


class Domain(enum.Enum):
    MATH = "math"  # Table 1's left half
    OOD = "ood"  # out of domain: Table 1's right half


class BadRows(enum.Enum):
    SKIP = "skip"  # leave the row out, report it
    ERROR = "error"  # fail the load


class RowError(ValueError):
    """A row that lacks what its benchmark needs (the message names the field)."""


@dataclasses.dataclass(frozen=True)
class Loaded(Generic[T]):
    items: list[T]
    skipped: tuple[str, ...] = ()  # "FILE row I: reason" of every row left out


# --------------------------------------------------------------------------------------------
# Row -> (question, answer), one function per published schema.


def _text(row: dict, field: str) -> str:
    value = row.get(field)
    if not isinstance(value, str) or not value.strip():
        raise RowError(f"field {field!r} is missing, empty or not text ({value!r:.80})")
    return value


def _answer(row: dict, field: str) -> str:
    try:
        return ds._answer_text(row.get(field), f"field {field!r}")
    except ValueError as e:
        raise RowError(str(e)) from None


def _fields(fields: ds.Fields) -> Callable[[dict], tuple[str, str]]:
    return lambda row: (_text(row, fields.question).strip(), _answer(row, fields.answer))


BGQA_SUFFIX = " Answer with True, False, or Uncertain."
_BGQA_LABELS = {"proved": "True", "disproved": "False"}  # anything else: "Uncertain"


def _bgqa(row: dict) -> tuple[str, str]:
    label = _text(row, "label")
    return _text(row, "example") + BGQA_SUFFIX, _BGQA_LABELS.get(label, "Uncertain")


CRUXEVAL_TEMPLATE = """Given the following code:
{code}

and the following input (the order of the input is the same as the order of the input \
variables in the function):
{input}

Please analyze the code carefully, trace through its execution with the given input, and \
determine the final output."""


def _cruxeval(row: dict) -> tuple[str, str]:
    code, given = _text(row, "code"), _text(row, "input")
    return CRUXEVAL_TEMPLATE.format(code=code, input=given), _text(row, "output")


STRATEGYQA_INSTRUCTION = (
    "Based on the facts above, answer the following question. "
    "Your final answer should be either True or False.\n"
)


def _strategyqa(row: dict) -> tuple[str, str]:
    facts = row.get("facts")
    if isinstance(facts, list) and facts and all(isinstance(f, str) for f in facts):
        facts = "\n".join(facts) + "\n"  # the hub's list form; the official jsonl has a string
    elif not isinstance(facts, str) or not facts.strip():
        raise RowError(f"field 'facts' is missing, empty or not text ({facts!r:.80})")
    answer = row.get("answer")
    if not isinstance(answer, bool):
        raise RowError(f"field 'answer' must be true or false, got {answer!r:.80}")
    return facts + STRATEGYQA_INSTRUCTION + _text(row, "question"), str(answer)


TABLEBENCH_QTYPES = ("NumericalReasoning", "FactChecking")
TABLEBENCH_TEMPLATE = """Read the table below in JSON format:
{table}

Based on the table, answer the following question. If your answer is extracted from the \
table, make sure that the answer is exactly the same as the corresponding content in the table.
{question}"""


def _tablebench(row: dict) -> tuple[str, str]:
    table = row.get("table")
    if isinstance(table, dict):
        table = json.dumps(table, ensure_ascii=False)
    elif not isinstance(table, str) or not table.strip():
        raise RowError(f"field 'table' is missing or empty ({table!r:.80})")
    question = TABLEBENCH_TEMPLATE.format(table=table, question=_text(row, "question"))
    return question, _answer(row, "answer")


# --------------------------------------------------------------------------------------------
# The table of benchmarks.


@dataclasses.dataclass(frozen=True)
class BenchmarkSpec:
    name: str  # also the directory under data_dir
    hub_id: str  # the dataset the official code loads
    domain: Domain
    kind: RewardKind  # the answer check
    row: Callable[[dict], tuple[str, str]]  # row -> (question, gold answer); RowError if unusable
    files: tuple[str, ...] = ("*",)  # file-name patterns to read (the split), fnmatch
    keep: Callable[[dict], bool] | None = None  # rows of the evaluated subset


def _math(name: str) -> BenchmarkSpec:
    b = ds.BENCHMARKS[name]
    return BenchmarkSpec(name, b.hub_id, Domain.MATH, RewardKind.MATH, _fields(b.fields))


BENCHMARKS: dict[str, BenchmarkSpec] = {
    s.name: s
    for s in (
        _math("MATH500"),
        _math("AIME2024"),
        _math("AIME2025"),
        _math("AMC2023"),
        _math("OlympiadBench"),
        BenchmarkSpec(
            "BGQA", "tasksource/Boardgame-QA", Domain.OOD, RewardKind.BOXED, _bgqa, ("*test*",)
        ),
        BenchmarkSpec(
            "CRUXEval",
            "cruxeval-org/cruxeval",
            Domain.OOD,
            RewardKind.CRUXEVAL,
            _cruxeval,
            ("*test*",),
        ),
        BenchmarkSpec(
            "StrategyQA",
            "voidful/StrategyQA",
            Domain.OOD,
            RewardKind.BOXED,
            _strategyqa,
            ("strategyqa_train.json*",),
        ),
        BenchmarkSpec(
            "TableBench",
            "Multilingual-Multimodal-NLP/TableBench",
            Domain.OOD,
            RewardKind.BOXED,
            _tablebench,
            ("TableBench.jsonl", "TableBench.json", "TableBench*.parquet", "test*"),
            keep=lambda row: row.get("qtype") in TABLEBENCH_QTYPES,
        ),
    )
}
MATH_BENCHMARKS = tuple(n for n, s in BENCHMARKS.items() if s.domain is Domain.MATH)
OOD_BENCHMARKS = tuple(n for n, s in BENCHMARKS.items() if s.domain is Domain.OOD)

PROCESS_BENCH = "ProcessBench"
PROCESS_BENCH_HUB_ID = "Qwen/ProcessBench"
PROCESS_BENCH_SPLITS = ("gsm8k", "math", "olympiadbench", "omnimath")


# --------------------------------------------------------------------------------------------
# Loaders.


def _convert(
    files: Sequence[Path],
    convert: Callable[[dict, str], T | None],
    source: str,
    on_bad_row: BadRows,
) -> Loaded[T]:
    """convert(row, id) for every row of `files`; ids are f"{source}/{row}" counted over the
    files in order (a file's rows are numbered before any filter, so ids trace back)."""
    items, skipped, n = [], [], 0
    for file in files:
        for i, row in enumerate(read_rows(file)):
            try:
                item = convert(row, f"{source}/{n}")
            except RowError as e:
                where = f"{file} row {i}: {e}"
                if on_bad_row is BadRows.ERROR:
                    raise RowError(f"{where}. Fix the file, or pass --on_bad_row=skip.") from None
                skipped.append(where)
            else:
                if item is not None:
                    items.append(item)
            n += 1
    if skipped:
        log.warning(
            "%s: skipped %d malformed rows, the first: %s", source, len(skipped), skipped[0]
        )
    return Loaded(items, tuple(skipped))


def benchmark_names(selection: str) -> list[str]:
    """`--benchmarks` -> names: comma-separated names and groups (all, math, ood); `none` or ""
    selects nothing. ProcessBench is selected separately (`process_bench_splits`)."""
    out: list[str] = []
    groups = {"all": list(BENCHMARKS), "math": list(MATH_BENCHMARKS), "ood": list(OOD_BENCHMARKS)}
    for part in filter(None, (p.strip() for p in selection.split(","))):
        if part == "none":
            continue
        if part in groups:
            names = groups[part]
        elif part in BENCHMARKS:
            names = [part]
        else:
            known = ", ".join([*groups, *BENCHMARKS, "none"])
            raise ValueError(f"unknown benchmark {part!r}; choose from {known}.")
        out += [n for n in names if n not in out]
    return out


def load_benchmark_dir(
    name: str, data_dir: str | os.PathLike, *, on_bad_row: BadRows = BadRows.ERROR
) -> Loaded[Problem]:
    """The problems of benchmark `name` from `data_dir/name/` (see the module docstring)."""
    if name not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r}; known: {', '.join(BENCHMARKS)}.")
    spec = BENCHMARKS[name]
    files = data_files(dataset_dir(data_dir, name, spec.hub_id), spec.files, spec.hub_id)

    def convert(row: dict, pid: str) -> Problem | None:
        if spec.keep is not None and not spec.keep(row):
            return None
        question, answer = spec.row(row)
        return Problem(question, answer, name, pid)

    return _convert(files, convert, name, on_bad_row)


def process_bench_solution(steps: Sequence[str]) -> str:
    r"""A ProcessBench solution in the generator's format: every step in `<step>` tags inside
    `<think>`; the last step's boxed answer, where it has one, in `<answer>`. Steps are given
    as published (stripped), so the verifier sees exactly K = len(steps) steps."""
    lines = ["<think>", *(f"{formats.STEP_OPEN}{s.strip()}{formats.STEP_CLOSE}" for s in steps)]
    lines.append("</think>")
    boxed = formats.last_boxed(steps[-1]) if steps else None
    if boxed is not None:
        lines.append(f"{formats.ANSWER_OPEN}\\boxed{{{boxed}}}{formats.ANSWER_CLOSE}")
    return "\n".join(lines)


def _process_item(row: dict) -> ProcessItem:
    question = _text(row, "problem")
    steps = row.get("steps")
    if not isinstance(steps, list) or not steps or not all(isinstance(s, str) for s in steps):
        raise RowError(f"field 'steps' must be a non-empty list of text, got {steps!r:.80}")
    label = row.get("label")
    if isinstance(label, bool) or not isinstance(label, int) or not -1 <= label < len(steps):
        raise RowError(
            f"field 'label' must be -1 or a step index below {len(steps)}, got {label!r}"
        )
    return ProcessItem(question.strip(), process_bench_solution(steps), len(steps), label)


def process_bench_splits(selection: str) -> list[str]:
    """`--process_bench` -> split names: comma-separated splits, `all`, or `none`/""."""
    out: list[str] = []
    for part in filter(None, (p.strip() for p in selection.split(","))):
        if part == "none":
            continue
        names = list(PROCESS_BENCH_SPLITS) if part == "all" else [part]
        for n in names:
            if n not in PROCESS_BENCH_SPLITS:
                raise ValueError(
                    f"unknown ProcessBench split {n!r}; choose from all, none, "
                    f"{', '.join(PROCESS_BENCH_SPLITS)}."
                )
            if n not in out:
                out.append(n)
    return out


@dataclasses.dataclass(frozen=True)
class ProcessRow:
    """A ProcessBench item with its id (`ProcessBench/<split>/<row>`)."""

    id: str
    item: ProcessItem


def load_process_bench(
    data_dir: str | os.PathLike, split: str, *, on_bad_row: BadRows = BadRows.ERROR
) -> Loaded[ProcessRow]:
    """One ProcessBench split from `data_dir/ProcessBench/` (the hub's `<split>.json` or
    `<split>-*.parquet` / `data/<split>-*.parquet` files)."""
    if split not in PROCESS_BENCH_SPLITS:
        raise ValueError(f"unknown ProcessBench split {split!r}; known: {PROCESS_BENCH_SPLITS}.")
    files = data_files(
        dataset_dir(data_dir, PROCESS_BENCH, PROCESS_BENCH_HUB_ID),
        (f"{split}.json", f"{split}.jsonl", f"{split}.parquet", f"{split}-*"),
        PROCESS_BENCH_HUB_ID,
    )
    source = f"{PROCESS_BENCH}/{split}"
    return _convert(files, lambda row, pid: ProcessRow(pid, _process_item(row)), source, on_bad_row)
