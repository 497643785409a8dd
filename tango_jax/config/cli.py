"""The training command's front door: its help, the field listing, the config file check and
list-valued overrides, all before absl and ml_collections see the command line
(`parse_config_flags`, shared by every command that reads a run config: train, plan_memory).

    python -m tango_jax.train --help                                          # usage(), exit 0
    python -m tango_jax.train --config configs/tiny_arith.py --list_fields    # field_lines()
    python -m tango_jax.train --config configs/tiny_arith.py --dry_run        # train.py

`check_config_file` runs the config file's `get_config` once, so that a missing file or a bad
variant (`configs/tiny_arith.py:gpro`) is one line naming the fix instead of ml_collections'
traceback. `normalise_sequences` rewrites the value of every override of a list field
(`tuple[str, ...]`, `tuple[int, ...]`) into the Python literal ml_collections reads, so that
`--config.wandb.tags=a,b`, `--config.wandb.tags='[a,b]'` and `--config.wandb.tags='("a","b")'`
mean the same two tags (ml_collections alone turns `a,b` into the one tag 'a,b').
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import inspect
import io
import re
import textwrap
import tokenize
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tango_jax.config.files import load_config_file, split_config_spec
from tango_jax.schema import ConfigError, check_path

HELP_FLAGS = ("--help", "-help", "-h", "--helpshort", "-?")
SEQUENCE_SYNTAX = "a,b  or  '[a,b]'  or  '(\"a\", \"b\")'  (an empty list: '()')"


# --- help ---------------------------------------------------------------------------------------


def usage(configs_dir: Path = Path("configs")) -> str:
    """The text of `--help`: the command line, its flags, examples, and the config files found
    in `configs_dir` (the first line of each one's docstring)."""
    lines = [
        "Train a Tango generator and its generative process verifier (arXiv 2505.15034).",
        "",
        "usage: python -m tango_jax.train --config configs/NAME.py[:VARIANT] "
        "[--config.FIELD=VALUE ...] [--list_fields] [--dry_run]",
        "",
        "  --config FILE[:VARIANT]  the run's config file; its docstring lists its variants",
        "  --config.a.b=VALUE       set one field, e.g. --config.schedule.total_steps=100;",
        f"                           a list field: {SEQUENCE_SYNTAX}",
        "  --list_fields            list every field with its type, value, default and meaning,",
        "                           then exit (with --config: that config's values)",
        "  --dry_run                run every pre-run check, print the resolved config as JSON",
        "                           on stdout, write nothing, exit 0",
        "  --help                   this text",
        "",
        "examples:",
        "  python -m tango_jax.train --config configs/tiny_arith.py",
        "  python -m tango_jax.train --config configs/tiny_arith.py:grpo --config.seed=1 \\",
        "      --config.run_dir=runs/grpo_s1",
        "  python -m tango_jax.train --config configs/tiny_arith.py --list_fields | grep data.",
        "  python -m tango_jax.train --config configs/tiny_arith.py --config.data.source=jsonl \\",
        "      --config.data.train_path=my/train.jsonl --config.data.eval_path=my/test.jsonl "
        "--dry_run",
        "",
        "Overrides, list syntax, variants and resuming: docs/config.md. Own data: docs/data.md.",
    ]
    found = sorted(configs_dir.glob("*.py")) if configs_dir.is_dir() else []
    if found:
        lines += ["", f"config files in {configs_dir}/:"]
        for path in found:
            lines.append(f"  {path!s:<34} {_summary(path)}")
    return "\n".join(lines)


def _summary(path: Path) -> str:
    """The start of a config file's docstring: its first paragraph, cut to about 80 characters."""
    try:
        doc = ast.get_docstring(ast.parse(path.read_text()))
    except (SyntaxError, UnicodeDecodeError):
        return ""
    paragraph = " ".join((doc or "").strip().split("\n\n")[0].split())
    return paragraph if len(paragraph) <= 80 else paragraph[:77].rsplit(" ", 1)[0] + " ..."


# --- the config file ----------------------------------------------------------------------------


def check_config_file(spec: str) -> None:
    """Runs `get_config` of the config file `spec` names; ConfigError naming the file and the
    fix when the file is missing or its `get_config` refuses the variant (a ValueError)."""
    path, arg = split_config_spec(spec)
    try:
        module = load_config_file(path)
    except (FileNotFoundError, ConfigError) as e:
        raise ConfigError(f"--config={spec}: {e}") from None
    try:
        module.get_config() if arg is None else module.get_config(arg)
    except ValueError as e:  # the config's own check of its variant string
        raise ConfigError(f"--config={spec}: {e}") from None


def config_spec(argv: Sequence[str]) -> str | None:
    """The value of `--config FILE[:VARIANT]` / `--config=FILE[:VARIANT]` in `argv`, if given."""
    for i, arg in enumerate(argv[1:], 1):
        name, eq, value = arg.lstrip("-").partition("=")
        if arg.startswith("-") and name == "config":
            return value if eq else (argv[i + 1] if i + 1 < len(argv) else None)
    return None


def override_paths(argv: Sequence[str]) -> list[tuple[str, str]]:
    """(flag as given, field path) of each `--config.a.b[=v]` / `--noconfig.a.b` argument."""
    out = []
    for arg in argv[1:]:
        name = arg.lstrip("-").split("=", 1)[0]
        for prefix in ("config.", "noconfig."):
            if arg.startswith("-") and name.startswith(prefix):
                out.append((f"--{name}", name.removeprefix(prefix)))
    return out


def parse_config_flags(argv: Sequence[str]) -> list[str]:
    """absl's parse of the command line of a command that reads a run config (`--config
    FILE[:VARIANT] [--config.a.b=VALUE ...]`: train, plan_memory), checked first: the config
    file and its variant (`check_config_file`), every override's field path against
    `RunConfig` (a misspelt field with its close matches), list values in the syntax users
    write (`normalise_sequences`), a value of the wrong type. Every mistake is a ConfigError of
    one line naming the fix, never ml_collections' or absl's traceback. Imports JAX (every
    config file does): seconds."""
    from absl import flags

    from tango_jax.schema import UnknownFieldError

    spec = config_spec(argv)
    if spec is not None:
        check_config_file(spec)
    from tango_jax.config.run import RunConfig

    for flag, path in override_paths(argv):
        try:
            check_path(RunConfig, path, root=flag.removesuffix(f".{path}"))
        except UnknownFieldError as e:
            hint = f"; did you mean {e.hint}?" if e.suggestions else "."
            raise ConfigError(
                f"{flag}: unknown field{hint} Known fields of {e.group}: {', '.join(e.known)}."
            ) from None
    argv = normalise_sequences(argv, RunConfig)
    try:
        return flags.FLAGS(argv)
    except flags.Error as e:  # a value of the wrong type
        raise ConfigError(str(e)) from None


# --- list-valued overrides ----------------------------------------------------------------------


def _unwrap_optional(tp: Any) -> Any:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def sequence_element(tp: Any) -> type | None:
    """The element type of a `tuple[X, ...]` field whose X is str, int, float or bool; None
    for any other field (a tuple of groups, such as vLLM servers, is no command-line value)."""
    tp = _unwrap_optional(tp)
    args = typing.get_args(tp)
    is_list = typing.get_origin(tp) is tuple and len(args) == 2 and args[1] is Ellipsis
    return args[0] if is_list and args[0] in (str, int, float, bool) else None


def _bare(item: str, element: type, flag: str) -> Any:
    item = item.strip()
    if len(item) >= 2 and item[0] == item[-1] and item[0] in "'\"":
        item = item[1:-1]
    if element is str:
        return item
    try:
        if element is bool:
            if item.lower() not in ("true", "false"):
                raise ValueError(item)
            return item.lower() == "true"
        return element(item)
    except ValueError:
        raise ConfigError(
            f"{flag}: {item!r} is not a {element.__name__}; write a list as {SEQUENCE_SYNTAX}."
        ) from None


def parse_sequence(value: str, element: type, flag: str) -> tuple:
    """A list as users write it: `a,b`, `[a,b]`, `["a","b"]`, `("a","b")`, `a` (one item) or
    `()` / `[]` / `` (empty). An item with a comma in it needs the quoted form."""
    text = value.strip()
    if text[:1] in "([" and text[-1:] in ")]":
        try:
            literal = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            literal = None  # unquoted words: [a,b]
        if isinstance(literal, list | tuple):
            return tuple(_bare(str(v), element, flag) if element is not str else v for v in literal)
        text = text[1:-1]
    items = [t for t in text.split(",")]
    if items and not items[-1].strip():  # a trailing comma: "a,"
        items.pop()
    if any(not t.strip() for t in items):
        raise ConfigError(f"{flag}: empty item in {value!r}; write a list as {SEQUENCE_SYNTAX}.")
    return tuple(_bare(t, element, flag) for t in items)


def normalise_sequences(argv: Sequence[str], schema: type) -> list[str]:
    """`argv` with the value of every `--config.a.b=VALUE` (or `--config.a.b VALUE`) override of
    a list field of `schema` rewritten as the Python literal of the parsed tuple."""
    out = list(argv)
    i = 0
    while i < len(out):
        arg = out[i]
        name, eq, value = arg.lstrip("-").partition("=")
        if arg.startswith("-") and name.startswith("config."):
            try:
                element = sequence_element(check_path(schema, name.removeprefix("config.")))
            except ConfigError:
                element = None  # an unknown field: train.py names it
            if element is not None and eq:
                out[i] = f"--{name}={parse_sequence(value, element, f'--{name}')!r}"
            elif element is not None and i + 1 < len(out):
                out[i + 1] = repr(parse_sequence(out[i + 1], element, f"--{name}"))
                i += 1
        i += 1
    return out


# --- the field listing --------------------------------------------------------------------------


def field_docs(cls: type) -> dict[str, str]:
    """Each field's comment in the source of dataclass `cls`: the comment lines right above it
    and the comment at the end of its line (the project documents every field so)."""
    try:
        src = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    comments = {
        tok.start[0]: tok.string.lstrip("#").strip()
        for tok in tokenize.generate_tokens(io.StringIO(src).readline)
        if tok.type == tokenize.COMMENT
    }
    lines = src.splitlines()
    names = {f.name for f in dataclasses.fields(cls)}
    docs = {}
    for number, line in enumerate(lines, 1):
        match = re.match(r" {4}(\w+)\s*:", line)
        if not match or match.group(1) not in names:
            continue
        above, j = [], number - 1
        while j >= 1 and lines[j - 1].strip().startswith("#"):
            above.insert(0, comments[j])
            j -= 1
        docs[match.group(1)] = " ".join(
            [*above, *([comments[number]] if number in comments else [])]
        )
    return docs


def type_name(tp: Any) -> str:
    """How a field's type reads in the listing: str, int, 'a | b' for enums, list[str], ..."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    if tp is type(None):
        return "None"
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return " | ".join(repr(m.value) for m in tp)
    if origin is tuple:
        inner = type_name(args[0]) if args and args[-1] is Ellipsis else "..."
        return f"list[{inner}]"
    if origin is dict:
        return "dict"
    return getattr(tp, "__name__", str(tp))


def field_lines(schema: type, values: dict, defaults: dict, prefix: str = "") -> list[str]:
    """One line per leaf field present in `values` (a ConfigDict's `to_dict()`):
    `path: type = value  # meaning`, with `(default X)` where `values` differs from
    `defaults` (the schema's). Derived fields are absent from `values`, so not listed."""
    hints = typing.get_type_hints(schema)
    docs = field_docs(schema)
    out = []
    for f in dataclasses.fields(schema):
        if f.name not in values:
            continue
        tp, value, default = hints[f.name], values[f.name], defaults.get(f.name)
        path = f"{prefix}{f.name}"
        group = _unwrap_optional(tp)
        if dataclasses.is_dataclass(group) and isinstance(value, dict):
            out += field_lines(group, value, default or {}, prefix=f"{path}.")
            continue
        text = f"{path}: {type_name(tp)} = {_shown(value)}"
        if _shown(value) != _shown(default):
            text += f"  (default {_shown(default)})"
        if docs.get(f.name):
            text += f"  # {docs[f.name]}"
        out.append(text)
    return out


def _shown(value: Any) -> str:
    if isinstance(value, tuple):
        value = list(value)
    return repr(value)
