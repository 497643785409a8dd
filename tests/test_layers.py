"""The package's layout rules, checked on its import graph (parsed with `ast`, nothing run) and
on the tree of tests/; and the size of its orchestration (run/, eval/, study/, the commands and
the advantage path): no function takes more than 8 parameters, and a step, the loop's
training and the evaluation command each fit on one screen (~50 lines).

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


# --- the size of the orchestration ---------------------------------------------------------------

MAX_PARAMETERS = 8  # positional and keyword-only, self and cls not counted
MAX_LINES = 50  # a screen: the step's story, told by functions that each fit on one
# The orchestration and the advantage path: parameters beyond a handful travel grouped in a
# small frozen dataclass (EvalSettings, AdvantageOptions, SFTJob, ...), never one by one.
ORCHESTRATION = ("run", "eval", "study")
ADVANTAGE_PATH = ("rl/advantages.py", "tango/process_advantages.py")
# Functions that tell a story, each on one screen: a step, the loop's training, the
# evaluation command.
SHORT = {
    "run/steps.py": ("generator_step", "verifier_step"),
    "run/loop.py": ("TangoLoop._train",),
    "evaluate.py": ("run",),
}


def commands(package: Path = PACKAGE) -> list[Path]:
    """The `python -m` entry points: the top-level modules but schema, every __main__.py, and
    every module that runs as a script (`if __name__ == "__main__":`)."""
    top_level = [p for p in package.glob("*.py") if p.stem not in ("__init__", "schema")]
    scripts = [
        p
        for p in package.rglob("*.py")
        if p.name == "__main__.py" or 'if __name__ == "__main__":' in p.read_text()
    ]
    return sorted(set(top_level + scripts))


def orchestration_files(package: Path = PACKAGE) -> list[Path]:
    layers = [p for layer in ORCHESTRATION for p in (package / layer).rglob("*.py")]
    return sorted(set(layers + commands(package) + [package / p for p in ADVANTAGE_PATH]))


def functions(tree: ast.AST) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    """Every function of a module by its qualified name (`Class.method`, `outer.inner`)."""
    out = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    out[name] = child
                visit(child, f"{name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return out


def parameter_count(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = fn.args
    return sum(p.arg not in ("self", "cls") for p in a.posonlyargs + a.args + a.kwonlyargs)


def line_count(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from the `def` to the last line of the body (decorators not counted)."""
    return fn.end_lineno - fn.lineno + 1


def too_many_parameters(files: list[Path], root: Path = PACKAGE) -> list[str]:
    return sorted(
        f"{p.relative_to(root)}:{name} takes {parameter_count(fn)}"
        for p in files
        for name, fn in functions(ast.parse(p.read_text())).items()
        if parameter_count(fn) > MAX_PARAMETERS
    )


def too_long(short: dict[str, tuple[str, ...]], root: Path = PACKAGE) -> list[str]:
    out = []
    for path, names in short.items():
        found = functions(ast.parse((root / path).read_text()))
        for name in names:
            assert name in found, f"{path} has no function {name}"
            if (n := line_count(found[name])) > MAX_LINES:
                out.append(f"{path}:{name} is {n} lines")
    return out


def test_the_size_rules_see_the_orchestration():
    """Guards the two tests below: they read the modules they are about."""
    names = {str(p.relative_to(PACKAGE)) for p in orchestration_files()}
    assert {"run/loop.py", "run/steps.py", "eval/own_data.py", "study/arith.py"} <= names
    assert {"train.py", "evaluate.py", "plan_memory.py", "export.py", "study/__main__.py"} <= names
    assert {"study/dynamic_sampling.py", "data/addition.py"} <= names  # run as scripts too
    assert set(ADVANTAGE_PATH) <= names and "schema.py" not in names
    loop = functions(ast.parse((PACKAGE / "run" / "loop.py").read_text()))
    assert parameter_count(loop["TangoLoop.__init__"]) == 3  # cfg, mesh, stop: self not counted


def test_no_orchestration_function_takes_more_than_8_parameters():
    assert too_many_parameters(orchestration_files()) == []


def test_the_step_and_the_commands_story_each_fit_on_a_screen():
    assert too_long(SHORT) == []


def test_the_size_rules_catch_a_long_function_and_one_with_too_many_parameters(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    (tmp_path / "m.py").write_text(
        "class C:\n"
        "    def ok(self, a, b, c, d, e, f, g, h):\n        pass\n\n"
        "    def wide(self, a, b, c, d, e, f, /, g, *, h, i):\n        pass\n\n\n"
        f"def long():\n{body}\n"
    )
    assert too_many_parameters([tmp_path / "m.py"], root=tmp_path) == ["m.py:C.wide takes 9"]
    assert too_long({"m.py": ("long", "C.ok")}, root=tmp_path) == [
        f"m.py:long is {MAX_LINES + 1} lines"
    ]
