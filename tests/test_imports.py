"""The package's imports point one way: no module imports, directly or through others, a module
that imports it back. Every import counts, also those inside functions and under
``TYPE_CHECKING`` (a circle there is still two modules that each need the other)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "streamwatch"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(path: Path, name: str) -> set[str]:
    """The dotted names a module imports (a ``from M import x`` gives M and M.x)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names)
    return out


def import_graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {m: (_imported(p, m) & files.keys()) - {m} for m, p in files.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of two or more modules (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_circle_finder_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_lazy_and_type_checking_imports() -> None:
    graph = import_graph()
    assert "streamwatch.cli.args" in graph["streamwatch.cli.main"]  # imported inside main()
    assert "streamwatch.simulate" in graph["streamwatch.cli.main"]  # under TYPE_CHECKING


def test_no_module_imports_itself_back() -> None:
    assert circles(import_graph()) == []


#: The layers, lowest first: a module imports only modules of its own layer or below. A
#: module is placed by the longest prefix of its name listed here.
LAYERS: dict[str, int] = {
    "streamwatch": 0,  # the root: the version, the build, the old paths (_moved)
    "streamwatch.clock": 0,
    "streamwatch.markers": 0,
    "streamwatch._install": 0,
    "streamwatch._moved": 0,
    "streamwatch.names": 0,  # the rules for producer names: imports nothing of streamwatch
    "streamwatch.client": 0,  # held apart below: it imports only itself and markers
    "streamwatch._event_model": 1,
    "streamwatch.events": 1,
    "streamwatch.incidents": 1,
    "streamwatch.engine.name_patterns": 1,  # the vocabulary: the config's presets name it
    "streamwatch.engine.indicators": 1,
    "streamwatch.config": 2,
    "streamwatch.rules.grammar": 2,  # the rules' language and their config section
    "streamwatch.rules.config": 2,
    "streamwatch.alerting.config": 2,  # config sections, kept with what they configure
    "streamwatch.actions.config": 2,
    "streamwatch.actions.args": 2,
    "streamwatch.detectors": 3,
    "streamwatch.engine.findings": 3,  # what a check reports
    "streamwatch.checks": 4,
    "streamwatch.rules": 4,  # a run's rule state: the engine evaluates it
    "streamwatch.engine": 5,
    "streamwatch.sources": 6,
    "streamwatch.sinks": 6,
    "streamwatch.simulate": 6,
    "streamwatch.rules.testing": 6,  # test-rules: rules through the engine
    "streamwatch.alerting": 7,
    "streamwatch.actions": 7,
    "streamwatch.replay": 7,
    "streamwatch.report": 8,
    "streamwatch.ledger": 8,
    "streamwatch.live": 8,
    "streamwatch.cli": 9,
    "streamwatch.__main__": 9,
}


def layer(module: str) -> int:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in LAYERS:
            return LAYERS[prefix]
    raise AssertionError(f"{module} is in no layer: add it to LAYERS")


def _upward(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{m} (layer {layer(m)}) imports {i} (layer {layer(i)})"
        for m, imports in graph.items()
        for i in imports
        if layer(i) > layer(m)
    )


def test_the_layer_check_finds_an_upward_import() -> None:
    graph = {"streamwatch.engine.monitor": {"streamwatch.live.service"}}
    assert _upward(graph) == [
        "streamwatch.engine.monitor (layer 5) imports streamwatch.live.service (layer 8)"
    ]


def test_imports_point_down() -> None:
    assert _upward(import_graph()) == []


def _importing(graph: dict[str, set[str]], under: str) -> dict[str, set[str]]:
    return {m: i for m, i in graph.items() if m == under or m.startswith(under + ".")}


def test_the_client_imports_only_itself_and_the_marker() -> None:
    for module, imports in _importing(import_graph(), "streamwatch.client").items():
        other = {i for i in imports if not i.startswith("streamwatch.client")}
        assert other <= {"streamwatch.markers", "streamwatch"}, module


def test_the_engine_imports_no_outer_part() -> None:
    outer = ("cli", "report", "ledger", "live", "alerting", "actions", "replay", "sources")
    for module, imports in _importing(import_graph(), "streamwatch.engine").items():
        bad = {i for i in imports if i.split(".")[1] in outer}
        assert not bad, f"{module} imports {sorted(bad)}"


def test_sources_feed_the_engine_never_the_reverse() -> None:
    inner = ("engine", "checks", "detectors")
    for module, imports in _importing(import_graph(), "streamwatch.sources").items():
        bad = {i for i in imports if i.split(".")[1] in inner}
        assert not bad, f"{module} imports {sorted(bad)}"


def test_the_top_level_holds_sub_packages_and_a_few_modules() -> None:
    modules = sorted(p.stem for p in PACKAGE.glob("*.py"))
    contracts = ["clock", "config", "events", "incidents", "markers", "names"]
    private = ["__init__", "__main__", "_event_model", "_install", "_moved"]
    assert modules == sorted(contracts + private)


#: A module longer than this states at the top of its docstring why it is one module.
LONG = 450


def test_a_long_module_says_why() -> None:
    for path in sorted(PACKAGE.rglob("*.py")):
        lines = path.read_text(encoding="utf-8").count("\n")
        if lines > LONG:
            doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
            assert "One module because" in doc, f"{path.relative_to(PACKAGE)}: {lines} lines"
