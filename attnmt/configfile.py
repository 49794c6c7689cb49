"""Reading a config: from a YAML file with key=value overrides (`load_config`), or from the dict a model
file holds (`saved_config`). Each key's type is checked where it is read, naming it; the model
section's class is its family's, chosen by model.arch from the registry (families/), which is why this
module sits above the families while config.py, which their configs build on, sits below them."""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from pathlib import Path
from typing import Any, Literal, Optional

import yaml

from .config import MODEL_DECODE_KEYS, RENAMED_VALUES, Config, ModelConfig, validate
from .errors import AttnmtError, did_you_mean, nearest
from .families import FAMILIES


class _YamlLoader(yaml.SafeLoader):
    """YAML 1.1 reads `1e-3` as a string; read it as the number people mean."""


_YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def parse_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_YamlLoader)


DEFAULT_ARCH = "rnn"   # a config without model.arch, and model files written before families existed


def model_config_class(arch: str) -> type[ModelConfig]:
    """The config class of the family `arch` (the registry's); refuses a family nobody registered."""
    try:
        return FAMILIES[arch].config
    except KeyError:
        raise AttnmtError(f"model.arch: {arch!r} is not one of {', '.join(FAMILIES)}") from None


def _check_value(value: Any, hint: Any, where: str) -> Any:
    """Return `value` as type `hint`, or raise naming the key `where`."""
    origin = typing.get_origin(hint)
    if origin is Literal:
        allowed = typing.get_args(hint)
        if value not in allowed:
            raise AttnmtError(f"{where}: {value!r} is not one of {', '.join(map(str, allowed))}")
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in typing.get_args(hint):
            return None
        inner = [a for a in typing.get_args(hint) if a is not type(None)][0]
        return _check_value(value, inner, where)
    if origin is list:
        if not isinstance(value, list):
            raise AttnmtError(f"{where}: expected a list, e.g. [a, b], got {value!r}")
        (item,) = typing.get_args(hint)
        return [_check_value(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    if hint is bool:
        if not isinstance(value, bool):
            raise AttnmtError(f"{where}: expected true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise AttnmtError(f"{where}: expected an integer, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise AttnmtError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if hint is str:
        if isinstance(value, bool):
            raise AttnmtError(f"{where}: expected a string, got {value!r} (YAML reads yes/no/on/off as "
                              f"true/false; put the value in quotes)")
        if not isinstance(value, (str, int, float)):
            raise AttnmtError(f"{where}: expected a string, got {value!r}")
        return str(value)
    raise TypeError(f"unsupported config type {hint} at {where}")


def _build(cls: type, values: dict, where: str) -> Any:
    if not isinstance(values, dict):
        raise AttnmtError(f"{where or 'config'}: expected a mapping of keys, got {values!r}")
    if cls is Config:
        values = {**values, "model": _model_section(values)}
    if cls is ModelConfig:
        arch = values.get("arch", DEFAULT_ARCH)
        cls = model_config_class(_check_value(arch, str, f"{where}.arch"))
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in values.items():
        path = f"{where}.{key}" if where else str(key)
        if key not in fields:
            owners = ([arch for arch, family in FAMILIES.items() if key in {f.name for f in dataclasses.fields(family.config)}]
                      if issubclass(cls, ModelConfig) else [])
            if owners:
                raise AttnmtError(f"{path} is a key of model.arch {' and '.join(owners)}, not of this config's "
                                  f"{values.get('arch', DEFAULT_ARCH)}; its keys: {', '.join(fields)}")
            meant = did_you_mean(f"{where}.{name}" if where else name for name in nearest(str(key), fields))
            raise AttnmtError(f"unknown config key {path!r}{meant}; valid keys here: {', '.join(fields)}")
        hint = hints[key]
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            kwargs[key] = _build(hint, value or {}, path)
        else:
            kwargs[key] = _check_value(value, hint, path)
    return cls(**kwargs)


def _model_section(values: dict) -> Any:
    """The model section of the config `values` (none: the default family's). A fine-tuning run's
    (train.init_from) that does not name model.arch is read as the family whose keys it sets, the
    default one where it sets only shared keys such as model.dropout: the model file's family,
    known once the file is read, is checked then (fine_tuning_config)."""
    model, train = values.get("model") or {}, values.get("train")
    if not (isinstance(model, dict) and model and "arch" not in model and isinstance(train, dict)
            and train.get("init_from")):
        return model
    owners = sorted((arch for arch, family in FAMILIES.items()
                     if set(model) <= {f.name for f in dataclasses.fields(family.config)}), key=lambda a: a != DEFAULT_ARCH)
    return {**model, "arch": owners[0]} if owners else model


def config_from_dict(values: dict) -> Config:
    """The config `values` (sections of keys) describe, checked: types, ranges and combinations; it
    records which keys `values` set (Config.given)."""
    values = _moved_keys(values)
    config = _build(Config, values, "")
    config.given = frozenset(f"{section}.{key}" for section, keys in values.items() if isinstance(keys, dict)
                             for key in keys)
    validate(config)
    return config


def fine_tuning_config(config: Config, saved: Config, source: str) -> Config:
    """The config of a run that starts from the model file `source` (train.init_from), whose config is
    `saved`: its model, tokenizer and vocab sections are the file's, with the dropouts `config` sets
    (they say how the run trains, not what the weights are); its decode keys of the model
    (MODEL_DECODE_KEYS) are the file's where `config` leaves them out. Any other key `config` sets
    (Config.given; every key of a config built in Python) must have the file's value: one line
    naming it otherwise."""
    def sets(section: str, key: str) -> bool:
        return config.given is None or f"{section}.{key}" in config.given

    sections: dict[str, Any] = {}
    for name in ("model", "tokenizer", "vocab"):
        ours, theirs = getattr(config, name), getattr(saved, name)
        keys, kept = {f.name for f in dataclasses.fields(theirs)}, {}
        for key in (f.name for f in dataclasses.fields(ours) if sets(name, f.name)):
            value = getattr(ours, key)
            if key not in keys:
                raise AttnmtError(f"train.init_from {source}: {name}.{key} is a key of model.arch {ours.arch}, and the "
                                  f"model file's is {theirs.arch}; a fine-tuning run keeps the file's architecture, so "
                                  f"leave {name}.{key} out")
            if "dropout" in key:
                kept[key] = value
            elif value != getattr(theirs, key):
                raise AttnmtError(f"train.init_from {source}: {name}.{key} is {value!r} in this config, "
                                  f"{getattr(theirs, key)!r} in the model file; a fine-tuning run keeps the file's "
                                  f"architecture, tokenizers and vocabularies, so leave {name}.{key} out (dropouts "
                                  f"may differ)")
        sections[name] = dataclasses.replace(theirs, **kept)
    decode = {key: getattr(saved.decode, key) for key in MODEL_DECODE_KEYS if not sets("decode", key)}
    fine = dataclasses.replace(config, **sections, decode=dataclasses.replace(config.decode, **decode))
    validate(fine)
    return fine


def _moved_keys(values: dict) -> dict:
    """`values` with the keys earlier versions kept elsewhere in their new place (each family moves its
    own: ModelConfig.moved_keys) and the values they named otherwise under today's names (RENAMED_VALUES),
    so that their configs and model files read alike."""
    for (section, key), names in RENAMED_VALUES.items():
        keys = values.get(section)
        if isinstance(keys, dict) and isinstance(keys.get(key), str) and keys[key] in names:
            values = {**values, section: {**keys, key: names[keys[key]]}}
    model = values.get("model")
    arch = model.get("arch", DEFAULT_ARCH) if isinstance(model, dict) else DEFAULT_ARCH
    family = FAMILIES.get(arch) if isinstance(arch, str) else None
    return values if family is None else family.config.moved_keys(values)


def saved_config(values: dict) -> Config:
    """The config a model file, checkpoint or exported engine holds, as written by any version: files
    written before each family had its own keys hold every family's, of which model.arch's are kept."""
    model = values.get("model")
    if isinstance(model, dict):
        family = model_config_class(model.get("arch", DEFAULT_ARCH))
        keys = {f.name for f in dataclasses.fields(family)}
        values = {**values, "model": {key: value for key, value in model.items() if key in keys}}
    return config_from_dict(values)


def apply_overrides(values: dict, overrides: list[str]) -> dict:
    """Apply `section.key=value` strings (values parsed as YAML scalars) to a config dict."""
    for item in overrides:
        if "=" not in item:
            raise AttnmtError(f"override {item!r}: expected section.key=value, e.g. model.emb_dim=128")
        dotted, raw = item.split("=", 1)
        keys = dotted.strip().split(".")
        try:
            value = parse_yaml(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        node = values
        for key in keys[:-1]:
            if node.get(key) is None:  # absent, or a section whose keys are all commented out
                node[key] = {}
            node = node[key]
            if not isinstance(node, dict):
                raise AttnmtError(f"override {item!r}: {key!r} is not a section")
        node[keys[-1]] = value
    return values


def load_config(path: str | Path, overrides: Optional[list[str]] = None) -> Config:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise AttnmtError(f"{path}: config file not found") from None
    except (OSError, UnicodeDecodeError) as err:
        raise AttnmtError(f"{path}: cannot read config: {err}") from None
    try:
        values = parse_yaml(text) or {}
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark else ""
        raise AttnmtError(f"{path}:{line} is not valid YAML: {getattr(err, 'problem', err)}") from None
    if not isinstance(values, dict):
        raise AttnmtError(f"{path}: expected a YAML mapping of sections (data, model, train, ...)")
    values = _moved_keys(values)
    # The file's keys and value types are checked on their own, then each override's in turn, so that
    # a mistake is blamed on where it was made: the file, or the command line. Ranges and combinations
    # (validate) are checked once every override is in, which may settle what the file leaves open.
    try:
        _build(Config, values, "")
    except AttnmtError as err:
        raise AttnmtError(f"{path}: {err}") from None
    for item in overrides or []:
        values = _moved_keys(apply_overrides(values, [item]))
        try:
            _build(Config, values, "")
        except AttnmtError as err:
            raise AttnmtError(f"override {item!r}: {err}") from None
    try:
        return config_from_dict(values)
    except AttnmtError as err:
        raise AttnmtError(f"{path}: {err}") from None
