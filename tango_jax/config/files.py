"""Config files (configs/NAME.py): the one loader of a config file by its path, used by every
command, study and test that reads one (ml_collections' `--config` flag reads train's and
plan_memory's itself, after `cli.check_config_file` has run it through this loader).

    load_config_file("configs/tiny_arith.py")        the module: its get_config, VARIANTS, ...
    config_from_spec("configs/tiny_arith.py:grpo")   get_config("grpo")'s ConfigDict

A config file's `get_config(arg)` takes the text after the file's ':' (its variant); a file
that builds on another loads it with `sibling_config(__file__, "other")` (config/run.py).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

from tango_jax.schema import ConfigError


def split_config_spec(spec: str) -> tuple[str, str | None]:
    """'configs/x.py:a,b' -> ('configs/x.py', 'a,b'); 'configs/x.py' -> ('configs/x.py', None)
    (ml_collections' convention: the text after the file's ':' is `get_config`'s argument)."""
    path, sep, arg = spec.partition(".py:")
    return (path + ".py", arg) if sep else (spec, None)


def load_config_file(path: str | Path) -> ModuleType:
    """The config file at `path`, run as a module. FileNotFoundError naming the config files
    beside it when there is none; ConfigError when it defines no `get_config`."""
    file = Path(path)
    if not file.is_file():
        others = sorted(str(p) for p in file.parent.glob("*.py")) if file.parent.is_dir() else []
        where = f"; config files there: {', '.join(others)}" if others else ""
        raise FileNotFoundError(f"no such config file {str(path)!r}{where}.")
    spec = importlib.util.spec_from_file_location(f"tango_config_{file.stem}", file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, "get_config"):
        raise ConfigError(f"{path} defines no get_config(); see configs/.")
    return module


def config_from_spec(spec: str) -> Any:
    """`get_config(VARIANT)` of the file `spec` (FILE[:VARIANT]) names; `get_config()` without
    a variant."""
    path, arg = split_config_spec(spec)
    module = load_config_file(path)
    return module.get_config() if arg is None else module.get_config(arg)
