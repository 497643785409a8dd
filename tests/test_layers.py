"""The package's layering rules, checked on its import graph (parsed with `ast`, nothing run):

    rl/       knows no verifier or Tango: imports nothing from tango/, rollout/, data/, config
    rollout/  knows no rewards or training: imports nothing from tango/, rl/, config
    tango/    knows no sharding: imports neither parallel/ nor jax.sharding (a mesh is passed
              through; type-only imports under `if TYPE_CHECKING:` are allowed)
    config    imports nothing above it: no module it imports, directly or not, imports it;
              config_types (the schema machinery) imports nothing from tango_jax at all

Every import counts, at module level or inside a function.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "tango_jax"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, modules: set[str]) -> set[str]:
    """Modules imported anywhere in `tree`, except under `if TYPE_CHECKING:`; `from a import b`
    counts as importing `a.b` where that is a module of the package."""
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
            out.update(
                f"{node.module}.{a.name}"
                for a in node.names
                if f"{node.module}.{a.name}" in modules
            )
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return out


def _graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: _imports(ast.parse(p.read_text()), set(files)) for name, p in files.items()}


GRAPH = _graph()


def _in(module: str, *roots: str) -> bool:
    return any(module == r or module.startswith(r + ".") for r in roots)


def _violations(layer: str, forbidden: tuple[str, ...]) -> list[str]:
    return sorted(
        f"{m} imports {dep}"
        for m, deps in GRAPH.items()
        if _in(m, layer)
        for dep in deps
        if _in(dep, *forbidden)
    )


def test_the_graph_sees_the_package():
    """Guards the test itself: it parsed the modules the rules below are about."""
    for layer in ("tango_jax.rl", "tango_jax.rollout", "tango_jax.tango"):
        assert sum(_in(m, layer) for m in GRAPH) >= 4, layer
    assert "tango_jax.rl.batch" in GRAPH["tango_jax.rl.trainer"]
    assert "tango_jax.tango.schedule" in GRAPH["tango_jax.config.run"]


@pytest.mark.parametrize(
    "layer, forbidden",
    [
        (
            "tango_jax.rl",
            ("tango_jax.tango", "tango_jax.rollout", "tango_jax.data", "tango_jax.config.run"),
        ),
        ("tango_jax.rollout", ("tango_jax.tango", "tango_jax.rl", "tango_jax.config.run")),
        ("tango_jax.tango", ("tango_jax.parallel", "jax.sharding")),
        ("tango_jax.schema", ("tango_jax",)),
    ],
)
def test_layer_imports_nothing_it_must_not_know(layer, forbidden):
    assert _violations(layer, forbidden) == []


def _closure(start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for dep in GRAPH.get(todo.pop(), ()):
            if dep in GRAPH and dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def test_config_imports_nothing_above_it():
    below = _closure("tango_jax.config.run")
    above = sorted(m for m in below if "tango_jax.config.run" in _closure(m))
    assert above == [], f"tango_jax.config.run imports modules that import it: {above}"
    assert not _in_any(below, "tango_jax.train", "tango_jax.run.loop", "tango_jax.run.steps")


def _in_any(modules: set[str], *names: str) -> bool:
    return any(m in modules for m in names)
