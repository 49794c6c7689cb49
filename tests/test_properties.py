"""Inputs nobody wrote by hand (hypothesis): any text through the tokenizers, any key=value through
the config loader, truncated and corrupted model files through the loader."""

from pathlib import Path

import pytest
import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnmt import AttnmtError, Translator
from attnmt.config import Config
from attnmt.configfile import load_config
from attnmt.families.rnn.config import RNNConfig
from attnmt.tokenize import SPACE_SYMBOL, WHITE_SPACE, CharTokenizer, WordTokenizer, normalize

# Bounded, so that the suite stays fast; no example database in the repository.
BOUNDED = settings(max_examples=200, deadline=None, database=None,
                   suppress_health_check=[HealthCheck.function_scoped_fixture])
# Any Unicode text, surrogates excluded (they cannot be encoded, so no file or request holds one).
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=80)


@BOUNDED
@given(TEXT, st.booleans())
def test_characters_come_back_as_they_were_normalised(text, lowercase):
    """The documented difference: a "▁" (SPACE_SYMBOL, how the tokens show a space) in the text
    comes back as a space."""
    tokenizer = CharTokenizer(lowercase)
    tokens = tokenizer.tokenize(text)
    assert tokenizer.detokenize(tokens) == tokenizer.prepare(text).replace(SPACE_SYMBOL, " ")


@BOUNDED
@given(TEXT, st.booleans())
def test_words_come_back_with_every_visible_character_and_tokenize_alike(text, lowercase):
    """Word tokens forget the spaces, and detokenizing puts them back by the rules of prose: the
    documented difference is spacing only. Tokenizing the detokenized text gives the same tokens."""
    tokenizer = WordTokenizer(lowercase)
    tokens = tokenizer.tokenize(text)
    assert all(token and not token.isspace() for token in tokens)
    text_back = tokenizer.detokenize(tokens)
    assert text_back.replace(" ", "") == tokenizer.prepare(text).replace(" ", "")
    assert tokenizer.tokenize(text_back) == tokens


def test_every_white_space_character_becomes_a_plain_space():
    assert set(WHITE_SPACE) == {chr(code) for code in range(0x110000) if chr(code).isspace()}


@BOUNDED
@given(TEXT)
def test_normalising_twice_changes_nothing(text):
    assert normalize(normalize(text)) == normalize(text)


# Keys of the config, and some that are not.
KEYS = [f"{section}.{key}" for section, fields in Config(model=RNNConfig()).to_dict().items() for key in fields] + [
    "model.nope", "nope.lr", "train", "train.", ".lr", "train.lr.x"]
YAML_VALUES = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), TEXT,
                        st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))


@BOUNDED
@given(st.lists(st.tuples(st.sampled_from(KEYS), st.one_of(YAML_VALUES.map(yaml.safe_dump), TEXT)), max_size=4))
def test_any_override_gives_a_config_or_one_clear_line(tmp_path_factory, overrides):
    path = tmp_path_factory.mktemp("config") / "config.yaml"
    path.write_text("data: {format: dates}\n", encoding="utf-8")
    items = [f"{key}={value.strip()}" for key, value in overrides]
    try:
        config = load_config(path, items)
    except AttnmtError as err:
        message = str(err)
        assert message and "\n" not in message.strip() and "Traceback" not in message
    else:
        assert isinstance(config, Config)


@BOUNDED
@given(st.dictionaries(st.sampled_from(["data", "model", "train", "decode", "vocab", "tokenizer", "other"]),
                       st.one_of(YAML_VALUES, st.dictionaries(st.sampled_from(KEYS).map(lambda k: k.split(".")[-1]),
                                                              YAML_VALUES, max_size=3)), max_size=3))
def test_any_yaml_file_gives_a_config_or_one_clear_line(tmp_path_factory, values):
    path = tmp_path_factory.mktemp("config") / "config.yaml"
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    try:
        load_config(path)
    except AttnmtError as err:
        assert str(err) and "\n" not in str(err).strip()


DATES = ["1 May 2000", "March 3, 2021"]


@pytest.fixture(scope="module")
def original(dates_model) -> tuple[bytes, Translator]:
    return Path(dates_model).read_bytes(), Translator.load(dates_model, "cpu")


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_truncated_or_corrupted_model_file_is_one_clear_line(original, tmp_path_factory, data):
    """Cut anywhere, or a few bytes flipped anywhere: the loader refuses in one line and leaves the
    file as it was; or, for a flip inside the JSON that leaves it valid, loads the very weights
    written (their checksum holds them), which translate as they did where the description is
    unchanged. The format is safetensors and JSON: no bytes are ever run as code."""
    model_bytes, translator = original
    corrupted = bytearray(model_bytes)
    if data.draw(st.booleans(), label="truncate"):
        corrupted = corrupted[: data.draw(st.integers(0, len(model_bytes) - 1), label="length")]
    else:
        for _ in range(data.draw(st.integers(1, 4), label="flips")):
            position = data.draw(st.integers(0, len(model_bytes) - 1), label="position")
            corrupted[position] ^= data.draw(st.integers(1, 255), label="mask")
    path = tmp_path_factory.mktemp("corrupt") / "model.safetensors"
    path.write_bytes(bytes(corrupted))
    try:
        loaded = Translator.load(path, "cpu")
    except AttnmtError as err:
        assert str(err).startswith(str(path)) and "\n" not in str(err).strip()
    else:
        weights = loaded.model.state_dict()
        assert all(torch.equal(weights[name], w) for name, w in translator.model.state_dict().items())
        if loaded.description.metadata() == translator.description.metadata():
            assert [t.text for t in loaded.translate(DATES)] == [t.text for t in translator.translate(DATES)]
    assert path.read_bytes() == corrupted
