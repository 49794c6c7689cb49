"""The models one server translates with: where they come from (a file, a run's folder, a folder of
models, or a YAML list), each loaded once with what it cost, and which model answers a language
pair (its ModelChain, for LibreTranslate's `source` and `target`): one model, or two through a pivot language."""

from __future__ import annotations

import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

import yaml

from ..config import ENGINES, PRECISIONS, source_languages
from ..errors import AttnmtError
from ..files import MODEL_FILE, model_file, model_name
from ..formats.ctranslate2_engine import is_ctranslate2_model

if TYPE_CHECKING:
    from ..translate import TextTranslator


@dataclass(frozen=True)
class ModelSpec:
    """One model to serve, as the command line or a models file names it; precision and engine
    None: the command's flags."""

    path: str
    name: str
    precision: Optional[str] = None
    engine: Optional[str] = None


def model_specs(arguments: list[str]) -> list[ModelSpec]:
    """The models `attnmt serve ARG [ARG ...]` names: each ARG a model file, a training run's folder,
    a CTranslate2 export, NAME=PATH for any of those, a folder holding such models (each served
    under its own name), or a .yaml/.yml file listing them (`models_file`). Names must differ."""
    specs: list[ModelSpec] = []
    for argument in arguments:
        # NAME=PATH, unless the whole argument is a path (a folder may have "=" in its name).
        named = "=" in argument and not Path(argument).exists()
        name, _, path_text = argument.partition("=") if named else ("", "", argument)
        path = Path(path_text)
        if path.suffix in (".yaml", ".yml") and path.is_file():
            if name:
                raise AttnmtError(f"{argument}: a models file names its models itself (NAME= is for one model)")
            specs += models_file(path)
        elif path.is_dir() and not (path / MODEL_FILE).is_file() and not is_ctranslate2_model(path):
            if name:
                raise AttnmtError(f"{argument}: {path} is a folder of models; NAME= is for one model")
            specs += models_in(path)
        else:
            if not path.exists():
                raise AttnmtError(f"{path}: no such model file or folder")
            specs.append(ModelSpec(str(model_file(path)), name or model_name(model_file(path))))
    names = [spec.name for spec in specs]
    for spec in specs:
        if names.count(spec.name) > 1:
            paths = ", ".join(s.path for s in specs if s.name == spec.name)
            raise AttnmtError(f"two models are named {spec.name!r} ({paths}): name them apart as NAME=PATH")
    return specs


def models_in(folder: Path) -> list[ModelSpec]:
    """The models in a folder, by name: its .safetensors files, its training runs' folders and its
    CTranslate2 exports."""
    found = [path for path in sorted(folder.iterdir())
             if (path.is_file() and path.suffix == ".safetensors")
             or (path.is_dir() and ((path / MODEL_FILE).is_file() or is_ctranslate2_model(path)))]
    if not found:
        raise AttnmtError(f"{folder}: no model in this folder (a .safetensors file, a training run's folder with "
                          f"{MODEL_FILE}, or a CTranslate2 export)")
    return [ModelSpec(str(model_file(path)), model_name(model_file(path))) for path in found]


# The keys a models file's entry may have.
SPEC_KEYS = tuple(f.name for f in fields(ModelSpec))


def models_file(path: Path) -> list[ModelSpec]:
    """A YAML file `models:` listing the models, each `path` (relative to the file) and optionally `name`,
    `precision` and `engine`:

        models:
          - {name: de-en, path: runs/de_en}
          - {name: en-de, path: exports/en_de_ct2, engine: ctranslate2}
    """
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise AttnmtError(f"{path}: cannot read it as YAML ({str(err).splitlines()[0]})") from None
    entries = document.get("models") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        raise AttnmtError(f"{path}: expected `models:` with a list of models, each with its `path`")
    specs = []
    for number, entry in enumerate(entries, 1):
        where = f"{path}: models entry {number}"
        if not isinstance(entry, dict):
            raise AttnmtError(f"{where}: expected a mapping with `path` (and name, precision, engine)")
        unknown = sorted(set(entry) - set(SPEC_KEYS))
        if unknown:
            raise AttnmtError(f"{where}: unknown key {unknown[0]!r} (allowed: {', '.join(SPEC_KEYS)})")
        if not isinstance(entry.get("path"), str):
            raise AttnmtError(f"{where}: `path` is missing or not a text")
        for key, allowed in (("precision", PRECISIONS), ("engine", ENGINES)):
            if key in entry and entry[key] not in allowed:
                raise AttnmtError(f"{where}: {key} {entry[key]!r} is not one of {', '.join(allowed)}")
        model_path = path.parent / entry["path"]
        if not model_path.exists():
            raise AttnmtError(f"{where}: {model_path}: no such model file or folder")
        name = entry.get("name", model_name(model_file(model_path)))
        if not isinstance(name, str) or not name:
            raise AttnmtError(f"{where}: `name` must be a non-empty text")
        specs.append(ModelSpec(str(model_file(model_path)), name, entry.get("precision"), entry.get("engine")))
    return specs


@dataclass
class ServedModel:
    """A loaded model and what loading it cost: seconds, and the process's resident memory it added
    (None where not measured, or where /proc/self/status is not there to read)."""

    name: str
    path: str
    translator: TextTranslator
    load_s: Optional[float] = None
    rss_mb: Optional[float] = None

    @property
    def sources(self) -> list[str]:
        return source_languages(self.translator.config.data)

    @property
    def target(self) -> str:
        return self.translator.config.data.tgt_lang

    def pairs(self) -> str:
        """"de, fr to en"."""
        return f"{', '.join(self.sources)} to {self.target}"

    def lines(self) -> list[str]:
        """What the server's log says of it: languages, engine and precision, what loading it cost, and a
        warning on its precision if there is one."""
        engine = self.translator.engine_info()
        cost = "" if self.load_s is None else f", loaded in {self.load_s:.1f} s"
        cost += "" if self.rss_mb is None else f", +{self.rss_mb:.0f} MB resident"
        note = self.translator.precision_note()
        return [f"{self.name}: {self.pairs()}, {engine.engine} {engine.precision}{cost} ({self.path})",
                *([f"{self.name}: {note}"] if note else [])]


def resident_mb() -> Optional[float]:
    """This process's resident memory in MB (Linux), or None."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def load_models(specs: list[ModelSpec], load: Callable[[ModelSpec], TextTranslator], max_models: int,
                log: Callable[[str], None] = lambda _: None) -> list[ServedModel]:
    """Every model loaded by `load`, timed and measured, a line logged as each is ready
    (`ServedModel.lines`); the first that fails to load ends it with one line naming its file (no
    server starts with some of its models)."""
    if len(specs) > max_models:
        raise AttnmtError(f"{len(specs)} models to serve; the limit is {max_models} (--max-models)")
    served = []
    for spec in specs:
        before, start = resident_mb(), time.perf_counter()
        try:
            translator = load(spec)
        except AttnmtError as err:
            message = str(err)
            raise AttnmtError(message if spec.path in message else f"{spec.path}: {message}") from None
        seconds, after = time.perf_counter() - start, resident_mb()
        rss = None if before is None or after is None else max(after - before, 0.0)
        served.append(ServedModel(spec.name, spec.path, translator, seconds, rss))
        for line in served[-1].lines():
            log(line)
    return served


@dataclass(frozen=True)
class ModelChain:
    """The models that translate a language pair, each translating the one before's output: one
    model, or two through the language `pivot`."""

    models: tuple[ServedModel, ...]
    pivot: Optional[str] = None


class ModelSet:
    """The server's models by name, and the language pairs they translate. A pair two models serve
    goes to the first listed on LibreTranslate's API (the other stays reachable by its name); with
    `pivot` a language, a pair no model serves goes through it where two models make the way."""

    def __init__(self, models: list[ServedModel], pivot: Optional[str] = None):
        if not models:
            raise AttnmtError("no model to serve")
        self.models = {model.name: model for model in models}
        self.pivot = pivot
        self.direct: dict[tuple[str, str], ServedModel] = {}
        self.shadowed: list[tuple[ServedModel, str, ServedModel]] = []   # (model, pair, the model that serves it)
        for model in models:
            for source in model.sources:
                first = self.direct.setdefault((source, model.target), model)
                if first is not model:
                    self.shadowed.append((model, f"{source} to {model.target}", first))
        if pivot is not None and not any(pivot in (source, target) for source, target in self.direct):
            raise AttnmtError(f"--pivot {pivot}: no model translates from or into {pivot}")

    @classmethod
    def one(cls, translator: TextTranslator, name: str = "model") -> ModelSet:
        """A set of one model already loaded (create_app's and serve()'s single translator)."""
        return cls([ServedModel(name, name, translator)])

    @property
    def first(self) -> ServedModel:
        return next(iter(self.models.values()))

    def named(self, name: Optional[str]) -> ServedModel:
        """The model `name`; None: the only one. A name the server lacks, or None with several
        models, raises AttnmtError naming the models there are."""
        if name is None:
            if len(self.models) == 1:
                return self.first
            raise AttnmtError(f"model: this server has {len(self.models)} models ({', '.join(self.models)}); "
                              f"name one")
        if name not in self.models:
            raise AttnmtError(f"model: {name!r} is not one of this server's models ({', '.join(self.models)})")
        return self.models[name]

    def chain(self, source: str, target: str) -> Optional[ModelChain]:
        """The model that translates source to target, or two through the pivot, or None (never a
        round trip from a language back into it)."""
        if source == target:
            return None
        if (source, target) in self.direct:
            return ModelChain((self.direct[source, target],))
        if self.pivot is not None and (source, self.pivot) in self.direct and (self.pivot, target) in self.direct:
            return ModelChain((self.direct[source, self.pivot], self.direct[self.pivot, target]), self.pivot)
        return None

    def sources(self) -> list[str]:
        """Every language some model reads, in the models' order."""
        return list(dict.fromkeys(source for source, _ in self.direct))

    def targets_of(self, source: str) -> list[str]:
        """The languages `source` is translated into, directly or through the pivot."""
        return [target for target in self.languages() if self.chain(source, target)]

    def sources_for(self, target: str) -> list[str]:
        """The languages translated into `target` (what `source: auto` detects among)."""
        return [source for source in self.sources() if self.chain(source, target)]

    def languages(self) -> list[str]:
        """Every language read or written, sources first."""
        return list(dict.fromkeys([*self.sources(), *(target for _, target in self.direct)]))

    def notes(self) -> list[str]:
        """What the log says of the set: a pair another model shadows on LibreTranslate's API, and the pivot."""
        lines = [f"{model.name}: {pair} goes to {first.name} on LibreTranslate's API (listed first); {model.name} "
                 f"answers requests that name it" for model, pair, first in self.shadowed]
        if self.pivot is not None:
            lines.append(f"pairs no model translates go through {self.pivot} where two models make the way")
        return lines

    def pairs(self) -> str:
        """What the server translates, for a refusal: "de to en" or "de to en; en to de, through en: de to fr"."""
        direct = "; ".join(dict.fromkeys(model.pairs() for model in self.models.values()))
        if self.pivot is None:
            return direct
        through = [f"{source} to {target}" for source in self.sources() for target in self.targets_of(source)
                   if (source, target) not in self.direct]
        return f"{direct}; through {self.pivot}: {', '.join(through)}" if through else direct
