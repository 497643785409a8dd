r"""Prompts and gold answers from local files, and the shuffled stream of them that training reads.

Nothing here touches the network (DESIGN.md): every loader takes a local path (a file or a glob
such as `DIR/data/train-*.parquet`) and a missing file is an error that names the path and the
command that fetches it on a machine with internet access.

Layouts:
  * `load_problems(path, Fields(...))`: any JSONL / JSON-array / parquet file of records with a
    question and an answer field. Field names are dotted paths into the record
    (`"reward_model.ground_truth"`; an integer segment indexes a list: `"prompt.1.content"`).
  * `load_eurus2(path)`: a local copy of PRIME-RL/Eurus-2-RL-Data (TANGO_SPEC §4.1): rows with
    `ability == "math"`, question = `prompt[1].content` without the "Present the answer in LaTex
    format" suffix, answer = `reward_model.ground_truth`.
  * `load_benchmark(name, path)`: the math benchmarks of TANGO_SPEC §7, as published on the hub;
    `BENCHMARKS` holds each one's field names (the ones the official
    `prepare_eval_benchmarks.py` reads), so adding a benchmark is one table row.
  * Files already preprocessed by the official scripts (verl parquet: `prompt`, `reward_model`,
    `extra_info`) load with `load_problems(path, VERL_FIELDS)`.

`PromptStream` deals the problems out in batches, reshuffled every epoch from (seed, epoch),
dropping the last incomplete batch (as the official `RandomSampler` + `drop_last=True`, RT:526).
Its `position` (seed, epoch, index) is all a checkpoint needs to resume the exact order.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np


@dataclasses.dataclass(frozen=True)
class Problem:
    """A prompt of the task and its gold answer.

    question: the clean question (no template; `templates.render_generator_prompt` wraps it).
    answer: the gold answer as text, as the outcome reward wants it (`\\boxed{answer}`).
    source: the dataset's name. id: unique within the source (a row number for files).
    """

    question: str
    answer: str
    source: str
    id: str


@dataclasses.dataclass(frozen=True)
class Fields:
    """Where a record keeps its question and answer: dotted paths, integer segments index
    lists ("prompt.1.content"). A key that itself contains dots is matched whole first."""

    question: str = "question"
    answer: str = "answer"


@dataclasses.dataclass(frozen=True)
class Benchmark:
    hub_id: str  # the dataset the official code loads (TANGO_SPEC §7)
    fields: Fields


BENCHMARKS: dict[str, Benchmark] = {
    "MATH500": Benchmark("HuggingFaceH4/MATH-500", Fields("problem", "answer")),
    "AIME2024": Benchmark("Maxwell-Jia/AIME_2024", Fields("Problem", "Answer")),
    "AIME2025": Benchmark("yentinglin/aime_2025", Fields("problem", "answer")),
    "AMC2023": Benchmark("math-ai/amc23", Fields("question", "answer")),
    "OlympiadBench": Benchmark("knoveleng/OlympiadBench", Fields("question", "answer")),
}
VERL_FIELDS = Fields("extra_info.question", "reward_model.ground_truth")
EURUS2_HUB_ID = "PRIME-RL/Eurus-2-RL-Data"
EURUS2_FIELDS = Fields("prompt.1.content", "reward_model.ground_truth")
EURUS2_SUFFIX = "\nPresent the answer in LaTex format: \\boxed{Your answer}"
_DATA_SUFFIXES = (".jsonl", ".json", ".parquet")


# --------------------------------------------------------------------------------------------
# Reading records.


def _how_to_get(hub_id: str | None) -> str:
    repo = hub_id or "<owner>/<dataset>"
    return (
        "Runs never download data. On a machine with internet access run `huggingface-cli "
        f"download --repo-type dataset {repo} --local-dir DIR`, copy DIR here, and pass the "
        "path of its .parquet or .jsonl file (a glob such as 'DIR/data/train-*.parquet' works)."
    )


def resolve_files(path: str | os.PathLike, *, hub_id: str | None = None) -> list[Path]:
    """The data files that `path` (a file or a glob) names, sorted; FileNotFoundError naming the
    path and how to obtain the data when there are none."""
    pattern = os.fspath(path)
    if glob.has_magic(pattern):
        files = sorted(Path(p) for p in glob.glob(pattern))
    else:
        files = [Path(pattern)] if Path(pattern).is_file() else []
    if not files:
        raise FileNotFoundError(f"{pattern}: no such data file. {_how_to_get(hub_id)}")
    for file in files:
        if file.suffix not in _DATA_SUFFIXES:
            raise ValueError(f"{file}: unknown data format {file.suffix!r}; use {_DATA_SUFFIXES}.")
    return files


def _is_index(part: str) -> bool:
    return part.lstrip("-").isdigit()


def _lookup(record: Any, dotted: str) -> Any:
    """record[dotted] for a whole key, else the dotted path walked segment by segment.
    KeyError, IndexError or TypeError when the record has no such field."""
    if isinstance(record, dict) and dotted in record:
        return record[dotted]
    value = record
    for part in dotted.split("."):
        if isinstance(value, list | tuple) and _is_index(part):
            value = value[int(part)]
        elif isinstance(value, dict):
            value = value[part]
        else:
            raise KeyError(part)
    return value


def _read_json_records(file: Path) -> list[Any]:
    if file.suffix == ".json":
        with file.open(encoding="utf-8") as f:
            records = json.load(f)
        if not isinstance(records, list):
            raise ValueError(f"{file}: a .json data file must hold a list of records.")
        return records
    records = []
    with file.open(encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{file}:{line_no}: not a JSON record ({e.msg}).") from None
    return records


def _read_parquet_column(file: Path, dotted: str) -> list[Any]:
    """One dotted field of every row, extracted column-wise with Arrow: a field nested in a big
    column (Eurus-2's `prompt`, which carries a long system prompt in every row) is read
    without building Python objects for the rest of it."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    names = pq.read_schema(file).names
    head, *rest = [dotted] if dotted in names else dotted.split(".")
    if head not in names:
        raise KeyError(head)
    column = pq.read_table(file, columns=[head]).column(head)
    for part in rest:
        column = (
            pc.list_element(column, int(part)) if _is_index(part) else pc.struct_field(column, part)
        )
    return column.to_pylist()


class MissingFieldError(ValueError):
    """A record of `file` has no field `field`; `available` are the top-level fields of that
    record (of the file, for parquet), so a caller can say which one was meant and how to pass
    it (the run config names its flag: data/prompts.py)."""

    def __init__(self, file: Path, field: str, available: Sequence[str], row: int | None):
        self.file, self.field, self.available, self.row = file, field, list(available), row
        where = "a record" if row is None else f"record {row}"
        super().__init__(
            f"{file}: {where} has no field {field!r} (its fields: {self.available}). Pass "
            "Fields(question=..., answer=...) with the file's own field names (dotted paths "
            "for nested fields: 'a.b', 'a.0.b')."
        )


def _read_column(file: Path, dotted: str, records: list[Any] | None) -> list[Any]:
    """One dotted field of every record of `file`; MissingFieldError naming the file, the
    field and the record's fields when a record lacks it."""
    import pyarrow as pa

    if records is None:
        try:
            return _read_parquet_column(file, dotted)
        except (KeyError, IndexError, TypeError, pa.ArrowException):
            import pyarrow.parquet as pq

            raise MissingFieldError(file, dotted, pq.read_schema(file).names, None) from None
    out = []
    for row, record in enumerate(records):
        try:
            out.append(_lookup(record, dotted))
        except (KeyError, IndexError, TypeError):
            keys = list(record) if isinstance(record, dict) else []
            raise MissingFieldError(file, dotted, keys, row) from None
    return out


def read_columns(
    path: str | os.PathLike, paths: Sequence[str], *, hub_id: str | None = None
) -> list[list[Any]]:
    """The fields `paths` (dotted) of every record of the files at `path`, in file order: one
    list per path."""
    columns: list[list[Any]] = [[] for _ in paths]
    for file in resolve_files(path, hub_id=hub_id):
        records = None if file.suffix == ".parquet" else _read_json_records(file)
        for column, dotted in zip(columns, paths):
            column.extend(_read_column(file, dotted, records))
    return columns


def _answer_text(value: Any, where: str) -> str:
    """Gold answers as text: numbers as written (AIME answers are ints), a list of answers
    (multi-answer problems) joined with ", "."""
    if isinstance(value, str) and value.strip():
        return value.strip()
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, list | tuple) and value:
        return ", ".join(_answer_text(v, where) for v in value)
    raise ValueError(f"{where}: answer {value!r} is empty or not text/number; fix the data file.")


def _problems(questions, answers, *, source: str, file: str, ids: Sequence[int]) -> list[Problem]:
    """Problems from parallel columns; ids[i] is record i's row in the file(s)."""
    out = []
    for row, (q, a) in enumerate(zip(questions, answers)):
        where = f"{file} record {ids[row]}"
        if not isinstance(q, str) or not q.strip():
            raise ValueError(f"{where}: question {q!r} is empty or not text; fix the data file.")
        out.append(Problem(q.strip(), _answer_text(a, where), source, f"{source}/{ids[row]}"))
    return out


# --------------------------------------------------------------------------------------------
# Loaders.


def load_problems(
    path: str | os.PathLike,
    fields: Fields = Fields(),
    *,
    source: str | None = None,
    hub_id: str | None = None,
) -> list[Problem]:
    """Problems from JSONL / JSON / parquet records at `path` (a file or a glob).

    source: the name in each Problem (default: the file name without suffix); ids are
    f"{source}/{row}" with rows counted over the matched files in sorted order.
    hub_id: the hub dataset the file comes from, for the error message when it is missing.
    """
    questions, answers = read_columns(path, [fields.question, fields.answer], hub_id=hub_id)
    source = source or Path(os.fspath(path)).stem
    ids = range(len(questions))
    return _problems(questions, answers, source=source, file=os.fspath(path), ids=ids)


def load_eurus2(path: str | os.PathLike) -> list[Problem]:
    """The math rows of a local Eurus-2-RL-Data split (`ability == "math"`, TANGO_SPEC §4.1).

    Question: the user turn `prompt[1].content` without the trailing instruction
    "\\nPresent the answer in LaTex format: \\boxed{Your answer}" (the generator template asks
    for the boxed answer itself), stripped; ids keep the row number in the file (before
    filtering), so a problem can be traced back.
    """
    abilities, questions, answers = read_columns(
        path, ["ability", EURUS2_FIELDS.question, EURUS2_FIELDS.answer], hub_id=EURUS2_HUB_ID
    )
    rows = [i for i, ability in enumerate(abilities) if ability == "math"]
    return _problems(
        [questions[i].replace(EURUS2_SUFFIX, "") for i in rows],
        [answers[i] for i in rows],
        source="Eurus-2-RL-Data",
        file=os.fspath(path),
        ids=rows,
    )


def load_benchmark(name: str, path: str | os.PathLike) -> list[Problem]:
    """A math benchmark of TANGO_SPEC §7 from a local copy of its hub dataset (`BENCHMARKS`).
    For a file in another layout, use load_problems with its field names."""
    if name not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r}; known: {sorted(BENCHMARKS)}.")
    bench = BENCHMARKS[name]
    return load_problems(path, bench.fields, source=name, hub_id=bench.hub_id)


# --------------------------------------------------------------------------------------------
# The training stream.


@dataclasses.dataclass(frozen=True)
class StreamPosition:
    """Where a prompt stream stands: the next batch is batch `index` of epoch `epoch` of the
    order drawn from `seed`. Plain ints: `dataclasses.asdict` / `StreamPosition(**d)` go
    through a checkpoint's JSON."""

    seed: int
    epoch: int = 0
    index: int = 0


class PromptStream:
    """Batches of `batch_size` problems, shuffled per epoch, last incomplete batch dropped,
    epochs without end (the run's step budget decides when to stop, as in the official code).

        stream = PromptStream(problems, batch_size=256, seed=1)
        batch = stream.next_batch()                      # list[Problem]
        saved = dataclasses.asdict(stream.position)      # with the checkpoint
        stream = PromptStream(problems, 256, seed=1, position=StreamPosition(**saved))

    The order of epoch e is a permutation keyed by the raw 64-bit output of PCG64 seeded with
    SeedSequence([seed, e]) (NumPy keeps that bit stream fixed across releases), so it depends
    only on (seed, e, number of problems).
    """

    def __init__(
        self,
        problems: Sequence[Problem],
        batch_size: int,
        *,
        seed: int,
        position: StreamPosition | None = None,
    ):
        if batch_size < 1 or len(problems) < batch_size:
            raise ValueError(
                f"batch_size ({batch_size}) must be >= 1 and at most the number of problems "
                f"({len(problems)}); lower the batch size or add data."
            )
        self.problems, self.batch_size = list(problems), batch_size
        self.batches_per_epoch = len(self.problems) // batch_size
        position = StreamPosition(seed) if position is None else position
        if position.seed != seed or position.epoch < 0:
            raise ValueError(
                f"position {position} does not fit a stream with seed {seed}; resume with the "
                "seed the checkpoint was written with."
            )
        if not 0 <= position.index < self.batches_per_epoch:
            raise ValueError(
                f"position.index ({position.index}) must be in [0, {self.batches_per_epoch}): "
                f"{len(self.problems)} problems in batches of {batch_size}. Did the data or the "
                "batch size change since the checkpoint?"
            )
        self._position = position
        self._order_epoch, self._order = -1, np.zeros(0, np.int64)

    @property
    def position(self) -> StreamPosition:
        """Where the next batch starts: save it with a checkpoint to resume the exact order."""
        return self._position

    def order(self, epoch: int) -> np.ndarray:
        """The permutation of problem indices for `epoch` ([N] int64)."""
        if epoch != self._order_epoch:
            bits = np.random.PCG64(np.random.SeedSequence([self._position.seed, epoch]))
            keys = bits.random_raw(len(self.problems))
            self._order_epoch, self._order = epoch, np.argsort(keys, kind="stable")
        return self._order

    def next_batch(self) -> list[Problem]:
        epoch, index = self._position.epoch, self._position.index
        rows = self.order(epoch)[index * self.batch_size : (index + 1) * self.batch_size]
        index += 1
        if index == self.batches_per_epoch:
            epoch, index = epoch + 1, 0
        self._position = StreamPosition(self._position.seed, epoch, index)
        return [self.problems[i] for i in rows]

    def __iter__(self) -> Iterator[list[Problem]]:
        while True:
            yield self.next_batch()
