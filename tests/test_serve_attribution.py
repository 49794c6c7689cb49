"""POST /explain with `attribution`: the document attnmt explain --attribution --json prints, beside
the explanation's own steps; the server's bound on the work one request asks for; one-line
refusals (FastAPI's TestClient, a tiny character model)."""

import dataclasses
import json
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from attnmt.analysis.attribution import AttributedStep, Attribution, attribute
from attnmt.cli import main
from attnmt.config import ServeConfig
from attnmt.serve import create_app
from attnmt.translate import Translator

TEXT = "3. Oktober 1990"
WORDS = TEXT.split()
READER = ["3", ".", "Oktober", "1990"]  # the words attribution shows: punctuation apart
TARGET = "1990-10-03"          # a translation to force: its steps are known without decoding
LIMITS = ServeConfig(max_chars=40, max_tokens=30, max_sentences=4, timeout_s=60)


@pytest.fixture(scope="module")
def translator(dates_model: Path) -> Translator:
    return Translator.load(dates_model, device="cpu")


@pytest.fixture(scope="module")
def client(translator: Translator) -> Iterator[TestClient]:
    with TestClient(create_app(translator, LIMITS)) as test_client:
        yield test_client


def explain(client: TestClient, **fields) -> dict:
    answer = client.post("/explain", json={"text": TEXT, **fields})
    assert answer.status_code == 200, answer.text
    return answer.json()


@pytest.mark.parametrize("fields, flags", [
    ({"attribution": "grad", "step": 2}, ["--attribution", "grad", "--step", "2"]),
    ({"attribution": "ig", "ig_steps": 3, "target": TARGET}, ["--attribution", "ig", "--ig-steps", "3", "--target", TARGET]),
    ({"attribution": "occlusion", "step": 3, "contrast": "5"},
     ["--attribution", "occlusion", "--step", "3", "--contrast", "5"]),
], ids=["grad", "ig", "occlusion"])
def test_explain_answers_what_attnmt_explain_prints(client, dates_model, capsys, fields, flags):
    document = explain(client, **fields)
    # The server's threads: a count changes the numbers at float rounding (auto depends on the load).
    assert main(["explain", str(dates_model), TEXT, *flags, "--json", "--threads", str(torch.get_num_threads())]) == 0
    assert document == json.loads(capsys.readouterr().out)
    assert list(document) == [f.name for f in dataclasses.fields(Attribution)]
    asked = [fields["step"]] if "step" in fields else list(range(1, len(TARGET) + 2))  # each token and the end
    assert [step["step"] for step in document["steps"]] == asked


def test_a_steps_attribution_sits_beside_that_steps_attention(client, translator):
    """The step asked for is the explanation's step of that number: the same token, and the same
    attention summed over each word's pieces; without `attribution`, `step` keeps that step alone."""
    explanation = explain(client)
    pieces, spaced = translator.src_tokenizer.tokenize_words(WORDS)
    # The words attribution shows: "3", ".", "Oktober", "1990" (punctuation apart).
    def reader(piece: str, owner: int) -> int:
        if owner == 0:
            return 1 if piece.strip("\u2581") == "." else 0
        return owner + 1 if owner > 0 else owner

    owners = [reader(piece, owner) for piece, owner in zip(pieces, spaced)]
    for number in 1, 3:
        step = explanation["steps"][number - 1]
        assert explain(client, step=number)["steps"] == [step]
        (attributed,) = explain(client, attribution="grad", step=number)["steps"]
        assert (attributed["step"], attributed["token"]) == (number, step["token"])
        by_word = [sum(w for w, owner in zip(step["weights"], owners) if owner == word) for word in range(len(READER))]
        np.testing.assert_allclose(attributed["attention"], by_word, atol=1e-4)


@pytest.mark.parametrize("method, fields, passes", [
    ("grad", {}, "1 pass"),
    ("ig", {"ig_steps": 3}, "5 passes (ig_steps, the input and the baseline)"),
    ("occlusion", {}, f"{len(READER) + 1} passes (the sentence, and without each word)"),
], ids=["grad", "ig", "occlusion"])
def test_the_work_one_request_asks_for_is_bounded(translator, method, fields, passes):
    steps = len(translator.tgt_tokenizer.tokenize(TARGET)) + 1
    source_tokens = len(translator.src_tokenizer.tokenize_words(WORDS)[0])
    work = steps * int(passes.split()[0]) * source_tokens
    body = {"text": TEXT, "attribution": method, "target": TARGET, **fields}
    with TestClient(create_app(translator, dataclasses.replace(LIMITS, max_attribution_work=work))) as client:
        assert client.post("/explain", json=body).status_code == 200
    with TestClient(create_app(translator, dataclasses.replace(LIMITS, max_attribution_work=work - 1))) as client:
        refused = client.post("/explain", json=body)
        assert refused.status_code == 422 and refused.json() == {"error": (
            f"this attribution runs {steps} steps × {passes} × {source_tokens} source tokens = {work}, over this "
            f"server's limit of {work - 1} (attnmt serve --max-attribution-work): ask for one step, fewer ig_steps or "
            f"a shorter sentence")}
        assert client.post("/explain", json={**body, "step": 2}).status_code == 200   # one step's work is less


def test_ig_steps_are_bounded(translator):
    with TestClient(create_app(translator, dataclasses.replace(LIMITS, max_ig_steps=4))) as client:
        for fields, asked in ({"ig_steps": 5}, 5), ({}, 50):            # the default counts too
            refused = client.post("/explain", json={"text": TEXT, "attribution": "ig", "step": 1, **fields})
            assert refused.status_code == 422 and refused.json() == {
                "error": f"ig_steps: {asked} is over this server's limit of 4 (attnmt serve --max-ig-steps)"}
        assert client.post("/explain", json={"text": TEXT, "attribution": "ig", "step": 1, "ig_steps": 4}).status_code == 200
        assert client.get("/model").json()["limits"]["max_ig_steps"] == 4


# Named as the request's JSON fields, not as attnmt explain's flags (which tests/test_attribution.py checks).
@pytest.mark.parametrize("fields, status, fragment", [
    ({"attribution": "grad", "target": TARGET, "step": 12}, 422, "step 12: this translation has steps 1 to 11"),
    ({"step": 99}, 422, "step 99: this translation has steps 1 to"),
    ({"attribution": "grad", "step": 1, "contrast": "Fahrrad"}, 422,
     "contrast 'Fahrrad': the target vocabulary has no such token (the tokenizer makes it F a h r r a d); give one "
     "token the model can write (POST /explain with step N and no attribution lists the likeliest in `next`)"),
    ({"attribution": "grad", "contrast": "5"}, 422, "contrast needs step"),
    ({"attribution": "grad", "target": TARGET, "step": 1, "contrast": "1"}, 422, "contrast 1: step 1 writes '1' itself"),
    ({"attribution": "grad", "target": "  "}, 422, "target is empty"),
    ({"attribution": "grad", "text": "  "}, 422, "nothing to attribute: the sentence is empty"),
    ({"attribution": "occlusion", "text": "Oktober"}, 422, "a sentence of one word would leave nothing to translate"),
    ({"attribution": "grad", "ig_steps": 5}, 422, 'ig_steps goes with "attribution": "ig"'),
    ({"target": TARGET}, 422, "target, contrast and ig_steps go with attribution"),
    ({"attribution": "grad", "attention": "decoder"}, 422, 'leave out "attention": "decoder"'),
    ({"attribution": "grad", "layer": 2}, 422, "layer 2: this model's cross attention has layers 1 to 1"),
    ({"attribution": "shap"}, 422, "attribution: Input should be 'grad', 'ig' or 'occlusion'"),
    ({"attribution": "ig", "ig_steps": 10001}, 422, "ig_steps: Input should be less than or equal to 10000"),
    ({"attribution": "grad", "step": 0}, 422, "step: Input should be greater than or equal to 1"),
    ({"attribution": "grad", "target": "1" * 41}, 413, "target has 41 characters; the limit is 40"),
])
def test_bad_requests_are_one_line(client, fields, status, fragment):
    refused = client.post("/explain", json={"text": TEXT, **fields})
    assert refused.status_code == status, refused.text
    error = refused.json()["error"]
    assert list(refused.json()) == ["error"] and fragment in error and "\n" not in error, error
    assert "--" not in error and "attnmt explain" not in error, error    # no flag the HTTP user never typed


def test_a_misspelt_field_is_named_with_the_fields_there_are(client):
    refused = client.post("/explain", json={"txt": TEXT, "attribution": "grad"})
    assert refused.status_code == 422 and refused.json() == {"error": (
        "text: Field required; txt: not a field of this request (did you mean text?); it takes text (required), "
        "attention, layer, head, step, attribution, target, contrast, ig_steps, model")}


def test_attribution_makes_its_own_gradients(translator):
    """The server's model thread decodes under torch.inference_mode; attribution runs there too."""
    expected = attribute(translator, TEXT, "grad", step=2)
    with torch.inference_mode():
        assert attribute(translator, TEXT, "grad", step=2) == expected


def test_openapi_describes_the_attribution(client):
    spec = client.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]
    request = schemas["ExplainRequest"]["properties"]
    assert request["attribution"]["anyOf"][0]["enum"] == ["grad", "ig", "occlusion"]
    assert request["ig_steps"]["anyOf"][0] == {"type": "integer", "minimum": 1, "maximum": 10000}
    assert request["step"]["anyOf"][0] == {"type": "integer", "minimum": 1}
    assert {"target", "contrast"} <= set(request)
    assert list(schemas["AttributionResponse"]["properties"]) == [f.name for f in dataclasses.fields(Attribution)]
    assert list(schemas["AttributedStepResult"]["properties"]) == [f.name for f in dataclasses.fields(AttributedStep)]
    responses = spec["paths"]["/explain"]["post"]["responses"]
    answers = responses["200"]["content"]["application/json"]["schema"]["anyOf"]
    assert [a["$ref"].rsplit("/", 1)[1] for a in answers] == ["ExplainResponse", "AttributionResponse"]
    assert "max_attribution_work" in responses["422"]["description"] and "501" in responses
