"""The house's rules that a reader would otherwise have to check by hand: imports flow one way (no
module imports, at load time, one that imports it back), and outside the families' folders nothing
names a family's modules but the CTranslate2 export, which writes the Transformer's own weights."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "attnmt"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def load_time_imports() -> dict[str, set[str]]:
    """Each module -> the attnmt modules it imports at its top level (relative imports)."""
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        imported = set()
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
                imported |= {candidate for candidate in [target] + [f"{target}.{a.name}" for a in node.names]
                             if candidate in modules and candidate != name}
        graph[name] = imported
    return graph


def test_imports_flow_one_way():
    graph = load_time_imports()
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        for imported in graph[name]:
            assert imported not in path, f"import circle: {' -> '.join(path[path.index(imported):] + [imported])}"
            if imported not in done:
                visit(imported, path + [imported])
        done.add(name)

    for name in graph:
        visit(name, [name])


def test_only_the_families_and_the_transformer_export_name_a_familys_modules():
    naming = {name for name, imported in load_time_imports().items()
              if not name.startswith("attnmt.families")
              and any(m.startswith(("attnmt.families.rnn", "attnmt.families.transformer")) for m in imported)}
    assert naming == {"attnmt.export"}
