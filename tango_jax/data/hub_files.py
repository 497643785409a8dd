"""Local copies of hub dataset repositories (`huggingface-cli download --repo-type dataset <hub
id> --local-dir <dir>`): which data files of a directory to read, and their rows as dicts.

    directory = dataset_dir(data_dir, "BGQA", hub_id)   # data_dir/BGQA, or the hub cache's
    for path in data_files(directory, ("*test*",), hub_id):
        for row in read_rows(path): ...

`data_dir` may also be a Hugging Face hub cache (`~/.cache/huggingface/hub`, or `$HF_HOME`
holding `hub/`), where `huggingface-cli download` without --local-dir and
`datasets.load_dataset` leave a repository's files: `datasets--<org>--<name>/snapshots/<rev>/`
holds the same files as a --local-dir download (`dataset_dir` picks the revision
`refs/main` names, else the newest snapshot).

Parquet, JSON, JSONL and arrow files are read with the `datasets` library, in memory; a
`datasets.save_to_disk` directory works too. Nothing is downloaded: a missing directory or
file is a FileNotFoundError naming the expected path and the command that fetches it.
"""

from __future__ import annotations

import fnmatch
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

_READERS = {".parquet": "parquet", ".json": "json", ".jsonl": "json", ".arrow": "arrow"}


def how_to_get(hub_id: str, target: Path) -> str:
    return (
        "Runs never download data. On a machine with internet access run `huggingface-cli "
        f"download --repo-type dataset {hub_id} --local-dir {target}` and copy the directory "
        f"here, or point --data_dir at a Hugging Face hub cache that holds {hub_id} "
        "(docs/evaluation.md lists every benchmark)."
    )


def hub_cache_repo(hub_id: str) -> str:
    """The folder name of a dataset repository in a Hugging Face hub cache."""
    return "datasets--" + hub_id.replace("/", "--")


def dataset_dir(data_dir: str | os.PathLike, name: str, hub_id: str) -> Path:
    """Where dataset `name` lies under `data_dir`: `data_dir/<name>` (a --local-dir download,
    or any folder of its files) when it exists; else the snapshot of `hub_id` in a hub cache at
    `data_dir` (`data_dir/datasets--<org>--<repo>` or `data_dir/hub/datasets--<org>--<repo>`);
    else `data_dir/<name>`, which `data_files` then reports missing."""
    data_dir = Path(data_dir)
    local = data_dir / name
    if local.exists():
        return local
    for repo in (data_dir / hub_cache_repo(hub_id), data_dir / "hub" / hub_cache_repo(hub_id)):
        if repo.is_dir():
            return _snapshot(repo, hub_id)
    return local


def _snapshot(repo: Path, hub_id: str) -> Path:
    """The snapshot of a cached repository: the revision refs/main names, else the newest."""
    snapshots = repo / "snapshots"
    ref = repo / "refs" / "main"
    if ref.is_file() and (snapshots / ref.read_text().strip()).is_dir():
        return snapshots / ref.read_text().strip()
    found = sorted(
        (p for p in snapshots.iterdir() if p.is_dir()) if snapshots.is_dir() else [],
        key=lambda p: p.stat().st_mtime,
    )
    if not found:
        raise FileNotFoundError(
            f"{repo}: a hub cache entry of {hub_id} without snapshots; download it again."
        )
    return found[-1]


def _is_saved_dataset(path: Path) -> bool:
    return (path / "state.json").is_file() and (path / "dataset_info.json").is_file()


def data_files(directory: Path, patterns: Sequence[str], hub_id: str) -> list[Path]:
    """The data files (parquet, JSON, JSONL, arrow) under `directory` whose name or relative
    path matches one of `patterns`, sorted; hidden directories (the download tool's .cache)
    are ignored. A `save_to_disk` directory is returned as itself."""
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory}: no such directory. {how_to_get(hub_id, directory)}")
    if _is_saved_dataset(directory):
        return [directory]
    found = []
    for path in sorted(directory.rglob("*")):
        rel = path.relative_to(directory)
        if any(part.startswith(".") for part in rel.parts) or path.suffix not in _READERS:
            continue
        names = (path.name, rel.as_posix())
        if any(fnmatch.fnmatch(n, p) for n in names for p in patterns):
            found.append(path)
    if not found:
        raise FileNotFoundError(
            f"{directory}: no data file matching {list(patterns)} (parquet, json, jsonl or "
            f"arrow). {how_to_get(hub_id, directory)}"
        )
    return found


def read_rows(path: Path) -> Iterator[dict]:
    """The rows of one data file (or `save_to_disk` directory) as dicts, read by `datasets`
    in memory (no cache files written next to the user's data or in ~/.cache)."""
    import datasets

    datasets.disable_progress_bars()
    if path.is_dir():
        yield from datasets.load_from_disk(str(path), keep_in_memory=True)
        return
    with tempfile.TemporaryDirectory(prefix="tango_jax_ds_") as cache:
        try:
            table = datasets.load_dataset(
                _READERS[path.suffix],
                data_files=str(path),
                split="train",
                cache_dir=cache,
                keep_in_memory=True,
            )
        except Exception as e:  # the datasets library wraps parse errors in its own types
            cause = e.__cause__ or e
            raise ValueError(f"{path}: cannot be read as {path.suffix[1:]}: {cause}") from e
        yield from table
