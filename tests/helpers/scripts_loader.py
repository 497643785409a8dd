"""Load a script of scripts/<folder>/ as a module (scripts are not a package; a script may
import its siblings, so the folder is on sys.path while it loads)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load_script(folder: str, name: str) -> ModuleType:
    scripts = ROOT / "scripts" / folder
    sys.path.insert(0, str(scripts))
    try:
        spec = importlib.util.spec_from_file_location(name, scripts / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(scripts))
    return module
