"""The house's rules that a reader would otherwise have to check by hand: imports flow one way (no
module imports, at its top, in a function or for the type checker, one that imports it back) and up the
wings DEVELOPERS.md lists, whose layout names every file; no function is longer than a screen; outside the
families' folders nothing names a family's modules, its parameters or its own model keys (a format asks the
family for its layout); and importing a module has no side effects: the config and the families' registry
load without torch or a network, and a family exists by its registry entry alone (issue 62)."""

from __future__ import annotations

import ast
import dataclasses
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from attnmt.config import ModelConfig
from attnmt.configfile import config_from_dict, model_config_class
from attnmt.errors import AttnmtError
from attnmt.families import FAMILIES, Family, register, unregister

PACKAGE = Path(__file__).resolve().parents[1] / "attnmt"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> dict[str, set[str]]:
    """Each module -> the attnmt modules it imports anywhere: at its top, inside a function (a deferred
    import still ties the two modules) or for the type checker alone (`if TYPE_CHECKING:`)."""
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        imported = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = (package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else [])
                target = ".".join(base + ([node.module] if node.module else []))
                candidates = [target] + [f"{target}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                candidates = [a.name for a in node.names]
            else:
                continue
            imported |= {candidate for candidate in candidates if candidate in modules and candidate != name}
        graph[name] = imported
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle of `graph`, each once, as the path that closes it."""
    found, done = [], set()

    def visit(name: str, path: list[str]) -> None:
        for imported in sorted(graph[name]):
            if imported in path:
                circle = path[path.index(imported):]
                if set(circle) not in [set(c) for c in found]:
                    found.append(circle + [imported])
            elif imported not in done:
                visit(imported, path + [imported])
        done.add(name)

    for name in sorted(graph):
        visit(name, [name])
    return found


def test_imports_flow_one_way():
    assert circles(imports()) == []


def test_a_planted_deferred_import_back_up_is_a_circle():
    graph = imports()
    assert "attnmt.families" not in graph["attnmt.config"]
    graph["attnmt.config"].add("attnmt.families")            # what config.py's look-up of the registry was
    assert [c for c in circles(graph) if "attnmt.config" in c]


MAX_FUNCTION_LINES = 60


def long_functions() -> list[tuple[int, str]]:
    """(lines, "file:line name") of every function in attnmt/ longer than MAX_FUNCTION_LINES, from its
    `def` to its last line, the docstring included."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    found.append((lines, f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}"))
    return sorted(found, reverse=True)


def test_no_function_is_longer_than_a_screen():
    assert long_functions() == []


def test_only_the_families_name_a_familys_modules():
    naming = {name for name, imported in imports().items()
              if not name.startswith("attnmt.families")
              and any(m.startswith(("attnmt.families.rnn", "attnmt.families.transformer")) for m in imported)}
    assert naming == set()


# ---------------------------------------------------------------------------------------------- the wings

DEVELOPERS = PACKAGE.parent / "DEVELOPERS.md"
CORE = "core"


def wing_list() -> list[tuple[str, list[str]]]:
    """DEVELOPERS.md's wings from the ground up, each with its modules in their order: the fenced block under
    "## Rules" whose first line starts with the core."""
    text = DEVELOPERS.read_text(encoding="utf-8")
    rules = text[text.index("## Rules"):]
    block = rules[rules.index(f"```\n  {CORE} "):].split("\n")[1:]
    lines = [line.split() for line in block[: block.index("  ```")]]
    return [(line[0], line[1:]) for line in lines]


def unit_of(module: str) -> tuple[str, str]:
    """The wing and the name DEVELOPERS.md's list gives a module: a core module by its name (fast/ and
    families/ as one, the package itself as __init__), a wing's by its name within the wing."""
    parts = module.split(".")[1:]
    wings = {wing.rstrip("/") for wing, _ in wing_list() if wing != CORE}
    if not parts:
        return CORE, "__init__"
    if parts[0] in ("fast", "families"):
        return CORE, f"{parts[0]}/"
    if parts[0] in wings:
        return f"{parts[0]}/", parts[1] if len(parts) > 1 else "__init__"
    if parts[0] == "__main__":
        return "cli/", "__main__"
    return CORE, parts[0]


def places() -> dict[tuple[str, str], tuple[int, int]]:
    """(wing, name) -> (the wing's place from the ground up, the name's place on its line); a wing's folder
    that its line does not name (a package whose __init__.py is its docstring alone) stands before its modules."""
    listed = {(wing, name): (i, j) for i, (wing, names) in enumerate(wing_list()) for j, name in enumerate(names)}
    folders = {(wing, "__init__"): (i, -1) for i, (wing, _) in enumerate(wing_list()) if wing != CORE}
    return {**folders, **listed}


def against_the_wings(graph: dict[str, set[str]]) -> list[str]:
    """Every import of `graph` that runs down the wing list: into a later wing, or to a later module of its own
    line ("importer -> imported")."""
    place, wrong = places(), []
    for module, imported in sorted(graph.items()):
        here = place[unit_of(module)]
        for target in sorted(imported):
            there = place[unit_of(target)]
            if unit_of(target) != unit_of(module) and there > here:
                wrong.append(f"{module} -> {target}")
    return wrong


def test_the_wing_list_names_every_module_once():
    listed = [(wing, name) for wing, names in wing_list() for name in names]
    assert len(listed) == len(set(listed)), "a module is listed twice"
    found = {unit_of(module) for module in imports() if not _docstring_alone(module)}
    assert found == set(listed), (sorted(found - set(listed)), sorted(set(listed) - found))


def _docstring_alone(module: str) -> bool:
    """A wing's package whose __init__.py holds its docstring and nothing else."""
    path = PACKAGE.parent.joinpath(*module.split(".")) / "__init__.py"
    return path.is_file() and len(ast.parse(path.read_text(encoding="utf-8")).body) == 1


def test_imports_follow_the_wing_order():
    assert against_the_wings(imports()) == []


def test_a_planted_import_from_a_higher_wing_breaks_the_wing_order():
    graph = imports()
    graph["attnmt.corpus.readers"].add("attnmt.training.train")          # the corpus reading training
    graph["attnmt.translate"].add("attnmt.analysis.explain")              # the core reading a wing
    graph["attnmt.analysis.tables"].add("attnmt.analysis.explain")        # a module later on its own line
    assert against_the_wings(graph) == ["attnmt.analysis.tables -> attnmt.analysis.explain",
                                        "attnmt.corpus.readers -> attnmt.training.train",
                                        "attnmt.translate -> attnmt.analysis.explain"]


def layout_files() -> set[str]:
    """The files DEVELOPERS.md's layout names under attnmt/, as paths: each entry's indentation says its folder."""
    text = DEVELOPERS.read_text(encoding="utf-8")
    layout = text[text.index("## Layout"):text.index("## Rules")]
    block = layout[layout.index("```\nattnmt/"):].split("\n")[2:]
    files, folders = set(), []
    for line in block:
        if not line.startswith("  ") or line.startswith("```"):
            break
        entry = line.split()[0]
        depth = (len(line) - len(line.lstrip())) // 2 - 1
        if not entry.endswith((".py", "/")):
            continue                                                     # a description's second line
        folders[depth:] = [entry] if entry.endswith("/") else []
        if entry.endswith(".py"):
            files.add("".join(folders[:depth]) + entry)
    return files


def test_the_layout_describes_every_module():
    """Every file of the package has its line in the layout, but the folders' __init__.py that only say what
    the folder is (the folder's own line says it: fast/, the families' folders, the wings' docstrings)."""
    modules = {str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")}
    folders = {"fast/__init__.py"} | {"/".join(module.split(".")[1:]) + "/__init__.py" for module in imports()
                                      if _docstring_alone(module)}
    assert layout_files() == modules - folders


REGISTRY = ["attnmt.families", "attnmt.families.rnn", "attnmt.families.rnn.config", "attnmt.families.transformer",
            "attnmt.families.transformer.config"]


@pytest.mark.parametrize("module,loads", [("attnmt.config", []), ("attnmt.families", REGISTRY),
                                          ("attnmt.configfile", REGISTRY)])
def test_the_config_and_the_registry_import_without_torch_or_a_network(module, loads):
    """Importing attnmt.config imports no family at all, the registry and reading a config only the
    families' configs, and none of them torch."""
    probe = (f"import {module}; import sys; assert 'torch' not in sys.modules; "
             "print(sorted(m for m in sys.modules if m.startswith('attnmt.families'))); "
             "from attnmt.families import FAMILIES; print(sorted(FAMILIES)); assert 'torch' not in sys.modules")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [str(loads), "['rnn', 'transformer']"]


@dataclass
class HouseConfig(ModelConfig):
    """A family's config with no keys of its own."""

    arch: str = "house"


def test_registering_makes_a_familys_config_loadable_and_an_arch_is_registered_once():
    values = {"data": {"format": "dates"}, "model": {"arch": "house"}}
    register("house", Family(HouseConfig, "nowhere:Network"))
    try:
        assert model_config_class("house") is HouseConfig and type(config_from_dict(values).model) is HouseConfig
        for arch in ("house", "rnn"):
            taken = FAMILIES[arch]
            with pytest.raises(ValueError, match=f"^model.arch '{arch}' is registered already \\(unregister it first\\)$"):
                register(arch, Family(HouseConfig, "nowhere:Network"))
            assert FAMILIES[arch] is taken                                 # nothing was replaced
    finally:
        unregister("house")
    with pytest.raises(AttnmtError, match="^model.arch: 'house' is not one of rnn, transformer$"):
        model_config_class("house")


# One training iteration (from one optimizer step to the next) and one beam step read few modules: the
# issue's bound, for the default recipes (their model and training settings, tiny sizes, the dates).
TRAINING_MODULES = {"multi30k_de_en.yaml": 12, "multi30k_de_en_transformer.yaml": 7}
SMALL = {"multi30k_de_en.yaml": ["model.emb_dim=16", "model.enc_hidden=16", "model.dec_hidden=32", "model.attn_dim=16"],
         "multi30k_de_en_transformer.yaml": ["model.emb_dim=16", "model.heads=2", "model.ff_dim=32", "model.enc_layers=2",
                                             "model.dec_layers=2"]}
DATES = ["data.format=dates", "data.path=", "data.num_pairs=300", "data.valid_size=20", "data.test_size=0",
         "tokenizer.level=char", "train.batch_size=16", "train.epochs=1", "train.max_minutes=0"]


def recipe(name: str, out_dir: Path):
    """The recipe's model and training settings, at tiny sizes, on the generated dates."""
    from attnmt.configfile import load_config

    return load_config(PACKAGE.parent / "configs" / name, [*DATES, *SMALL[name], f"train.out_dir={out_dir}"])


def modules_run(during) -> set[str]:
    """The attnmt modules whose Python code runs while `during()` runs: it is handed `start` and `stop`,
    which turn the count on and off."""
    seen: set[str] = set()

    def record(frame, event, arg) -> None:
        if event == "call" and f"{PACKAGE}/" in frame.f_code.co_filename:
            seen.add(str(Path(frame.f_code.co_filename).relative_to(PACKAGE.parent)))

    during(lambda: sys.setprofile(record), lambda: sys.setprofile(None))
    return seen


@pytest.mark.parametrize("name", TRAINING_MODULES)
def test_one_training_iteration_runs_few_modules(name, tmp_path, monkeypatch):
    import torch

    from attnmt.training.train import train

    class Stop(Exception):
        pass

    def during(start, stop) -> None:
        step, calls = torch.optim.Adam.step, []

        def counted(optimizer, *args, **kwargs):
            calls.append(1)
            if len(calls) == 3:
                start()
            if len(calls) == 4:
                stop()
                raise Stop
            return step(optimizer, *args, **kwargs)

        monkeypatch.setattr(torch.optim.Adam, "step", counted)
        with pytest.raises(Stop):
            train(recipe(name, tmp_path), log=lambda _: None)

    modules = modules_run(during)
    assert "attnmt/training/step.py" in modules and len(modules) <= TRAINING_MODULES[name], sorted(modules)
    assert not {"attnmt/seam.py", "attnmt/training/distributed.py", "attnmt/precision.py"} & modules, sorted(modules)


@pytest.mark.parametrize("name", TRAINING_MODULES)
def test_one_beam_step_runs_few_modules(name, tmp_path, monkeypatch):
    import torch

    from attnmt import search
    from attnmt.families import build_model

    model = build_model(recipe(name, tmp_path).model, 40, 40).eval()   # one vocabulary: the recipes share it
    decode = search.DecodingBatch.decode

    def during(start, stop) -> None:
        calls = []

        def counted(batch):
            calls.append(1)
            (start if len(calls) == 3 else stop if len(calls) == 4 else (lambda: None))()
            return decode(batch)

        monkeypatch.setattr(search.DecodingBatch, "decode", counted)
        src = torch.randint(4, 40, (4, 9), generator=torch.Generator().manual_seed(0))
        search.beam_search(model, src, torch.full((4,), 9), torch.full((4,), 20), search.SearchSettings(beam_size=3, alpha=1.0))

    modules = modules_run(during)
    assert "attnmt/search.py" in modules and len(modules) <= 6, sorted(modules)


# -------------------------------------------------------------- no family's names outside the families

# Networks of every family as their options build them (each option's parameters appear in one).
FAMILY_SETTINGS = {"rnn": [{}, {"rnn": "lstm", "decoder": "luong", "attention": "general", "input_feeding": True,
                               "enc_layers": 2, "dec_layers": 2}, {"attention": "local_p", "decoder": "luong"},
                              {"attention": "concat", "decoder": "luong", "bridge": "zero"}],
                   "transformer": [{"positions": "learned"}, {"norm": "post"}]}
DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.\w+)+")


def _parts(name: str) -> tuple[str, ...]:
    return tuple("#" if part.isdigit() else part for part in name.split("."))


def _runs(parts: tuple[str, ...]) -> set[tuple[str, ...]]:
    """Every run of two or more consecutive parts of a dotted name: feed_forward.#, classifier.bias."""
    return {parts[i:j] for i in range(len(parts)) for j in range(i + 2, len(parts) + 1)}


def family_names() -> tuple[set[tuple[str, ...]], set[str]]:
    """The runs of the families' parameter names, and their own model keys (those ModelConfig does not share)."""
    import torch

    from attnmt.families import build_model

    runs: set[tuple[str, ...]] = set()
    for arch, settings in FAMILY_SETTINGS.items():
        for values in settings:
            with torch.device("meta"):
                network = build_model(FAMILIES[arch].config(**values), 10, 10)
            runs |= {run for name in network.state_dict() for run in _runs(_parts(name))}
    shared = {f.name for f in dataclasses.fields(ModelConfig)}
    keys = {f.name for family in FAMILIES.values() for f in dataclasses.fields(family.config)} - shared
    return runs, keys


def _strings(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, text) of every string in the code but the docstrings (prose may name anything); an f-string's pieces."""
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
                  and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.lineno, node.value


def naming_a_family(path: str, source: str, runs: set[tuple[str, ...]], keys: set[str]) -> list[str]:
    """Where the module `path` names a family's parameter (a run of its dotted name) or one of a family's own
    model keys (model.KEY, or a key with an underscore by itself) in a string: "path:line text"."""
    found = []
    for line, text in _strings(ast.parse(source)):
        parameter = any(_runs(_parts(name)) & runs for name in DOTTED.findall(text))
        key = text in {k for k in keys if "_" in k} or bool(set(re.findall(r"\bmodel\.(\w+)(?![.\w])", text)) & keys)
        if parameter or key:
            found.append(f"{path}:{line} {text!r}")
    return found


def test_no_module_outside_the_families_names_a_familys_parameters_or_keys():
    runs, keys = family_names()
    outside = [path for path in sorted(PACKAGE.rglob("*.py")) if "families" not in path.parts]
    assert [hit for path in outside for hit in naming_a_family(str(path.relative_to(PACKAGE.parent)),
                                                               path.read_text(encoding="utf-8"), runs, keys)] == []


def test_a_planted_parameter_name_or_key_in_formats_is_found():
    runs, keys = family_names()
    path = PACKAGE / "formats" / "marian.py"
    source = path.read_text(encoding="utf-8")
    assert naming_a_family("marian.py", source, runs, keys) == []
    for planted in ('W1 = "feed_forward.0"', 'HEAD = f"{scope}.classifier.bias"', 'WIDTH = "ff_dim"',
                    'WHY = f"model.heads {heads}"', 'RNN = "decoder.rnn.weight_hh_l0"'):
        assert len(naming_a_family("marian.py", f"{source}\n{planted}\n", runs, keys)) == 1, planted
