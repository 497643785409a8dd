"""The package's layout rules, checked on its import graph (parsed with `ast`, nothing run) and
on the tree of tests/.

Layers, bottom to top (a module imports only from layers below its own, or from its own
package; the commands at the top may import each other):

    schema                               the config schema kit: imports nothing from tango_jax
    parallel                             meshes, partitioning, jax.distributed, buckets
    models, text                         NNX models and HF checkpoints; what models read and
                                         write and how it is graded (a leaf)
    rollout, data, rl                    samplers; prompt streams and tasks; generic RL maths
                                         and the jitted train step (no verifier, no Tango)
    tango                                the paper's maths: rewards, process advantages, class
                                         balance, schedule, the role enum (no sharding)
    checkpoint, metrics                  run checkpoints and guards; metrics files and W&B
    config                               the run config, composed from the components' configs
    run                                  the loop and its steps
    eval                                 offline evaluation and analysis
    study                                the seed studies (`python -m tango_jax.study`)
    train, evaluate, plan_memory, ...    the commands (top-level modules but schema)

Every import counts, at module level, inside a function or under `if TYPE_CHECKING:` (a
type-only import that runs upward or closes a circle marks a misplaced name). There is no
import circle. tests/ mirrors the package: each folder of tests/ other than helpers/, e2e/ and
scripts/ is a package of tango_jax, and test files at the top of tests/ are for top-level
modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "tango_jax"
TESTS = ROOT / "tests"

LAYERS = [
    ["schema"],
    ["parallel"],
    ["models", "text"],
    ["rollout", "data", "rl"],
    ["tango"],
    ["checkpoint", "metrics"],
    ["config"],
    ["run"],
    ["eval"],
    ["study"],
]
# Test folders that are not packages: shared helpers, whole runs, the scripts' tests.
TEST_FOLDERS = {"helpers", "e2e", "scripts", "__pycache__"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(tree: ast.AST, modules: set[str]) -> set[str]:
    """Modules of tango_jax imported anywhere in `tree`; `from a import b` counts as importing
    `a.b` where that is a module of the package (and `a` otherwise)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] == "tango_jax")
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if node.module.split(".")[0] != "tango_jax":
                continue
            subs = {f"{node.module}.{a.name}" for a in node.names}
            found = subs & modules
            out.update(found)
            if len(found) < len(subs):
                out.add(node.module)
    return out


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    files = {_module_name(p): p for p in package.rglob("*.py")}
    return {name: _imports(ast.parse(p.read_text()), set(files)) for name, p in files.items()}


def top(module: str) -> str:
    """tango_jax.run.loop -> run; tango_jax.train -> train; tango_jax -> ''."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def rank(module: str) -> int:
    """The layer of a module; the commands (top-level modules but schema) are above them all."""
    for i, layer in enumerate(LAYERS):
        if top(module) in layer:
            return i
    return len(LAYERS)


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Imports of a module from a higher layer, or from another package of the same layer."""
    bad = []
    for m, deps in graph.items():
        for d in deps:
            if top(d) == top(m) or top(d) == "":
                continue
            same_commands = rank(m) == rank(d) == len(LAYERS)
            if rank(d) > rank(m) or (rank(d) == rank(m) and not same_commands):
                bad.append(f"{m} imports {d}")
    return sorted(bad)


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Import circles among modules (strongly connected components of more than one module,
    or a module importing itself), found with Tarjan's algorithm."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


GRAPH = import_graph()


def test_the_graph_sees_the_package():
    """Guards the test itself: it parsed the modules the rules below are about."""
    for layer in ("rl", "rollout", "tango", "text", "run", "eval", "config", "checkpoint"):
        assert sum(top(m) == layer for m in GRAPH) >= 3, layer
    assert "tango_jax.rl.batch" in GRAPH["tango_jax.rl.trainer"]
    assert "tango_jax.run.steps" in GRAPH["tango_jax.run.loop"]
    assert "tango_jax.text.formats" in GRAPH["tango_jax.data.synthetic"]
    # A command at the top: the memory plan reads the run config and both plans below it.
    assert rank("tango_jax.plan_memory") == len(LAYERS)
    plan = GRAPH["tango_jax.plan_memory"]
    assert {
        "tango_jax.config.cli",
        "tango_jax.rl.memory_plan",
        "tango_jax.rollout.memory_plan",
    } <= plan
    # A type-only import counts (tango_jax.run.steps imports Prefetch under TYPE_CHECKING).
    assert "tango_jax.run.overlap" in GRAPH["tango_jax.run.steps"]


def test_every_package_has_a_layer():
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    layered = {name for layer in LAYERS for name in layer} - {"schema"}
    assert packages - {"assets"} == layered


def test_no_import_runs_up_the_layers():
    assert upward_imports(GRAPH) == []


@pytest.mark.parametrize(
    "layer, forbidden",
    [
        ("schema", ("",)),  # nothing from the package at all
        ("text", ("tango", "run", "eval", "data")),
        ("data", ("tango", "run", "eval")),
        ("tango", ("run", "eval", "parallel", "config")),
        ("rl", ("tango", "rollout", "data", "config", "text")),
        ("rollout", ("tango", "rl", "config", "data")),
    ],
)
def test_layer_imports_nothing_it_must_not_know(layer, forbidden):
    bad = sorted(
        f"{m} imports {d}"
        for m, deps in GRAPH.items()
        if top(m) == layer
        for d in deps
        if top(d) != layer and (top(d) in forbidden or "" in forbidden)
    )
    assert bad == []


def test_tango_knows_no_sharding():
    """The paper's maths takes a mesh as an argument where it needs one; it never builds or
    names shardings (nor imports jax.sharding)."""
    files = [p for p in (PACKAGE / "tango").rglob("*.py")]
    bad = [
        p.name
        for p in files
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.ImportFrom | ast.Import)
        and any(
            n.startswith("jax.sharding")
            for n in [getattr(node, "module", None) or ""] + [a.name for a in node.names]
        )
    ]
    assert bad == []


def test_no_import_circle():
    assert circles(GRAPH) == []


def test_the_rules_catch_a_bad_import():
    """The checks above on a graph with one bad import each: an upward one, and a circle."""
    upward = {m: set(d) for m, d in GRAPH.items()}
    upward["tango_jax.text.formats"] = upward["tango_jax.text.formats"] | {"tango_jax.run.loop"}
    assert upward_imports(upward) == ["tango_jax.text.formats imports tango_jax.run.loop"]
    circle = {m: set(d) for m, d in GRAPH.items()}
    circle["tango_jax.run.overlap"] = circle["tango_jax.run.overlap"] | {"tango_jax.run.steps"}
    assert circles(circle) == [["tango_jax.run.overlap", "tango_jax.run.steps"]]


def test_tests_mirror_the_package():
    """Like veRL's tests/special_sanity/validate_structure.py: a test folder names a package."""
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and not p.name.startswith(".")}
    assert folders - TEST_FOLDERS <= packages, folders - TEST_FOLDERS - packages
    top_modules = {p.stem for p in PACKAGE.glob("*.py")} | {"layers"}
    loose = [
        p.name
        for p in TESTS.glob("test_*.py")
        if not any(p.stem == f"test_{m}" or p.stem.startswith(f"test_{m}_") for m in top_modules)
    ]
    assert loose == [], "tests at the top of tests/ are for top-level modules only"
