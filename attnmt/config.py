"""All settings in one typed place: dataclasses, loaded from YAML, overridable by `key=value`."""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional

import yaml

from .errors import AttnmtError


class _YamlLoader(yaml.SafeLoader):
    """YAML 1.1 reads `1e-3` as a string; read it as the number people mean."""


_YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def parse_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_YamlLoader)


DecodePrecision = Literal["fp32", "bf16", "int8"]
PRECISIONS: tuple[str, ...] = typing.get_args(DecodePrecision)


@dataclass
class DataConfig:
    """Where the sentence pairs come from and how they are split."""

    format: Literal["tsv", "parallel", "dates"] = "tsv"
    # tsv: the manythings file; parallel: the directory holding <prefix>.<lang>[.gz] files.
    path: str = ""
    src_lang: str = "de"
    tgt_lang: str = "en"
    # parallel format: file prefixes of the three splits (Multi30k names by default).
    train_prefix: str = "train"
    valid_prefix: str = "val"
    test_prefix: str = "test_2016_flickr"
    # tsv and dates formats: held-out sizes of the seeded split.
    valid_size: int = 1000
    test_size: int = 1000
    # Read only the first N pairs of the file (0 = all); manythings files are sorted by length.
    max_pairs: int = 0
    # dates format: how many pairs to generate in all.
    num_pairs: int = 0
    # Training pairs with more tokens than this on either side are left out.
    max_len: int = 100
    seed: int = 1


@dataclass
class TokenizerConfig:
    # word, char, or sentencepiece subwords (bpe, unigram) trained on the training data.
    level: Literal["word", "char", "bpe", "unigram"] = "word"
    lowercase: bool = False
    # Subwords only: pieces to learn, and one model for both languages (joint) or one each.
    vocab_size: int = 8000
    joint: bool = True


@dataclass
class VocabConfig:
    min_freq: int = 1
    max_size: int = 50000


@dataclass
class ModelConfig:
    rnn: Literal["gru", "lstm"] = "gru"
    emb_dim: int = 256
    enc_hidden: int = 256
    enc_layers: int = 1
    bidirectional: bool = True
    dec_hidden: int = 512
    dec_layers: int = 1
    attention: Literal["bahdanau", "dot", "general", "concat", "none"] = "bahdanau"
    attn_dim: int = 256
    # bahdanau: attend with the previous state, then run the RNN; luong: RNN first, then attend.
    decoder: Literal["bahdanau", "luong"] = "bahdanau"
    input_feeding: bool = False
    bridge: Literal["linear", "copy", "zero"] = "linear"
    dropout: float = 0.2
    # Share the target embedding matrix with the output layer (Press & Wolf 2017); the
    # decoder's output vector then has emb_dim units.
    tie_embeddings: bool = False
    # Initialize every weight uniformly in [-x, x] (0.1 in Luong et al. 2015 and OpenNMT);
    # 0 keeps PyTorch's per-layer defaults.
    init_uniform: float = 0.0


@dataclass
class TrainConfig:
    out_dir: str = "runs/model"
    epochs: int = 10
    # Stop at the end of the epoch in which this many minutes have passed (0 = no limit).
    max_minutes: float = 0.0
    batch_size: int = 64
    batch_type: Literal["sentences", "tokens"] = "sentences"
    lr: float = 1e-3
    clip: float = 1.0
    teacher_forcing: float = 1.0
    label_smoothing: float = 0.0
    # Learning rate: constant; halved (plateau_factor) when validation stops improving for
    # plateau_patience epochs; or linear warmup over warmup_steps, then inverse square root decay.
    scheduler: Literal["none", "plateau", "warmup"] = "none"
    plateau_factor: float = 0.5
    plateau_patience: int = 1
    warmup_steps: int = 1000
    min_lr: float = 1e-5
    # Which validation figure picks the best model and drives plateau and early stopping.
    select_by: Literal["loss", "bleu"] = "loss"
    # Stop after this many validations without a better model (0 = never stop early).
    patience: int = 0
    # At the end, average the weights of the last N epochs and keep the average if it validates better.
    average_last: int = 0
    seed: int = 1
    device: str = "auto"
    # fp32, or bf16 mixed precision (matrix products in bfloat16; weights and loss in fp32).
    precision: Literal["fp32", "bf16"] = "fp32"
    # Without a terminal for the progress bar, log a line every this many updates (0 = never).
    log_every: int = 200
    # Also save checkpoint.safetensors every this many updates (0 = only at the end of each epoch).
    checkpoint_every: int = 500
    # Stop early once validation exact match reaches this fraction (0 = never).
    target_exact_match: float = 0.0
    samples: int = 3


@dataclass
class DecodeConfig:
    # Longer inputs are cut to this many tokens (a documented limit instead of running out of memory).
    max_src_len: int = 250
    # Outputs stop after max_len_ratio x source tokens + max_len_extra tokens at the latest.
    max_len_ratio: float = 2.0
    max_len_extra: int = 10
    batch_size: int = 64
    # 1 = greedy decoding; more = beam search with that many hypotheses per sentence.
    beam_size: int = 1
    # GNMT length penalty exponent for beam search (0 = rank by plain log-probability).
    alpha: float = 0.0
    # fp32; bf16 matrix products (faster on CPUs with AVX512-BF16/AMX and recent GPUs); or int8,
    # bf16 with the decoder's per-step products (RNN, query, combine, output layer) in int8
    # (CPUs only; fastest on CPUs with AVX512-VNNI/AMX).
    precision: DecodePrecision = "fp32"


@dataclass
class ServeConfig:
    """Limits of `attnmt serve`; not stored in model files. Each field is a CLI flag (--max-chars ...)."""

    max_chars: int = field(default=1000, metadata={"help": "characters per sentence"})
    max_tokens: int = field(default=250, metadata={"help": "source tokens per sentence"})
    max_sentences: int = field(default=32, metadata={"help": "sentences per request"})
    max_beam: int = field(default=10, metadata={"help": "largest beam a request may ask for"})
    timeout_s: float = field(default=30.0, metadata={"help": "seconds a request may wait and run before a 504"})
    queue_size: int = field(default=256, metadata={"help": "requests waiting for the model before a 503"})
    # Requests arriving within this window with the same options share one model call.
    batch_window_ms: float = field(default=5.0, metadata={"help": "milliseconds to gather requests into a batch"})
    max_batch: int = field(default=64, metadata={"help": "sentences per model call"})

    def max_body_bytes(self) -> int:
        # A JSON-escaped character takes at most 6 bytes (\uXXXX); the rest is room for the keys.
        return self.max_sentences * self.max_chars * 6 + 4096


def validate_serve(config: ServeConfig) -> None:
    for f in dataclasses.fields(config):
        if getattr(config, f.name) <= 0 and f.name != "batch_window_ms":
            raise AttnmtError(f"serve {f.name} must be positive, got {getattr(config, f.name)}")
    if config.batch_window_ms < 0:
        raise AttnmtError(f"serve batch_window_ms must be 0 or more, got {config.batch_window_ms}")


@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    vocab: VocabConfig = field(default_factory=VocabConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


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
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in values.items():
        path = f"{where}.{key}" if where else str(key)
        if key not in names:
            raise AttnmtError(f"unknown config key {path!r}; valid keys here: {', '.join(names)}")
        hint = hints[key]
        if dataclasses.is_dataclass(hint):
            kwargs[key] = _build(hint, value or {}, path)
        else:
            kwargs[key] = _check_value(value, hint, path)
    return cls(**kwargs)


def config_from_dict(values: dict) -> Config:
    config = _build(Config, values, "")
    validate(config)
    return config


def apply_overrides(values: dict, overrides: list[str]) -> dict:
    """Apply `section.key=value` strings (values parsed as YAML scalars) to a config dict."""
    for item in overrides:
        if "=" not in item:
            raise AttnmtError(f"override {item!r}: expected section.key=value, e.g. model.attention=dot")
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
    try:
        return config_from_dict(apply_overrides(values, overrides or []))
    except AttnmtError as err:
        raise AttnmtError(f"{path}: {err}") from None


def validate(config: Config) -> None:
    """Refuse combinations that cannot be built, naming the keys involved."""
    m, t, d = config.model, config.train, config.data
    enc_out = m.enc_hidden * (2 if m.bidirectional else 1)
    if m.attention == "dot" and enc_out != m.dec_hidden:
        raise AttnmtError(
            f"model.attention=dot needs encoder outputs ({enc_out}) as wide as model.dec_hidden ({m.dec_hidden})"
        )
    if m.bridge == "copy" and enc_out != m.dec_hidden:
        raise AttnmtError(f"model.bridge=copy needs encoder outputs ({enc_out}) == model.dec_hidden ({m.dec_hidden})")
    if m.input_feeding and m.decoder != "luong":
        raise AttnmtError("model.input_feeding applies to model.decoder=luong only (bahdanau feeds the context already)")
    for name, value in [("model.emb_dim", m.emb_dim), ("model.enc_hidden", m.enc_hidden),
                        ("model.dec_hidden", m.dec_hidden), ("model.attn_dim", m.attn_dim),
                        ("model.enc_layers", m.enc_layers), ("model.dec_layers", m.dec_layers),
                        ("train.batch_size", t.batch_size), ("train.epochs", t.epochs),
                        ("data.max_len", d.max_len)]:
        if value < 1:
            raise AttnmtError(f"{name} must be at least 1, got {value}")
    if not 0.0 <= m.dropout < 1.0:
        raise AttnmtError(f"model.dropout must be in [0, 1), got {m.dropout}")
    if m.init_uniform < 0:
        raise AttnmtError(f"model.init_uniform must be 0 (PyTorch's defaults) or a positive range, got {m.init_uniform}")
    if not 0.0 <= t.teacher_forcing <= 1.0:
        raise AttnmtError(f"train.teacher_forcing must be in [0, 1], got {t.teacher_forcing}")
    if not 0.0 <= t.label_smoothing < 1.0:
        raise AttnmtError(f"train.label_smoothing must be in [0, 1), got {t.label_smoothing}")
    if d.format != "dates" and not d.path:
        raise AttnmtError("data.path is required: the TSV file or the directory of parallel files")
    if d.format == "tsv" and "en" not in (d.src_lang, d.tgt_lang):
        raise AttnmtError("data.format=tsv: manythings files hold English in column 1, so src_lang or tgt_lang must be 'en'")
