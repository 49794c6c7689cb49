"""The LibreTranslate API of `attnmt serve`: its real client against a real server, and the API's details."""

import dataclasses
import json
import urllib.error
from pathlib import Path
from typing import Iterator

import httpx
import pytest
from conftest import serving
from fastapi.testclient import TestClient

from attnmt.config import ServeConfig
from attnmt.corpus.detect import detect
from attnmt.modelfile import read_model, save_model
from attnmt.serve import create_app
from attnmt.serve.access import KeyFile
from attnmt.translate import Translator

DATES = ["3. Oktober 1990", "March 14, 2026", "the 21st of June 1975"]


@pytest.fixture(scope="module")
def translator(dates_model: Path) -> Translator:
    return Translator.load(dates_model, device="cpu")


@pytest.fixture
def client(translator: Translator) -> Iterator[TestClient]:
    with TestClient(create_app(translator, ServeConfig(max_sentences=4, max_beam=4))) as test_client:
        yield test_client


def test_the_libretranslate_client_against_attnmt_serve(dates_model, translator):
    from libretranslatepy import LibreTranslateAPI

    expected = [t.text for t in translator.translate(DATES)]
    with serving(dates_model) as url:
        for base in (url, url + "libretranslate/"):
            client = LibreTranslateAPI(base)
            assert client.translate(DATES[0], "de", "en") == expected[0]
            assert client.translate(DATES[0], "auto", "en") == expected[0]
            # A text of several lines: each line is a sentence, the lines stay lines.
            assert client.translate("\n".join(DATES), "de", "en") == "\n".join(expected)
            assert client.languages() == [{"code": "de", "name": "German", "targets": ["en"]},
                                          {"code": "en", "name": "English", "targets": []}]
            # The client's error for a pair the server does not translate: HTTPError 400 with {"error"}.
            with pytest.raises(urllib.error.HTTPError) as refused:
                client.translate(DATES[0], "fr", "en")
            assert refused.value.code == 400
            assert json.loads(refused.value.read()) == {"error": "fr is not supported: this server translates de to en"}


def test_a_list_of_texts_and_alternatives_as_json(client, translator):
    answer = client.post("/translate", json={"q": DATES, "source": "de", "target": "en"})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"translatedText": [t.text for t in translator.translate(DATES)]}
    nbest = translator.translate_nbest(DATES[:2], 3, 3)
    answer = client.post("/libretranslate/translate", json={"q": DATES[:2], "source": "de", "target": "en",
                                                            "format": "text", "alternatives": 2})
    assert answer.json() == {"translatedText": [n[0].text for n in nbest],
                             "alternatives": [[n[1].text, n[2].text] for n in nbest]}
    form = client.post("/translate", data={"q": DATES[0], "source": "de", "target": "en", "alternatives": "1"})
    assert form.json() == {"translatedText": nbest[0][0].text, "alternatives": [translator.translate_nbest(
        DATES[:1], 2, 2)[0][1].text]}


@pytest.mark.parametrize("fields, status, error", [
    ({"source": "de", "target": "en"}, 400, "Invalid request: missing q parameter"),
    ({"q": "1 May 2000", "source": "de"}, 400, "Invalid request: missing target parameter"),
    ({"q": "1 May 2000", "source": "de", "target": "fr"}, 400, "fr is not supported"),
    ({"q": "<p>1 May 2000</p>", "source": "de", "target": "en", "format": "html"}, 400, "format html is not supported"),
    ({"q": [], "source": "de", "target": "en"}, 400, "q must be a text or a non-empty list"),
    ({"q": "1 May 2000", "source": "de", "target": "en", "alternatives": "two"}, 400, "alternatives must be"),
    ({"q": "1 May 2000", "source": "de", "target": "en", "alternatives": True}, 400, "not True"),
    ({"q": "1 May 2000", "source": "de", "target": "en", "alternatives": 1.5}, 400, "not 1.5"),
    ({"q": "1 May 2000", "source": "de", "target": "en", "api_key": 7}, 400, "api_key must be a text"),
    ({"q": ["1 May 2000"] * 5, "source": "de", "target": "en"}, 413, "5 sentences in one request; the limit is 4"),
    ({"q": "1 May 2000", "source": "de", "target": "en", "alternatives": 4}, 422, "beam: 5 is over"),
])
def test_errors_are_libretranslate_errors(client, fields, status, error):
    answer = client.post("/libretranslate/translate", json=fields)
    assert answer.status_code == status and list(answer.json()) == ["error"]
    assert error in answer.json()["error"]


@pytest.mark.parametrize("request_body", [
    {"data": {"source": "de", "target": "en"}},     # a form: attnmt's API takes JSON only
    {"json": {"source": "de", "target": "en"}},
    {"json": {"format": "text"}},
    {"json": {"api_key": "k", "text": DATES[0]}},
])
def test_a_libretranslate_request_without_q_at_the_root_gets_libretranslates_answer(client, request_body):
    answer = client.post("/translate", **request_body)
    assert (answer.status_code, answer.json()) == (400, {"error": "Invalid request: missing q parameter"})


def test_attnmt_requests_at_the_root_stay_attnmt_requests(client, translator):
    assert client.post("/translate", json={"text": DATES[0]}).json()["results"][0]["translation"] \
        == translator.translate(DATES[:1])[0].text
    assert client.post("/translate", data={"text": DATES[0]}).status_code == 415  # attnmt's field, as a form
    spec = client.get("/openapi.json").json()
    assert {"/libretranslate/translate", "/libretranslate/languages", "/languages", "/detect", "/libretranslate/detect",
            "/frontend/settings", "/libretranslate/frontend/settings"} <= set(spec["paths"])


@pytest.fixture(scope="module")
def two_source_model(dates_model: Path, tmp_path_factory) -> Path:
    """The dates model, declaring what it reads as the demo does: English and German, into ISO dates."""
    description, weights, _ = read_model(dates_model)
    data = dataclasses.replace(description.config.data, source_languages="en de", tgt_lang="iso")
    description = dataclasses.replace(description, config=dataclasses.replace(description.config, data=data))
    path = tmp_path_factory.mktemp("two_sources") / "model.safetensors"
    save_model(path, description, weights)
    return path


def test_the_client_detects_and_reads_settings_against_attnmt_serve(dates_model, translator):
    from libretranslatepy import LibreTranslateAPI

    expected = translator.translate(DATES[:1])[0].text
    with serving(dates_model) as url:
        for base in (url, url + "libretranslate/"):
            # One source language: detection is that one, sure.
            assert LibreTranslateAPI(base).detect(DATES[1]) == [{"language": "de", "confidence": 100.0}]
            # A client that reads the front end's settings first, as LibreTranslate's page does.
            settings = httpx.get(base + "frontend/settings", timeout=10)
            assert settings.status_code == 200
            assert settings.json() == {"charLimit": 1000, "frontendTimeout": 500, "apiKeys": False, "keyRequired": False,
                                       "suggestions": False, "filesTranslation": False, "supportedFilesFormat": [],
                                       "language": {"source": {"code": "de", "name": "German"},
                                                    "target": {"code": "en", "name": "English"}}}
            auto = httpx.post(base + "translate", data={"q": DATES[0], "source": "auto", "target": "en"}, timeout=30)
            assert auto.json() == {"translatedText": expected, "detectedLanguage": {"language": "de", "confidence": 100.0}}
            named = httpx.post(base + "translate", json={"q": [DATES[0]], "source": "de", "target": "en"}, timeout=30)
            assert named.json() == {"translatedText": [expected]}  # no detection when the source is named
            # What the settings say is off is refused as LibreTranslate refuses it (libretranslatepy has
            # no call for either: sent as LibreTranslate's page sends them).
            suggestion = httpx.post(base + "suggest", data={"q": DATES[0], "s": expected, "source": "de",
                                                            "target": "en"}, timeout=10)
            assert suggestion.status_code == 403
            assert suggestion.json() == {"error": "Suggestions are disabled on this server."}
            file = httpx.post(base + "translate_file", data={"source": "de", "target": "en"},
                              files={"file": ("dates.txt", DATES[0].encode())}, timeout=10)
            assert file.status_code == 403 and file.json() == {"error": "Files translation are disabled on this server."}


def test_a_model_of_two_source_languages_takes_both_and_detects_between_them(two_source_model, translator):
    from libretranslatepy import LibreTranslateAPI

    expected = [t.text for t in translator.translate(DATES)]
    with serving(two_source_model) as url:
        client = LibreTranslateAPI(url)
        assert client.translate(DATES[1], "en", "iso") == expected[1]
        assert client.translate(DATES[0], "de", "iso") == expected[0]
        assert client.languages() == [{"code": "en", "name": "English", "targets": ["iso"]},
                                      {"code": "de", "name": "German", "targets": ["iso"]},
                                      {"code": "iso", "name": "ISO 8601 date", "targets": []}]
        assert client.detect("the 21st of June 1975")[0] == {"language": "en", "confidence": 100.0}
        assert client.detect("Montag, 1. Januar 2024")[0] == {"language": "de", "confidence": 100.0}
        # No evidence either way: equal shares, the first declared language first.
        assert client.detect("12/25/2031") == [{"language": "en", "confidence": 50.0},
                                               {"language": "de", "confidence": 50.0}]
        auto = httpx.post(url + "libretranslate/translate", json={"q": DATES, "source": "auto", "target": "iso"},
                          timeout=30).json()
        assert auto == {"translatedText": expected, "detectedLanguage": [
            {"language": "de", "confidence": 100.0}, {"language": "en", "confidence": 100.0},
            {"language": "en", "confidence": 100.0}]}
        with pytest.raises(urllib.error.HTTPError) as refused:
            client.translate(DATES[0], "fr", "iso")
        assert json.loads(refused.value.read()) == {"error": "fr is not supported: this server translates en, de to iso"}
        model = httpx.get(url + "model", timeout=10).json()
        assert model["source_languages"] == ["en", "de"] and model["tgt_lang"] == "iso"
        assert httpx.get(url + "frontend/settings", timeout=10).json()["language"] == {
            "source": {"code": "en", "name": "English"}, "target": {"code": "iso", "name": "ISO 8601 date"}}


@pytest.mark.parametrize("text, languages, expected", [
    ("anything", ["fr"], [("fr", 100.0)]),
    ("Der Mann und die Frau", ["en", "de"], [("de", 100.0), ("en", 0.0)]),
    ("Straße", ["en", "de"], [("de", 100.0), ("en", 0.0)]),                 # a letter only German has
    ("the man and der Mann", ["en", "de"], [("en", 66.7), ("de", 33.3)]),  # the, and; der
    ("Привет, мир", ["en", "ru"], [("ru", 100.0), ("en", 0.0)]),
    ("1990", ["de", "en", "xx"], [("de", 33.3), ("en", 33.3), ("xx", 33.3)]),
])
def test_detection_picks_among_the_declared_languages(text, languages, expected):
    assert [(d.language, d.confidence) for d in detect(text, languages)] == expected


@pytest.mark.parametrize("fields, error", [
    ({}, "Invalid request: missing q parameter"),
    ({"q": ["a", "b"]}, "Invalid request: q must be a text"),
    ({"q": 7}, "Invalid request: q must be a text"),
    ({"q": "1 May 2000", "api_key": 7}, "Invalid request: api_key must be a text"),
])
def test_detect_errors_are_libretranslate_errors(client, fields, error):
    for path in "/detect", "/libretranslate/detect":
        answer = client.post(path, json=fields)
        assert answer.status_code == 400 and answer.json() == {"error": error}


def test_frontend_settings_tell_the_limits_and_keys(translator, tmp_path):
    (tmp_path / "keys").write_text("a-key-of-sixteen-characters\n", encoding="utf-8")
    with TestClient(create_app(translator, ServeConfig(max_chars=77), KeyFile(str(tmp_path / "keys"), lambda _: None))) as keyed:
        settings = keyed.get("/libretranslate/frontend/settings").json()
        assert settings["charLimit"] == 77 and settings["apiKeys"] and settings["keyRequired"]
        assert keyed.post("/detect", data={"q": DATES[0]}).json() == [{"language": "de", "confidence": 100.0}]


def test_suggestions_and_files_are_refused_as_libretranslate_refuses_them_when_off(translator, tmp_path):
    """LibreTranslate answers 403 and one line to /suggest and /translate_file when they are turned off;
    this server never takes them (/frontend/settings says so): 403 to every body, with keys or without."""
    suggestions = {"error": "Suggestions are disabled on this server."}
    files = {"error": "Files translation are disabled on this server."}
    (tmp_path / "keys").write_text("a-key-of-sixteen-characters\n", encoding="utf-8")
    for keys in None, KeyFile(str(tmp_path / "keys"), lambda _: None):
        with TestClient(create_app(translator, ServeConfig(), keys)) as client:
            for base in "/", "/libretranslate/":
                fields = {"q": DATES[0], "s": "1990-10-03", "source": "de", "target": "en"}
                for sent in (client.post(base + "suggest", data=fields), client.post(base + "suggest", json=fields),
                             client.post(base + "suggest", json={"q": 7}), client.post(base + "suggest")):
                    assert sent.status_code == 403 and sent.json() == suggestions
                for sent in (client.post(base + "translate_file", data={"source": "de", "target": "en"},
                                         files={"file": ("dates.txt", DATES[0].encode())}),
                             client.post(base + "translate_file", data={"api_key": "not-a-key-of-this-server"}),
                             client.post(base + "translate_file")):
                    assert sent.status_code == 403 and sent.json() == files
                for path in "suggest", "translate_file":
                    other = client.get(base + path)
                    assert other.status_code == 405 and other.headers["allow"] == "POST"
            # The description promises the refusal and the body's limits, never a 200.
            spec = client.get("/openapi.json").json()
            for path in "/suggest", "/translate_file", "/libretranslate/suggest", "/libretranslate/translate_file":
                responses = spec["paths"][path]["post"]["responses"]
                assert set(responses) == {"403", "400", "408", "411", "413"}, path
                assert responses["403"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorResponse")


def test_each_body_is_parsed_once_by_the_routing_the_key_check_and_the_route(translator, tmp_path, monkeypatch):
    """POST /translate serves both APIs: what tells them apart, the api_key field and the route that
    answers all read one parse of the body (JSON or a form), whichever API it is for."""
    import attnmt.serve.middleware

    parsed: list = []
    loads, parse_qs = json.loads, attnmt.serve.middleware.parse_qs
    monkeypatch.setattr(json, "loads", lambda text, *args, **kwargs: parsed.append(text) or loads(text, *args, **kwargs))
    monkeypatch.setattr(attnmt.serve.middleware, "parse_qs", lambda text, **kwargs: parsed.append(text) or parse_qs(
        text, **kwargs))
    key = "a-key-of-sixteen-characters"
    (tmp_path / "keys").write_text(key + "\n", encoding="utf-8")
    json_type = {"Content-Type": "application/json"}
    with TestClient(create_app(translator, ServeConfig(), KeyFile(str(tmp_path / "keys"), lambda _: None))) as keyed:
        bearer = {"Authorization": f"Bearer {key}", **json_type}
        for body, headers, status in [
                (json.dumps({"q": DATES[0], "source": "de", "target": "en", "api_key": key}), json_type, 200),
                (f"q={DATES[0]}&source=de&target=en&api_key={key}",
                 {"Content-Type": "application/x-www-form-urlencoded"}, 200),
                (json.dumps({"text": DATES[0]}), bearer, 200),
                ('{"text": ', bearer, 400)]:
            parsed.clear()
            answer = keyed.post("/translate", content=body.encode(), headers=headers)
            assert answer.status_code == status, answer.text
            assert [text for text in parsed if text in (body, body.encode())] == [body.encode() if "{" in body else body]


def serving_md_libretranslate_examples() -> list[dict]:
    """The LibreTranslate requests docs/serving.md shows (its curl lines with `q`), as TestClient arguments."""
    import re
    import shlex

    text = (Path(__file__).resolve().parents[1] / "docs" / "serving.md").read_text(encoding="utf-8")
    examples = []
    for command in re.findall(r"^curl -s localhost:8000/translate .*?(?<!\\)$", text, re.M | re.S):
        words = shlex.split(command.replace("\\\n", " "))
        bodies = [words[i + 1] for i, word in enumerate(words) if word == "-d"]
        if "Content-Type: application/json" in words:
            examples.append({"json": json.loads(bodies[0])})
        else:
            examples.append({"data": dict(body.split("=", 1) for body in bodies)})
    return [example for example in examples if "q" in example.get("json", example.get("data", {}))]


def test_serving_md_libretranslate_examples_are_answered_by_the_demo_server(two_source_model):
    from attnmt.training.demo import demo_config

    demo = demo_config("unused").data
    examples = serving_md_libretranslate_examples()
    assert len(examples) == 3  # a form, JSON, a form with a key
    for example in examples:
        fields = example.get("json", example.get("data"))
        assert fields["source"] in demo.source_languages.split() and fields["target"] == demo.tgt_lang
    with TestClient(create_app(Translator.load(two_source_model, device="cpu"), ServeConfig())) as demo_server:
        for example in examples:
            answer = demo_server.post("/translate", **example)
            assert answer.status_code == 200 and "translatedText" in answer.json(), answer.text
