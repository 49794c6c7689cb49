"""The LibreTranslate API of `attnmt serve`: its real client against a real server, and the API's details."""

import json
import urllib.error
from pathlib import Path
from typing import Iterator

import pytest
from conftest import serving
from fastapi.testclient import TestClient

from attnmt.config import ServeConfig
from attnmt.serve import create_app
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


def test_attnmt_requests_at_the_root_stay_attnmt_requests(client, translator):
    assert client.post("/translate", json={"text": DATES[0]}).json()["results"][0]["translation"] \
        == translator.translate(DATES[:1])[0].text
    assert client.post("/translate", data={"text": DATES[0]}).status_code == 415  # a form without q is not LibreTranslate's
    spec = client.get("/openapi.json").json()
    assert {"/libretranslate/translate", "/libretranslate/languages", "/languages"} <= set(spec["paths"])
