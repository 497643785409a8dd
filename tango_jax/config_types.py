"""Converting a config dict (ml_collections) into typed, frozen dataclasses, once.

`from_dict(RunConfig, config.to_dict())` walks the dataclass type: every key must be a field
(an unknown key is an error naming its path, with close matches), every value is converted to
the field's type (enums by value, tuples, nested dataclasses, Optionals) or rejected with a
message naming the path, the value, the expected type and the allowed values. Missing keys take
the dataclass defaults. Library code only ever sees the dataclasses.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import types
import typing
from typing import Any, TypeVar

T = TypeVar("T")


class ConfigError(ValueError):
    """A config field with a wrong name, type or value (raised before anything heavy starts)."""


def _origin(tp):
    return typing.get_origin(tp)


def _convert(tp: Any, value: Any, path: str) -> Any:
    if tp is Any:
        return value
    origin = _origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(arg, value, path)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(
            errors[0] if len(errors) == 1 else f"{path}: {value!r} fits none of {args}."
        )
    if dataclasses.is_dataclass(tp):
        if dataclasses.is_dataclass(value) and isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected a group of fields ({tp.__name__}), got {value!r}.")
        return from_dict(tp, value, path=path)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        if isinstance(value, tp):
            return value
        try:
            return tp(value)
        except ValueError:
            allowed = [m.value for m in tp]
            raise ConfigError(f"{path}: {value!r} is not one of {allowed}.") from None
    if origin is tuple:
        if isinstance(value, str) or not isinstance(value, list | tuple):
            raise ConfigError(f"{path}: expected a list, got {value!r}.")
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(args[0], v, f"{path}[{i}]") for i, v in enumerate(value))
        if len(args) != len(value):
            raise ConfigError(f"{path}: expected {len(args)} values, got {value!r}.")
        return tuple(_convert(a, v, f"{path}[{i}]") for i, (a, v) in enumerate(zip(args, value)))
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected a mapping, got {value!r}.")
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{path}: expected true/false, got {value!r}.")
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
            raise ConfigError(f"{path}: expected an integer, got {value!r}.")
        return int(value)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{path}: expected a number, got {value!r}.")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{path}: expected a string, got {value!r}.")
        return value
    raise TypeError(f"config field {path} has an unsupported type {tp}.")


def from_dict(cls: type[T], data: dict[str, Any], *, path: str = "config") -> T:
    """Builds dataclass `cls` from `data` (nested dicts), validating names and types."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        key = unknown[0]
        close = difflib.get_close_matches(key, fields, n=3)
        hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        raise ConfigError(
            f"{path}.{key}: unknown field.{hint} Known fields of {path}: {sorted(fields)}."
        )
    kwargs = {k: _convert(hints[k], v, f"{path}.{k}") for k, v in data.items()}
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (ValueError, TypeError) as e:  # a dataclass's own __post_init__ validation
        raise ConfigError(f"{path}: {e}") from e


def to_dict(obj: Any) -> Any:
    """The inverse of `from_dict`: plain JSON-able values (enums by value)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.init}
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, tuple | list):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj
