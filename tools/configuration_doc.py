"""Write docs/configuration.md from attnmt/config.py and each model family's config
(attnmt/families/*/config.py): every key, its values, default and range.

    python tools/configuration_doc.py            # rewrite docs/configuration.md
    python tools/configuration_doc.py --check    # exit 1 if the file is stale (tests run this)

The meanings are the comments above the fields in those classes, so each setting is documented
where it is defined; a comment covers the fields below it up to the next comment.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import sys
import typing
from pathlib import Path
from typing import Any, Literal

from attnmt import config
from attnmt.families import FAMILIES

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "docs" / "configuration.md"

HEADER = """# Configuration

Generated from `attnmt/config.py` by `python tools/configuration_doc.py`; a test fails when this
file is stale. A config file is YAML with the sections below; any key can be overridden on the
command line as `section.key=value` (`attnmt train CONFIG.yaml model.dropout=0.3`). A value of the
wrong type or outside its range stops with one line naming the key and what is allowed.
"""


def comment_groups(cls: type) -> list[tuple[str, list[str]]]:
    """(comment text, field names) in source order: a comment covers the fields up to the next one."""
    lines, _ = inspect.getsourcelines(cls)
    body = ast.parse(inspect.getsource(cls)).body[0].body
    groups: list[tuple[str, list[str]]] = [("", [])]
    for node in body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above = []
        row = node.lineno - 2                      # the line above the field (0-based)
        while row >= 0 and lines[row].strip().startswith("#"):
            above.insert(0, lines[row].strip().lstrip("#").strip())
            row -= 1
        if above:
            groups.append((" ".join(above), []))
        groups[-1][1].append(node.target.id)
    return [group for group in groups if group[1]]


def written_docstring(cls: type) -> str:
    """The class's own docstring; dataclasses make one up from the fields where there is none."""
    return ast.get_docstring(ast.parse(inspect.getsource(cls)).body[0]) or ""


def values_of(hint: Any, spec: dataclasses.Field) -> str:
    if typing.get_origin(hint) is Literal:
        return " \\| ".join(f"`{value}`" for value in typing.get_args(hint))
    if hint is bool:
        return "`true` \\| `false`"
    if "range" in spec.metadata:
        return ("integer " if hint is int else "number ") + f"`{spec.metadata['range']}`"
    if typing.get_origin(hint) is list:
        return "list of texts"
    return "text"


def section(title: str, cls: type, intro: str, as_flags: bool = False, level: str = "##",
            inherited: frozenset[str] = frozenset()) -> list[str]:
    """One table per section, leaving out the `inherited` fields a family's class repeats; a comment
    over several fields is said once, "〃" below it."""
    hints = typing.get_type_hints(cls)
    fields = {spec.name: spec for spec in dataclasses.fields(cls)}
    out = [f"{level} {title}", ""] + ([intro, ""] if intro else [])
    out += ["| key | values | default | meaning |", "|---|---|---|---|"]
    for comment, all_names in comment_groups(cls):
        names = [name for name in all_names if name not in inherited]
        for index, name in enumerate(names):
            spec = fields[name]
            meaning = spec.metadata.get("help") or (comment if index == 0 else "〃" if comment else "")
            meaning = meaning.replace("|", "\\|").replace("<", "&lt;")
            key = "--" + name.replace("_", "-") if as_flags else name
            values = (" \\| ".join(f"`{arch}`" for arch in FAMILIES) if (cls, name) == (config.ModelConfig, "arch")
                      else values_of(hints[name], spec))
            default = spec.default_factory() if spec.default_factory is not dataclasses.MISSING else spec.default
            out.append(f"| `{key}` | {values} | {shown_default(default)} | {meaning} |")
    return out + [""]


def shown_default(default: Any) -> str:
    if isinstance(default, bool):
        return f"`{str(default).lower()}`"
    return f"`{default}`" if default not in ("", []) else "(empty)"


def render() -> str:
    out = [HEADER]
    for name in config.SECTIONS:
        cls = typing.get_type_hints(config.Config)[name]
        out += section(f"`{name}`", cls, written_docstring(cls))
        if cls is config.ModelConfig:
            for arch, family in FAMILIES.items():
                out += section(f"`model` keys of `arch: {arch}`", family.config,
                               f"{written_docstring(family.config)} In `{inspect.getsourcefile(family.config)}`."
                               .replace(str(REPO) + "/", ""), level="###",
                               inherited=frozenset(f.name for f in dataclasses.fields(config.ModelConfig)))
    out += section("`attnmt serve` flags", config.ServeConfig,
                   "Not config keys: the limits of `attnmt serve`, not stored in model files.", as_flags=True)
    return "\n".join(out).rstrip() + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only check that the file is up to date")
    args = parser.parse_args()
    text = render()
    if args.check:
        if not OUT.exists() or OUT.read_text(encoding="utf-8") != text:
            sys.exit(f"{OUT.relative_to(REPO)} is stale: run python tools/configuration_doc.py")
        return
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT.relative_to(REPO)}")


if __name__ == "__main__":
    main()
