"""One server for several models: `attnmt serve MODEL [MODEL ...]`, LibreTranslate's API routed by
language pair (directly, through a pivot, or detected), the native API and /model naming the model,
keys and rates across all of them, and a model that fails to load stopping the start in one line.

Three tiny models of the dates task, relabelled as three language pairs: the RNN as de -> en, the
Transformer as en -> fr, and the Transformer again, exported to CTranslate2, as en -> de."""

import json
import subprocess
import sys
import urllib.error
from pathlib import Path
from typing import Iterator

import httpx
import pytest
from conftest import relabelled, serving
from fastapi.testclient import TestClient

from attnmt.cli import main
from attnmt.config import ServeConfig
from attnmt.errors import AttnmtError
from attnmt.serve import create_app
from attnmt.serve.access import KeyFile
from attnmt.serve.models import ModelSet, ServedModel, model_specs
from attnmt.translate import Translator

GERMAN = ["3. Oktober 1990", "Montag, 1. Januar 2024", "Samstag, den 14. März 2026"]
ENGLISH = ["March 14, 2026", "the 21st of June 1975", "July 4, 1776"]


@pytest.fixture(scope="module")
def models(dates_model: Path, transformer_dates_model: Path, tmp_path_factory) -> dict[str, Path]:
    """de_en (RNN), en_fr (Transformer) and en_de (the Transformer exported to CTranslate2), in one folder."""
    folder = tmp_path_factory.mktemp("models")
    paths = {"de_en": relabelled(dates_model, folder / "de_en", "de", "en"),
             "en_fr": relabelled(transformer_dates_model, folder / "en_fr", "en", "fr")}
    try:
        import ctranslate2  # noqa: F401

        from attnmt.formats.ctranslate2 import export_ctranslate2
    except ImportError:
        pytest.skip("the ctranslate2 package (the test extra) is not installed")
    source = relabelled(transformer_dates_model, tmp_path_factory.mktemp("en_de_source") / "model", "en", "de")
    paths["en_de"] = export_ctranslate2(source, folder / "en_de")
    return paths


@pytest.fixture(scope="module")
def translators(models: dict[str, Path]) -> dict[str, object]:
    from attnmt.formats.ctranslate2_engine import CTranslate2Translator

    return {"de_en": Translator.load(models["de_en"], "cpu"), "en_fr": Translator.load(models["en_fr"], "cpu"),
            "en_de": CTranslate2Translator.load(models["en_de"], "cpu", None)}


def texts(translator, sentences: list[str]) -> list[str]:
    return [t.text for t in translator.translate(sentences)]


@pytest.fixture
def model_set(translators) -> ModelSet:
    return ModelSet([ServedModel(name, name, translator) for name, translator in translators.items()], pivot="en")


@pytest.fixture
def client(model_set: ModelSet) -> Iterator[TestClient]:
    with TestClient(create_app(model_set, ServeConfig(max_sentences=4, max_beam=4))) as test_client:
        yield test_client


def test_the_libretranslate_client_reaches_every_pair_of_three_models(models, translators):
    from libretranslatepy import LibreTranslateAPI

    de_en, en_fr, en_de = (translators[name] for name in ("de_en", "en_fr", "en_de"))
    with serving(models["de_en"], str(models["en_fr"]), str(models["en_de"]), "--pivot", "en") as url:
        client = LibreTranslateAPI(url)
        assert client.languages() == [
            {"code": "de", "name": "German", "targets": ["en", "fr"]},
            {"code": "en", "name": "English", "targets": ["de", "fr"]},
            {"code": "fr", "name": "French", "targets": []}]
        for sentence in GERMAN[:2]:
            assert client.translate(sentence, "de", "en") == texts(de_en, [sentence])[0]
        for sentence in ENGLISH[:2]:
            assert client.translate(sentence, "en", "fr") == texts(en_fr, [sentence])[0]
            assert client.translate(sentence, "en", "de") == texts(en_de, [sentence])[0]
        # auto: detected among the languages that reach the target (de and en both reach fr, de through en).
        assert client.translate(ENGLISH[0], "auto", "de") == texts(en_de, ENGLISH[:1])[0]
        assert client.translate(GERMAN[0], "auto", "en") == texts(de_en, GERMAN[:1])[0]
        # The pivot: de -> en by one model, then en -> fr by the other, and the answer says so.
        through = texts(en_fr, texts(de_en, GERMAN[:1]))[0]
        assert client.translate(GERMAN[0], "de", "fr") == through
        answer = httpx.post(url + "translate", json={"q": GERMAN[0], "source": "de", "target": "fr"}).json()
        assert answer == {"translatedText": through, "pivot": "en"}
        # A pair no model serves, even through the pivot: LibreTranslate's 400 naming the pairs there are.
        with pytest.raises(urllib.error.HTTPError) as refused:
            client.translate(ENGLISH[0], "fr", "de")
        assert refused.value.code == 400
        assert json.loads(refused.value.read()) == {"error": "fr is not supported: this server translates de to en; "
                                                             "en to fr; en to de; through en: de to fr"}


def test_auto_detects_each_text_of_a_list_and_routes_it_to_its_model(client, translators):
    mixed = [GERMAN[0], ENGLISH[0], GERMAN[1]]
    answer = client.post("/translate", json={"q": mixed, "source": "auto", "target": "fr"})
    assert answer.status_code == 200, answer.text
    via_english = texts(translators["en_fr"], texts(translators["de_en"], [GERMAN[0], GERMAN[1]]))
    direct = texts(translators["en_fr"], [ENGLISH[0]])
    assert answer.json()["translatedText"] == [via_english[0], direct[0], via_english[1]]
    assert [d["language"] for d in answer.json()["detectedLanguage"]] == ["de", "en", "de"]
    assert answer.json()["pivot"] == "en"
    # A request's sentences are counted once over all the groups it is split into.
    over = client.post("/translate", json={"q": mixed + ENGLISH[:2], "source": "auto", "target": "fr"})
    assert over.status_code == 413 and over.json() == {"error": "5 sentences in one request; the limit is 4"}


@pytest.mark.parametrize("fields, error", [
    ({"source": "en", "target": "it"}, "it is not supported: this server translates de to en; en to fr; en to de; "
                                       "through en: de to fr"),
    ({"source": "it", "target": "en"}, "it is not supported"),
    ({"source": "fr", "target": "en"}, "fr is not supported"),
    ({"source": "en", "target": "en"}, "en to en is not supported"),
    ({"source": "de", "target": "de"}, "de to de is not supported"),
])
def test_a_pair_no_model_serves_is_refused_in_one_line(client, fields, error):
    refused = client.post("/translate", json={"q": "1 May 2000", **fields})
    assert refused.status_code == 400 and list(refused.json()) == ["error"]
    assert refused.json()["error"].startswith(error), refused.json()


def test_without_a_pivot_only_the_models_pairs_are_served(translators):
    models = ModelSet([ServedModel(name, name, t) for name, t in translators.items()])
    with TestClient(create_app(models)) as client:
        assert {language["code"]: language["targets"] for language in client.get("/languages").json()} == {
            "de": ["en"], "en": ["de", "fr"], "fr": []}
        refused = client.post("/translate", json={"q": GERMAN[0], "source": "de", "target": "fr"})
        assert refused.status_code == 400 and refused.json()["error"].startswith("de to fr is not supported")


def test_the_native_api_names_the_model(client, model_set, translators):
    refused = client.post("/translate", json={"text": ENGLISH[0]})
    assert refused.status_code == 422
    assert refused.json() == {"error": "model: this server has 3 models (de_en, en_fr, en_de); name one"}
    unknown = client.post("/translate", json={"text": ENGLISH[0], "model": "fr_en"})
    assert unknown.status_code == 422
    assert unknown.json() == {"error": "model: 'fr_en' is not one of this server's models (de_en, en_fr, en_de)"}
    with pytest.raises(AttnmtError, match=r"^model: 'fr_en' is not one of this server's models \(de_en, en_fr, en_de\)$"):
        model_set.named("fr_en")                                 # the user's mistake, as the package's own error
    for name, sentence in (("de_en", GERMAN[0]), ("en_fr", ENGLISH[0]), ("en_de", ENGLISH[1])):
        answer = client.post("/translate", json={"text": sentence, "model": name})
        assert answer.status_code == 200, answer.text
        assert answer.json()["results"][0]["translation"] == texts(translators[name], [sentence])[0]
    explained = client.post("/explain", json={"text": ENGLISH[0], "model": "en_fr"})
    assert explained.status_code == 200 and explained.json()["score_function"]
    # The CTranslate2 model gives no steps: said of that model, not of the server.
    refused = client.post("/explain", json={"text": ENGLISH[0], "model": "en_de"})
    assert refused.status_code == 501 and refused.json()["error"].startswith("this model decodes with ctranslate2")


def test_the_openapi_description_names_the_models(client):
    spec = client.get("/openapi.json").json()
    names = ["de_en", "en_fr", "en_de"]
    for request in ("TranslateRequest", "ExplainRequest"):
        assert {"type": "string", "enum": names} in spec["components"]["schemas"][request]["properties"]["model"]["anyOf"]
    (name,) = spec["paths"]["/model"]["get"]["parameters"]
    assert {"type": "string", "enum": names} in name["schema"]["anyOf"]
    assert client.get("/openapi.json").json() == spec                   # built once, the same every time


def test_model_and_models_say_what_each_model_is(client):
    listed = client.get("/models").json()
    assert [(m["name"], m["source_languages"], m["tgt_lang"], m["arch"], m["engine"]) for m in listed] == [
        ("de_en", ["de"], "en", "rnn", "attnmt"), ("en_fr", ["en"], "fr", "transformer", "attnmt"),
        ("en_de", ["en"], "de", "transformer", "ctranslate2")]
    assert all(m["models"] == ["de_en", "en_fr", "en_de"] for m in listed)
    assert client.get("/model").json() == listed[0]
    assert client.get("/model", params={"name": "en_de"}).json() == listed[2]
    refused = client.get("/model", params={"name": "xx"})
    assert refused.status_code == 422 and "is not one of this server's models" in refused.json()["error"]
    assert client.get("/health").json()["status"] == "ok"


def test_keys_and_rates_hold_across_the_models(model_set, tmp_path):
    (tmp_path / "keys").write_text("k" * 32 + "\talice\n")
    keys = KeyFile(str(tmp_path / "keys"), log=lambda _: None)
    with TestClient(create_app(model_set, ServeConfig(requests_per_minute=2), keys)) as client:
        for name in ("de_en", "en_fr"):
            assert client.post("/translate", json={"text": ENGLISH[0], "model": name}).status_code == 401
        key = {"Authorization": "Bearer " + "k" * 32}
        assert client.post("/translate", json={"text": GERMAN[0], "model": "de_en"}, headers=key).status_code == 200
        assert client.post("/translate", json={"q": ENGLISH[0], "source": "en", "target": "de"},
                           headers=key).status_code == 200
        # The third request in the minute, to a third model: the caller's rate is the server's, not the model's.
        limited = client.post("/translate", json={"text": ENGLISH[0], "model": "en_fr"}, headers=key)
        assert limited.status_code == 429


def test_model_arguments_folders_and_models_files(models, tmp_path):
    folder = models["de_en"].parent.parent
    assert [(s.name, Path(s.path)) for s in model_specs([str(folder)])] == [
        ("de_en", models["de_en"]), ("en_de", models["en_de"]), ("en_fr", models["en_fr"])]
    named = model_specs([f"dates={models['de_en'].parent}", str(models["en_fr"])])
    # A folder with "=" in its name is a path, and NAME= splits at the first "=".
    equals = tmp_path / "lr=0.1"
    equals.mkdir()
    (equals / "model.safetensors").write_bytes(models["de_en"].read_bytes())
    assert [(s.name, Path(s.path)) for s in model_specs([str(equals), f"x={equals}"])] == [
        ("lr=0.1", equals / "model.safetensors"), ("x", equals / "model.safetensors")]
    with pytest.raises(AttnmtError, match="missing.safetensors: no such model file or folder"):
        model_specs([str(tmp_path / "missing.safetensors")])
    assert [(s.name, Path(s.path)) for s in named] == [("dates", models["de_en"]), ("en_fr", models["en_fr"])]
    listing = tmp_path / "models.yaml"
    listing.write_text(f"models:\n  - {{name: a, path: {models['de_en']}, precision: bf16}}\n"
                       f"  - {{path: {models['en_de']}, engine: ctranslate2}}\n")
    assert [(s.name, s.precision, s.engine) for s in model_specs([str(listing)])] == [
        ("a", "bf16", None), ("en_de", None, "ctranslate2")]
    for text, error in [
        ("models:\n  - {path: x.safetensors}\n", "models entry 1: " + str(tmp_path / "x.safetensors")),
        ("models:\n  - {path: " + str(models["de_en"]) + ", size: 3}\n", "models entry 1: unknown key 'size'"),
        ("models:\n  - {path: " + str(models["de_en"]) + ", precision: fp8}\n", "precision 'fp8' is not one of"),
        ("models: []\n", "expected `models:` with a list of models"),
        ("models: [\n", "cannot read it as YAML"),
    ]:
        listing.write_text(text)
        with pytest.raises(AttnmtError, match="^" + str(listing).replace(".", r"\.")) as refused:
            model_specs([str(listing)])
        assert error in str(refused.value) and "\n" not in str(refused.value)
    with pytest.raises(AttnmtError, match="two models are named 'de_en'"):
        model_specs([str(models["de_en"]), str(models["de_en"])])
    (tmp_path / "empty").mkdir()
    with pytest.raises(AttnmtError, match="no model in this folder"):
        model_specs([str(tmp_path / "empty")])


def test_a_model_that_fails_to_load_stops_the_start_in_one_line(models, tmp_path, capsys):
    broken = tmp_path / "broken.safetensors"
    broken.write_bytes(b"not a model")
    assert main(["serve", str(models["de_en"]), str(broken), "--port", "0"]) == 2
    out, err = capsys.readouterr()
    assert "http://" not in out                                   # no server started with half its models
    assert len(err.strip().splitlines()) == 1 and str(broken) in err and "Traceback" not in err, err
    assert main(["serve", str(models["de_en"]), str(models["en_fr"]), "--max-models", "1", "--port", "0"]) == 2
    assert capsys.readouterr().err.strip() == "attnmt: error: 2 models to serve; the limit is 1 (--max-models)"
    assert main(["serve", str(models["de_en"]), "--pivot", "it", "--port", "0"]) == 2
    assert "--pivot it: no model translates from or into it" in capsys.readouterr().err


def test_the_log_says_what_each_model_costs_as_it_loads(models):
    process = subprocess.Popen([sys.executable, "-m", "attnmt", "serve", str(models["de_en"]), str(models["en_fr"]),
                                "--pivot", "en", "--port", "0", "--no-access-log"], stdout=subprocess.PIPE, text=True)
    try:
        lines = [process.stdout.readline() for _ in range(4)]
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert lines[0].startswith("attnmt serve: de_en: de to en, attnmt fp32, loaded in ") and "MB resident" in lines[0]
    assert lines[1].startswith("attnmt serve: en_fr: en to fr, attnmt fp32, loaded in ")
    assert lines[2] == "attnmt serve: pairs no model translates go through en where two models make the way\n"
    assert lines[3].startswith("attnmt serve: 2 models on http://")
