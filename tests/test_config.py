"""Typed config: YAML loading, key=value overrides, type checks and cross-field validation."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from attnmt.config import Config, TrainConfig, source_languages, validate
from attnmt.configfile import apply_overrides, config_from_dict, load_config
from attnmt.errors import AttnmtError
from attnmt.families.rnn.config import RNNConfig

REPO = Path(__file__).resolve().parents[1]

BASE = """\
data:
  format: tsv
  path: deu.txt.gz
  src_lang: de
  tgt_lang: en
  valid_size: 500
model:
  rnn: lstm
  emb_dim: 128
  enc_hidden: 128
  dec_hidden: 256
  attention: general
  dropout: 0.1
train:
  epochs: 4
  lr: 0.0005
  batch_type: tokens
  batch_size: 2000
"""


def write(tmp_path: Path, text: str, name: str = "config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def error_of(path: Path, overrides=None) -> str:
    with pytest.raises(AttnmtError) as info:
        load_config(path, overrides)
    return str(info.value)


# --------------------------------------------------------------------------- loading


def test_load_config_from_yaml(tmp_path):
    config = load_config(write(tmp_path, BASE))
    assert isinstance(config, Config)
    assert config.data.format == "tsv" and config.data.path == "deu.txt.gz"
    assert config.data.valid_size == 500
    assert config.data.test_size == 1000  # default kept
    assert config.model.rnn == "lstm" and config.model.emb_dim == 128
    assert config.model.attention == "general"
    assert config.train.epochs == 4 and config.train.lr == pytest.approx(5e-4)
    assert config.train.batch_type == "tokens"
    assert config.decode.max_src_len == 250  # whole section defaulted


def test_load_config_int_for_float_becomes_float(tmp_path):
    config = load_config(write(tmp_path, "data:\n  format: dates\ntrain:\n  lr: 1\n  max_minutes: 5\n"))
    assert config.train.lr == 1.0 and isinstance(config.train.lr, float)
    assert isinstance(config.train.max_minutes, float)


def test_load_config_empty_file_and_empty_section(tmp_path):
    # An empty file is all defaults, which (tsv without data.path) does not validate.
    assert "data.path" in error_of(write(tmp_path, ""))
    config = load_config(write(tmp_path, "data:\n  format: dates\nmodel:\n"))
    assert config.model == RNNConfig()                                     # the default family's defaults


def test_to_dict_round_trip(tmp_path):
    config = load_config(write(tmp_path, BASE))
    assert config_from_dict(config.to_dict()) == config


@pytest.mark.parametrize("name", ["tatoeba_de_en.yaml", "multi30k_de_en.yaml", "finetune.yaml"])
def test_shipped_configs_load(name):
    path = REPO / "configs" / name
    if not path.exists():
        pytest.skip(f"{path} not in this checkout")
    config = load_config(path)
    assert config.data.src_lang == "de" and config.data.tgt_lang == "en"


def test_missing_config_file(tmp_path):
    missing = tmp_path / "nope.yaml"
    message = error_of(missing)
    assert str(missing) in message and "not found" in message


def test_config_that_is_not_a_mapping(tmp_path):
    message = error_of(write(tmp_path, "- a\n- b\n"))
    assert "mapping" in message


# --------------------------------------------------------------------------- unknown keys and types


def test_unknown_key_names_key_and_lists_valid_keys(tmp_path):
    path = write(tmp_path, BASE.replace("  epochs: 4\n", "  epochs: 4\n  epoch_count: 9\n"))
    message = error_of(path)
    assert "train.epoch_count" in message
    assert str(path) in message
    for valid in ("epochs", "lr", "batch_size", "batch_type", "clip"):
        assert valid in message


def test_unknown_section(tmp_path):
    message = error_of(write(tmp_path, BASE + "optimizer:\n  name: adam\n"))
    assert "optimizer" in message
    for section in ("data", "tokenizer", "vocab", "model", "train", "decode"):
        assert section in message


def test_section_that_is_not_a_mapping(tmp_path):
    message = error_of(write(tmp_path, "data:\n  format: dates\nmodel: 5\n"))
    assert "model" in message


@pytest.mark.parametrize(
    "section, key, value",
    [
        ("model", "emb_dim", '"big"'),
        ("model", "emb_dim", "256.5"),
        ("model", "emb_dim", "true"),
        ("train", "lr", '"fast"'),
        ("train", "lr", "[0.1]"),
        ("model", "attention", "magic"),
        ("model", "rnn", "transformer"),
        ("model", "bidirectional", '"sometimes"'),
        ("model", "bidirectional", "1"),
        ("data", "format", "csv"),
        ("data", "path", "[a, b]"),
        ("train", "batch_type", "words"),
    ],
)
def test_wrong_type_names_key(tmp_path, section, key, value):
    path = write(tmp_path, f"data:\n  format: dates\n{section}:\n  {key}: {value}\n")
    message = error_of(path)
    assert f"{section}.{key}" in message


def test_literal_error_lists_allowed_values(tmp_path):
    message = error_of(write(tmp_path, "data:\n  format: dates\nmodel:\n  attention: magic\n"))
    for allowed in ("bahdanau", "dot", "general", "concat", "none"):
        assert allowed in message


def test_scientific_notation_float_in_yaml(tmp_path):
    """`lr: 1e-3` is how learning rates are usually written; PyYAML (YAML 1.1) reads it as a string."""
    config = load_config(write(tmp_path, "data:\n  format: dates\ntrain:\n  lr: 1e-3\n  label_smoothing: 1e-1\n"))
    assert config.train.lr == pytest.approx(1e-3)
    assert config.train.label_smoothing == pytest.approx(0.1)


# --------------------------------------------------------------------------- overrides


def test_overrides_apply_with_yaml_typing(tmp_path):
    path = write(tmp_path, BASE)
    config = load_config(path, ["model.attention=dot", "model.dec_hidden=256", "train.epochs=3",
                                "train.lr=0.01", "model.bidirectional=true", "data.path=other/deu.txt"])
    assert config.model.attention == "dot"
    assert config.model.dec_hidden == 256
    assert config.train.epochs == 3 and isinstance(config.train.epochs, int)
    assert config.train.lr == pytest.approx(0.01)
    assert config.model.bidirectional is True
    assert config.data.path == "other/deu.txt"


def test_override_creates_missing_sections(tmp_path):
    path = write(tmp_path, "data:\n  format: dates\n")
    config = load_config(path, ["model.rnn=lstm", "decode.max_len_extra=7", "train.epochs=2"])
    assert config.model.rnn == "lstm"
    assert config.decode.max_len_extra == 7
    assert config.train.epochs == 2


def test_override_into_empty_section(tmp_path):
    """A section whose keys are all commented out is null in YAML; overrides must still apply to it."""
    path = write(tmp_path, "data:\n  format: dates\nmodel:\n  # attention: dot\n")
    config = load_config(path, ["model.attention=dot"])
    assert config.model.attention == "dot"


def test_override_value_with_equals_sign_and_spaces(tmp_path):
    path = write(tmp_path, "data:\n  format: dates\n")
    config = load_config(path, ["train.out_dir=runs/a=b", "train.device= cpu"])
    assert config.train.out_dir == "runs/a=b"
    assert config.train.device == "cpu"


def test_override_scientific_notation(tmp_path):
    config = load_config(write(tmp_path, "data:\n  format: dates\n"), ["train.lr=1e-4"])
    assert config.train.lr == pytest.approx(1e-4)


def test_override_wrong_type_names_key(tmp_path):
    message = error_of(write(tmp_path, "data:\n  format: dates\n"), ["train.epochs=many"])
    assert message.startswith("override 'train.epochs=many': train.epochs: expected an integer")


def test_override_unknown_key_is_blamed_on_the_override_not_the_file(tmp_path):
    path = write(tmp_path, "data:\n  format: dates\n")
    message = error_of(path, ["train.epochs=2", "model.atention=dot"])
    assert message.startswith("override 'model.atention=dot': unknown config key 'model.atention'"), message
    assert "attention" in message.split(";")[1] and str(path) not in message
    # A mistake in the file still names the file, even with overrides that are fine.
    path = write(tmp_path, "data:\n  format: dates\nmodel:\n  atention: dot\n")
    assert error_of(path, ["train.epochs=2"]).startswith(f"{path}: unknown config key 'model.atention'")


def test_an_unknown_key_names_the_nearest_one_and_a_language_code_in_capitals_is_named(tmp_path):
    message = error_of(write(tmp_path, "data:\n  format: dates\ntrain:\n  max_minute: 5\n"), [])
    assert "unknown config key 'train.max_minute' (did you mean train.max_minutes?); valid keys here: " in message
    assert "(did you mean" not in error_of(write(tmp_path, "data:\n  format: dates\ntrain:\n  zzz: 5\n"), [])
    message = error_of(write(tmp_path, "data:\n  format: tsv\n  path: pairs.tsv\n  src_lang: EN\n  tgt_lang: fr\n"), [])
    assert message.endswith("src_lang or tgt_lang must be 'en' (language codes are lower case: 'EN' is not 'en')")


def test_override_without_equals(tmp_path):
    message = error_of(write(tmp_path, "data:\n  format: dates\n"), ["model.attention"])
    assert message == "override 'model.attention': expected section.key=value, e.g. model.emb_dim=128"
    with pytest.raises(AttnmtError, match="^override 'train.epochs:3': expected section.key=value"):
        apply_overrides({}, ["train.epochs:3"])


def test_override_through_a_scalar_is_an_error():
    with pytest.raises(AttnmtError, match="lr"):
        apply_overrides({"train": {"lr": 0.1}}, ["train.lr.x=1"])


def test_apply_overrides_returns_nested_dict():
    assert apply_overrides({}, ["a.b.c=1", "a.d=x", "e="]) == {"a": {"b": {"c": 1}, "d": "x"}, "e": ""}


# --------------------------------------------------------------------------- invalid YAML


@pytest.mark.parametrize(
    "text, line",
    [
        ("data:\n  format: dates\nmodel:\n  attention: [dot\n", 5),
        ("data:\n  format: dates\n  path: a\n bad_indent: 1\n", 4),
        ("data:\n  format: dates\n\ntrain:\n  lr: 0.1\n   epochs: 3\n", 6),
    ],
)
def test_invalid_yaml_reports_line(tmp_path, text, line):
    path = write(tmp_path, text)
    message = error_of(path)
    assert str(path) in message
    assert "YAML" in message
    assert re.search(rf"line {line}\b", numbers_free(message, path)), message


def numbers_free(message: str, path: Path) -> str:
    return message.replace(str(path), "<path>")


def test_config_not_utf8(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("data:\n  path: caf\xe9\n".encode("latin-1"))
    assert str(path) in error_of(path)


# --------------------------------------------------------------------------- validation


def valid_dict(**sections) -> dict:
    values = {"data": {"format": "tsv", "path": "deu.txt", "src_lang": "de", "tgt_lang": "en"}}
    for name, settings in sections.items():
        values.setdefault(name, {}).update(settings)
    return values


def test_the_defaults_are_valid_and_what_is_not_given_takes_them():
    values = valid_dict()
    config = config_from_dict(values)
    defaults = Config(model=RNNConfig()).to_dict()
    assert config.to_dict() == {**defaults, "data": {**defaults["data"], **values["data"]}}
    validate(config)  # reads, changes nothing
    assert config.to_dict() == config_from_dict(values).to_dict()


def test_the_linear_schedule_must_decay_after_its_warmup():
    with pytest.raises(AttnmtError, match=r"^train.decay_steps=500: .* above train.warmup_steps=500"):
        config_from_dict(valid_dict(train={"scheduler": "linear", "warmup_steps": 500, "decay_steps": 500}))
    config_from_dict(valid_dict(train={"scheduler": "linear", "warmup_steps": 500, "decay_steps": 501}))


def test_dot_attention_with_mismatched_sizes():
    with pytest.raises(AttnmtError, match="dot"):
        config_from_dict(valid_dict(model={"attention": "dot", "enc_hidden": 256, "bidirectional": True,
                                           "dec_hidden": 256}))
    # 2 x 256 == 512: fine
    config_from_dict(valid_dict(model={"attention": "dot", "enc_hidden": 256, "bidirectional": True,
                                       "dec_hidden": 512}))
    config_from_dict(valid_dict(model={"attention": "dot", "enc_hidden": 256, "bidirectional": False,
                                       "dec_hidden": 256}))


def test_local_attention_with_a_dot_score_checks_the_sizes_too():
    model = {"attention": "local_p", "local_score": "dot", "enc_hidden": 256, "bidirectional": True}
    with pytest.raises(AttnmtError, match="model.local_score=dot needs encoder outputs .512. as wide as "
                                          "model.dec_hidden .256."):
        config_from_dict(valid_dict(model={**model, "dec_hidden": 256}))
    config_from_dict(valid_dict(model={**model, "dec_hidden": 512}))
    config_from_dict(valid_dict(model={**model, "local_score": "general", "dec_hidden": 256}))


def test_dot_attention_mismatch_via_load_config_names_file(tmp_path):
    path = write(tmp_path, BASE)
    assert load_config(path, ["model.attention=dot"]).model.attention == "dot"  # 2 x 128 == 256
    message = error_of(path, ["model.attention=dot", "model.dec_hidden=300"])
    assert str(path) in message and "model.attention=dot" in message
    assert "256" in numbers_free(message, path) and "300" in numbers_free(message, path)


def test_copy_bridge_with_mismatched_sizes():
    with pytest.raises(AttnmtError, match="bridge"):
        config_from_dict(valid_dict(model={"bridge": "copy", "enc_hidden": 256, "dec_hidden": 256}))


def test_input_feeding_needs_luong_decoder():
    with pytest.raises(AttnmtError, match="input_feeding"):
        config_from_dict(valid_dict(model={"input_feeding": True, "decoder": "bahdanau"}))
    config = config_from_dict(valid_dict(model={"input_feeding": True, "decoder": "luong"}))
    assert config.model.input_feeding


@pytest.mark.parametrize("src, tgt", [("de", "fr"), ("mr", "de"), ("EN", "de")])
def test_tsv_needs_an_english_side(src, tgt):
    with pytest.raises(AttnmtError, match="en"):
        config_from_dict(valid_dict(data={"src_lang": src, "tgt_lang": tgt}))


@pytest.mark.parametrize("src, tgt", [("en", "mr"), ("de", "en")])
def test_tsv_with_english_side_passes(src, tgt):
    config = config_from_dict(valid_dict(data={"src_lang": src, "tgt_lang": tgt}))
    assert (config.data.src_lang, config.data.tgt_lang) == (src, tgt)


def test_parallel_format_needs_no_english_side():
    config = config_from_dict(valid_dict(data={"format": "parallel", "src_lang": "de", "tgt_lang": "fr"}))
    assert config.data.format == "parallel"


def test_path_required_except_for_dates():
    with pytest.raises(AttnmtError, match="data.path"):
        config_from_dict({"data": {"format": "parallel"}})
    config_from_dict({"data": {"format": "dates"}})


@pytest.mark.parametrize(
    "section, key, value",
    [
        ("model", "emb_dim", 0),
        ("model", "enc_layers", 0),
        ("train", "batch_size", 0),
        ("train", "epochs", -1),
        ("data", "max_len", 0),
        ("model", "dropout", 1.0),
        ("model", "dropout", -0.1),
        ("model", "teacher_forcing", 1.5),
        ("train", "label_smoothing", 1.0),
        ("train", "adam_beta2", 1.0),
    ],
)
def test_out_of_range_values_name_key(section, key, value):
    with pytest.raises(AttnmtError, match=re.escape(f"{section}.{key}")):
        config_from_dict(valid_dict(**{section: {key: value}}))


def test_train_teacher_forcing_of_earlier_configs_and_files_is_the_rnns_model_teacher_forcing(tmp_path):
    assert config_from_dict(valid_dict(train={"teacher_forcing": 0.5})).model.teacher_forcing == 0.5
    path = write(tmp_path, BASE + "  teacher_forcing: 0.7\n")             # in BASE's train section
    assert load_config(path).model.teacher_forcing == 0.7
    assert load_config(path, ["train.teacher_forcing=0.3"]).model.teacher_forcing == 0.3
    transformer = {"arch": "transformer", "heads": 2}
    assert config_from_dict(valid_dict(model=transformer, train={"teacher_forcing": 1.0})).train == TrainConfig()
    with pytest.raises(AttnmtError, match="model.teacher_forcing is a key of model.arch rnn, not of this config's "
                                          "transformer"):
        config_from_dict(valid_dict(model=transformer, train={"teacher_forcing": 0.5}))


def test_validation_error_from_file_names_file(tmp_path):
    path = write(tmp_path, BASE)
    message = error_of(path, ["model.input_feeding=true"])
    assert str(path) in message and "input_feeding" in message


@pytest.mark.parametrize("value, fragment", [
    ("en fr_FR", "data.source_languages: 'fr_FR' is not a language code"),
    ("en de en", "data.source_languages: 'en' is named twice"),
    ("auto", "data.source_languages: 'auto' is not a language code"),
])
def test_source_languages_are_language_codes_named_once(tmp_path, value, fragment):
    assert fragment in error_of(write(tmp_path, "data:\n  format: dates\n"), [f"data.source_languages={value}"])


def test_source_languages_default_to_src_lang(tmp_path):
    path = write(tmp_path, "data:\n  format: dates\n  src_lang: fr\n")
    assert source_languages(load_config(path).data) == ["fr"]
    assert source_languages(load_config(path, ["data.source_languages=en de pt-BR"]).data) == ["en", "de", "pt-BR"]


def test_each_family_owns_its_keys(tmp_path):
    from attnmt.families.rnn.config import RNNConfig
    from attnmt.families.transformer.config import TransformerConfig

    path = write(tmp_path, BASE)
    assert type(load_config(path).model) is RNNConfig
    # A key of another family is refused, naming the key, the family it belongs to and this one's keys.
    with pytest.raises(AttnmtError, match=r"override 'model.arch=transformer': model.rnn is a key of model.arch "
                                          r"rnn, not of this config's transformer; its keys: .*heads"):
        load_config(path, ["model.arch=transformer"])
    with pytest.raises(AttnmtError, match=r"model.heads is a key of model.arch transformer, not of this config's rnn"):
        load_config(path, ["model.heads=8"])
    with pytest.raises(AttnmtError, match=r"model.arch: 'gpt' is not one of rnn, transformer"):
        load_config(path, ["model.arch=gpt"])
    model = load_config(write(tmp_path, "data: {path: x}\nmodel: {arch: transformer, heads: 8}\n")).model
    assert type(model) is TransformerConfig and model.heads == 8 and model.arch == "transformer"


@pytest.mark.parametrize("old,new", [("huggingface", "length_power"), ("huggingface_early", "length_power_early")])
def test_a_beam_rule_named_after_a_library_reads_as_its_rule(tmp_path, old, new):
    """decode.beam_scoring's values were named after transformers; configs, overrides and model files that
    say so read as the rule's name now, and mean the same search."""
    from attnmt.configfile import saved_config

    path = tmp_path / "c.yaml"
    path.write_text(f"data:\n  format: dates\ndecode:\n  beam_scoring: {old}\n")
    assert load_config(path).decode.beam_scoring == new
    assert load_config(tmp_path / "c.yaml", [f"decode.beam_scoring={old}"]).decode.beam_scoring == new
    saved = config_from_dict({"data": {"format": "dates"}}).to_dict()
    saved["decode"]["beam_scoring"] = old                                  # as a model file of then holds it
    assert saved_config(saved).decode.beam_scoring == new
