"""The config schema kit: frozen dataclasses are the only schema of a run's config. It imports
nothing from tango_jax, so every component can declare its own config dataclass with it.

    config_dict(RunConfig)           the base ConfigDict: every field with its default
    check_path(RunConfig, "a.b.c")   is `a.b.c` a field? (command-line overrides, before absl)
    from_dict(RunConfig, d)          nested dict -> validated dataclasses, errors naming the path
    to_dict(run_config)              the inverse: plain JSON-able values, secrets redacted

Each field's own value checks (`check_fields` and its rules) are at the end of this file.

Fields, defaults and their documentation live only in the dataclasses (a comment per field).
`config_dict` turns them into the ml_collections ConfigDict that configs/*.py start from:
enums by value, tuples stay tuples (ml_collections overrides only tuples from the command
line: `--config.a.urls='("http://a:8100",)'`), a None default becomes a placeholder of the
type hint's other type, so `--config.a.b=2.0` can set it.

Derived fields. A field of an embedded dataclass that its owner sets (a vLLM server's dtype is
its weight sync's; the schedule learns from the verifier config whether the verifier trains) is
declared where the owner embeds it, with what sets it:

    schedule: Schedule = dataclasses.field(
        default=Schedule(),
        metadata=derived(verifier_trainable=("verifier.enable and verifier.trainable",
                                             lambda c: c.verifier.enable and c.verifier.trainable)),
    )

It is no config field (not in the ConfigDict, refused by `from_dict`, left out of `to_dict`):
`from_dict` computes it from the owner's other fields before building the embedded dataclass
(whose own checks then see the final values), and the owner's `__post_init__` calls
`apply_derived(self)` so direct construction and `dataclasses.replace` get it too. Paths may
be dotted (`"optimizer.total_steps"`); the function receives the owner (fields already
converted).
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import math
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from ml_collections import config_dict as mlc

T = TypeVar("T")
_DERIVED = "tango_jax.derived"


class ConfigError(ValueError):
    """A config field with a wrong name, type or value (raised before anything heavy starts)."""


class FieldError(ConfigError):
    """Field `field` of the dataclass being built holds `value`, which breaks `rule` (raised by
    a dataclass's `__post_init__`; `from_dict` prefixes the dataclass's path, so the message
    names the full field: `config.generator.rollout.top_p (0.0) must be in (0, 1]`)."""

    def __init__(self, field: str, value: Any, rule: str):
        self.field, self.value, self.rule = field, value, rule
        super().__init__(f"{field} ({value!r}) {rule}")

    def under(self, path: str) -> FieldError:
        return FieldError(f"{path}.{self.field}", self.value, self.rule)


class UnknownFieldError(ConfigError):
    """`group.name` is not a field; `suggestions` are the close matches among `known`."""

    def __init__(self, group: str, name: str, known: list[str]):
        self.group, self.name, self.known = group, name, sorted(known)
        self.suggestions = difflib.get_close_matches(name, self.known, n=3)
        hint = f" Did you mean {self.hint}?" if self.suggestions else ""
        super().__init__(
            f"{group}.{name}: unknown field.{hint} Known fields of {group}: {self.known}."
        )

    @property
    def hint(self) -> str:
        return " or ".join(repr(s) for s in self.suggestions)


def derived(**paths: tuple[str, Callable[[Any], Any]]) -> dict[str, Any]:
    """Field metadata: `path=(what sets it, function of the owner)` per derived subfield."""
    return {_DERIVED: paths}


_SECRET = "secret"
REDACTED = "<redacted>"  # what `to_dict` writes for a set secret_field


def secret_field() -> Any:
    """A field holding a secret (an API key; default None): left out of repr, and written as
    REDACTED by `to_dict`, so config.json, W&B and logs never hold it."""
    return dataclasses.field(default=None, repr=False, metadata={_SECRET: True})


def _fields(cls) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(cls) if f.init]


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    raise TypeError(f"config field {f.name} has no default.")


def _nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    """{"a.b": 1, "c": 2} -> {"a": {"b": 1}, "c": 2}."""
    out: dict[str, Any] = {}
    for path, value in flat.items():
        *heads, last = path.split(".")
        node = out
        for h in heads:
            node = node.setdefault(h, {})
        node[last] = value
    return out


def _merge(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _derived_below(f: dataclasses.Field, inherited: Mapping[str, Any], part: int) -> dict:
    """The derived subfields of field `f` as a nested dict of leaves: `inherited` (from further
    up) merged with `f`'s own metadata; `part` 0 keeps the descriptions, 1 the functions."""
    own = {p: spec[part] for p, spec in f.metadata.get(_DERIVED, {}).items()}
    return _merge(inherited.get(f.name, {}), _nest(own))


def _is_leaf(tree: Mapping[str, Any], name: str) -> bool:
    return name in tree and not isinstance(tree[name], dict)


# --- schema -> ConfigDict ------------------------------------------------------------------------


def _plain_type(tp: Any) -> Any:
    """Optional[X] -> X; enums -> str (a ConfigDict holds enums by value)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        tp = args[0] if len(args) == 1 else object
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return str
    return tp


def _plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    return value


def _config_dict(cls, values: Mapping[str, Any], skip: Mapping[str, Any]) -> mlc.ConfigDict:
    hints = typing.get_type_hints(cls)
    out = mlc.ConfigDict()
    for f in _fields(cls):
        if _is_leaf(skip, f.name):
            continue
        value = values[f.name]
        if dataclasses.is_dataclass(value):
            inner = {g.name: getattr(value, g.name) for g in _fields(type(value))}
            out[f.name] = _config_dict(type(value), inner, _derived_below(f, skip, 0))
        elif value is None:
            out[f.name] = mlc.placeholder(_plain_type(hints[f.name]))
        else:
            out[f.name] = _plain(value)
    return out


def config_dict(cls) -> mlc.ConfigDict:
    """The ConfigDict of dataclass `cls` with its defaults (see the module docstring)."""
    return _config_dict(cls, {f.name: _default(f) for f in _fields(cls)}, {})


def check_path(cls, dotted: str, *, root: str = "config") -> Any:
    """The type hint of field `dotted` of dataclass `cls` (a value or a group); raises
    `UnknownFieldError` (or `ConfigError` for a derived field) unless `root.dotted` names a
    config field."""
    node, skip = cls, {}
    parts = dotted.split(".")
    for i, name in enumerate(parts):
        group = ".".join([root, *parts[:i]])
        if not dataclasses.is_dataclass(node):
            raise ConfigError(f"{group} is a value, not a group of fields.")
        fields = {f.name: f for f in _fields(node)}
        if _is_leaf(skip, name):
            raise ConfigError(f"{group}.{name}: set from {skip[name]}, not by the config.")
        if name not in fields:
            raise UnknownFieldError(group, name, [n for n in fields if not _is_leaf(skip, n)])
        skip = _derived_below(fields[name], skip, 0)
        node = typing.get_type_hints(node)[name]
    return node


# --- dict -> dataclasses ------------------------------------------------------------------------


def _convert(tp: Any, value: Any, path: str, inject: Mapping[str, Any], base: Any = None) -> Any:
    if tp is Any:
        return value
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(arg, value, path, inject)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(
            errors[0] if len(errors) == 1 else f"{path}: {value!r} fits none of {args}."
        )
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return _replace_nested(value, inject)
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected a group of fields ({tp.__name__}), got {value!r}.")
        return from_dict(tp, value, path=path, _inject=inject, _base=base)
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
            return tuple(_convert(args[0], v, f"{path}[{i}]", {}) for i, v in enumerate(value))
        if len(args) != len(value):
            raise ConfigError(f"{path}: expected {len(args)} values, got {value!r}.")
        return tuple(
            _convert(a, v, f"{path}[{i}]", {}) for i, (a, v) in enumerate(zip(args, value))
        )
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
        if math.isnan(value):  # never a meaningful setting; NaN compares False with any bound
            raise ConfigError(f"{path}: expected a number, got nan.")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{path}: expected a string, got {value!r}.")
        return value
    raise TypeError(f"config field {path} has an unsupported type {tp}.")


def _replace_nested(obj: Any, values: Mapping[str, Any]) -> Any:
    """`obj` with the (nested) fields in `values` replaced; `obj` itself if nothing changes."""
    changes = {}
    for name, value in values.items():
        current = getattr(obj, name)
        new = _replace_nested(current, value) if isinstance(value, dict) else value
        if new is not current and new != current:
            changes[name] = new
    return dataclasses.replace(obj, **changes) if changes else obj


def _derived_values(f: dataclasses.Field, owner: Any) -> dict[str, Any]:
    return _nest({p: fn(owner) for p, (_, fn) in f.metadata.get(_DERIVED, {}).items()})


def from_dict(
    cls: type[T],
    data: Mapping[str, Any],
    *,
    path: str = "config",
    _inject: Mapping[str, Any] | None = None,
    _base: Any = None,
) -> T:
    """Builds dataclass `cls` from `data` (nested dicts), validating names and types. Missing
    keys take the defaults (of the embedding field's default where `cls` is embedded); derived
    fields are computed, never read (module docstring)."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in _fields(cls)}
    inject = _inject or {}

    def default(f: dataclasses.Field) -> Any:
        return _default(f) if _base is None else getattr(_base, f.name)

    for key in data:
        if _is_leaf(inject, key):
            raise ConfigError(f"{path}.{key}: set by the run from other fields, not by the config.")
        if key not in fields:
            raise UnknownFieldError(path, key, [n for n in fields if not _is_leaf(inject, n)])
    kwargs: dict[str, Any] = {}
    # Plain fields first: a derived value is a function of its owner's other fields.
    for f in sorted(fields.values(), key=lambda f: _DERIVED in f.metadata):
        if _is_leaf(inject, f.name):
            kwargs[f.name] = inject[f.name]
            continue
        below = inject.get(f.name, {})
        if _DERIVED in f.metadata:
            _refuse_derived(data.get(f.name), _derived_below(f, {}, 0), f"{path}.{f.name}")
            owner = types.SimpleNamespace(
                **{n: kwargs[n] if n in kwargs else default(g) for n, g in fields.items()}
            )
            below = _merge(below, _derived_values(f, owner))
        if f.name in data or below or _base is not None:
            value = data[f.name] if f.name in data else default(f)
            kwargs[f.name] = _convert(hints[f.name], value, f"{path}.{f.name}", below, default(f))
    try:
        return cls(**kwargs)
    except FieldError as e:
        raise e.under(path) from None
    except ConfigError:
        raise
    except (ValueError, TypeError) as e:  # a dataclass's own __post_init__ validation
        raise ConfigError(f"{path}: {e}") from e


def _refuse_derived(value: Any, described: Mapping[str, Any], path: str) -> None:
    if not isinstance(value, dict):
        return
    for name, desc in described.items():
        if name in value:
            if isinstance(desc, dict):
                _refuse_derived(value[name], desc, f"{path}.{name}")
            else:
                raise ConfigError(f"{path}.{name}: set from {desc}, not by the config.")


def apply_derived(owner: Any) -> None:
    """Sets the derived fields of `owner`'s embedded dataclasses (call it in `__post_init__`)."""
    for f in _fields(type(owner)):
        if _DERIVED in f.metadata:
            value = getattr(owner, f.name)
            new = _replace_nested(value, _derived_values(f, owner))
            if new is not value:
                object.__setattr__(owner, f.name, new)


def to_dict(obj: Any, *, _skip: Mapping[str, Any] | None = None) -> Any:
    """The inverse of `from_dict`: plain JSON-able values (enums by value), no derived fields,
    a set `secret_field` as REDACTED."""
    if dataclasses.is_dataclass(obj):
        skip = _skip or {}
        return {
            f.name: REDACTED
            if f.metadata.get(_SECRET) and getattr(obj, f.name)
            else to_dict(getattr(obj, f.name), _skip=_derived_below(f, skip, 0))
            for f in _fields(type(obj))
            if not _is_leaf(skip, f.name)
        }
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, tuple | list):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


# --- per-field value checks --------------------------------------------------------------------
# A `Rule` per field, run by `check_fields` in a dataclass's `__post_init__` (so on every
# construction, `from_dict` and `dataclasses.replace` included), raising a `FieldError` that
# names the field, its value and the rule:
#
#     def __post_init__(self):
#         check_fields(self, {"n": at_least(1), "top_p": within(0.0, 1.0, open_lo=True)})
#
# `from_dict` prefixes the dataclass's path, so the message names the full field:
# `config.generator.rollout.top_p (0.0) must be in (0, 1]`.


@dataclasses.dataclass(frozen=True)
class Rule:
    """A constraint on one field: `ok(value)` and what the message says when it fails."""

    ok: Callable[[Any], bool]
    says: str

    def __call__(self, value: Any) -> bool:
        try:
            return bool(self.ok(value))
        except TypeError:  # e.g. None compared with a number
            return False


def at_least(lo: float, why: str = "") -> Rule:
    return Rule(lambda v: v >= lo, f"must be >= {lo}{why}.")


def above(lo: float, why: str = "") -> Rule:
    return Rule(lambda v: v > lo and math.isfinite(v), f"must be a finite number > {lo}{why}.")


def within(lo: float, hi: float, *, open_lo: bool = False, open_hi: bool = False, why: str = ""):
    left, right = "(" if open_lo else "[", ")" if open_hi else "]"

    def ok(v):
        return (lo < v if open_lo else lo <= v) and (v < hi if open_hi else v <= hi)

    return Rule(ok, f"must be in {left}{lo}, {hi}{right}{why}.")


def finite(why: str = "") -> Rule:
    return Rule(math.isfinite, f"must be a finite number{why}.")


def one_of(allowed, why: str = "") -> Rule:
    allowed = tuple(allowed)
    return Rule(lambda v: v in allowed, f"must be one of {list(allowed)}{why}.")


def check_fields(obj: Any, rules: Mapping[str, Rule]) -> None:
    """Raises `FieldError` for the first field of `obj` that breaks its rule (call it in
    `__post_init__`: the checks then run on every construction, `from_dict` and
    `dataclasses.replace` included)."""
    for name, rule in rules.items():
        value = getattr(obj, name)
        if not rule(value):
            raise FieldError(name, value, rule.says)
