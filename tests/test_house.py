"""The house's rules that a reader would otherwise have to check by hand: imports flow one way (no
module imports, at its top, in a function or for the type checker, one that imports it back), no
function is longer than a screen, and outside the families' folders nothing
names a family's modules but the CTranslate2 export, which writes the Transformer's own weights; and
importing a module has no side effects: the config and the families' registry load without torch or a
network, and a family exists by its registry entry alone (issue 62)."""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

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


def test_only_the_families_and_the_transformer_export_name_a_familys_modules():
    naming = {name for name, imported in imports().items()
              if not name.startswith("attnmt.families")
              and any(m.startswith(("attnmt.families.rnn", "attnmt.families.transformer")) for m in imported)}
    assert naming == {"attnmt.formats.ctranslate2"}


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
        search.beam_search(model, src, torch.full((4,), 9), torch.full((4,), 20), 3, 1.0)

    modules = modules_run(during)
    assert "attnmt/search.py" in modules and len(modules) <= 6, sorted(modules)
