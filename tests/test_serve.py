"""The HTTP server in-process (FastAPI's TestClient): answers, batching, limits, errors, OpenAPI."""

import asyncio
import contextlib
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator
from urllib.parse import urlsplit

import httpx
import numpy as np
import pytest
import uvicorn
from conftest import server_process
from fastapi.testclient import TestClient

from attnmt.config import ServeConfig
from attnmt.search import SearchSettings
from attnmt.serve import create_app, runner
from attnmt.serve.app import STATIC
from attnmt.serve.middleware import BodyLimit
from attnmt.translate import Translation, Translator

DATES = ["March 14, 2026", "3. Oktober 1990", "the 21st of June 1975", "12/25/2031", "Fr., 09.11.1989",
         "1 May 2000", "July 4, 1776", "Montag, 1. Januar 2024"]
LIMITS = ServeConfig(max_chars=40, max_tokens=30, max_sentences=4, max_beam=4, timeout_s=10)


@pytest.fixture
def translator(dates_model: Path) -> Translator:
    return Translator.load(dates_model, device="cpu")


@pytest.fixture
def client(translator: Translator) -> Iterator[TestClient]:
    with TestClient(create_app(translator, LIMITS)) as test_client:
        yield test_client


@contextlib.contextmanager
def held_model(translator: Translator) -> Iterator[tuple[list, threading.Event]]:
    """Record the model calls as (sentences, beam); each call waits until the event is set."""
    calls: list[tuple[int, int]] = []
    release = threading.Event()
    real = translator.stream

    def held(texts: list[str], settings: SearchSettings) -> Iterator[list[list[Translation]]]:
        calls.append((len(texts), settings.beam_size))
        release.wait(20)
        return real(texts, settings)

    translator.stream = held
    try:
        yield calls, release
    finally:
        release.set()
        del translator.stream  # the class's method again


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + 20
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_translate_one_and_several_match_the_translator(client, translator):
    one = client.post("/translate", json={"text": DATES[0]})
    assert one.status_code == 200, one.text
    expected = translator.translate([DATES[0]])[0]
    result = one.json()["results"][0]
    assert result["translation"] == expected.text and result["tokens"] == expected.tokens
    assert result["source_tokens"] == expected.source_tokens
    assert result["score"] == pytest.approx(expected.log_prob, abs=1e-3)
    assert "attention" not in result and "nbest" not in result

    several = client.post("/translate", json={"texts": DATES[:4], "attention": True}).json()
    assert [r["translation"] for r in several["results"]] == [t.text for t in translator.translate(DATES[:4])]
    for r in several["results"]:
        weights = np.array(r["attention"])
        assert weights.shape == (len(r["tokens"]), len(r["source_tokens"]))
        np.testing.assert_allclose(weights.sum(axis=1), 1.0, atol=1e-3)


def test_beam_with_nbest_list(client, translator):
    body = client.post("/translate", json={"text": DATES[1], "beam": 3, "n_best": 3, "attention": True}).json()
    assert (body["beam"], body["n_best"]) == (3, 3)
    result = body["results"][0]
    expected = translator.translate_nbest([DATES[1]], 3, 3)[0]
    assert [h["translation"] for h in result["nbest"]] == [t.text for t in expected]
    assert result["translation"] == result["nbest"][0]["translation"]
    scores = [h["score"] for h in result["nbest"]]
    assert scores == sorted(scores, reverse=True)
    for h in result["nbest"]:
        assert np.array(h["attention"]).shape == (len(h["tokens"]), len(result["source_tokens"]))


def test_weights_and_scores_have_four_decimals_in_the_json(client):
    body = client.post("/translate", json={"texts": DATES[:2], "beam": 2, "n_best": 2, "attention": True,
                                           "maps": True})
    numbers: list[str] = []
    json.loads(body.text, parse_float=lambda text: numbers.append(text))  # each number as the JSON writes it
    assert len(numbers) > 100
    # Weights far below 0.0001 are 0.0 once rounded; a float32 rounding would show as 9.999999747378752e-05.
    assert all(re.fullmatch(r"-?\d+\.\d{1,4}", n) for n in numbers), [n for n in numbers if len(n) > 7][:5]


def test_empty_sentence_gets_an_empty_translation(client):
    result = client.post("/translate", json={"text": ""}).json()["results"][0]
    assert (result["translation"], result["tokens"], result["source_tokens"]) == ("", [], [])


def test_health_and_model(client, translator):
    assert client.get("/health").json() == {"status": "ok", "queued": 0, "model_calls": 0, "sentences": 0}
    info = client.get("/model").json()
    architecture = info["architecture"]
    assert (info["src_lang"], info["tgt_lang"], architecture["attention"], architecture["rnn"]) == ("de", "en", "bahdanau",
                                                                                                    "gru")
    assert architecture["summary"] == "GRU encoder-decoder, bahdanau attention, bahdanau decoder"
    assert not {"rnn", "decoder", "attention"} & info.keys()  # the family's own words live in architecture only
    assert (info["src_vocab_size"], info["tgt_vocab_size"]) == (len(translator.tokenization.src_vocab),
                                                                 len(translator.tokenization.tgt_vocab))
    assert info["limits"]["max_sentences"] == 4 and info["limits"]["max_tokens"] == 30
    assert info["maps"] == {"cross": [1, 1]} and info["engine"] == "attnmt" and info["explains"] is True
    assert info["alignments"] == "argmax"


def test_concurrent_requests_share_one_model_call(client, translator):
    with held_model(translator) as (calls, release), ThreadPoolExecutor(8) as pool:
        first = pool.submit(client.post, "/translate", json={"text": DATES[0]})
        wait_for(lambda: calls, "the first model call")
        # While the model is busy, 4 greedy and 3 beam requests queue up: one call for each kind.
        greedy = [pool.submit(client.post, "/translate", json={"text": t}) for t in DATES[1:5]]
        beam = [pool.submit(client.post, "/translate", json={"text": t, "beam": 2}) for t in DATES[5:8]]
        wait_for(lambda: client.get("/health").json()["queued"] == 7, "7 queued requests")
        release.set()
        responses = [f.result() for f in [first, *greedy, *beam]]
    assert sorted(calls) == sorted([(1, 1), (4, 1), (3, 2)])
    assert all(r.status_code == 200 for r in responses)
    got = [r.json()["results"][0]["translation"] for r in responses]
    assert got[:5] == [t.text for t in translator.translate(DATES[:5])]
    assert got[5:] == [t.text for t in translator.translate(DATES[5:], beam_size=2)]
    assert client.get("/health").json()["model_calls"] == 3


def test_full_queue_answers_503_and_slow_requests_504(translator):
    limits = ServeConfig(queue_size=1, timeout_s=0.5, batch_window_ms=0)
    with TestClient(create_app(translator, limits)) as client, held_model(translator) as (calls, release), \
            ThreadPoolExecutor(2) as pool:
        busy = pool.submit(client.post, "/translate", json={"text": DATES[0]})
        wait_for(lambda: calls, "the first model call")
        waiting = pool.submit(client.post, "/translate", json={"text": DATES[1]})
        wait_for(lambda: client.get("/health").json()["queued"] == 1, "a queued request")
        full = client.post("/translate", json={"text": DATES[2]})
        assert full.status_code == 503 and "busy" in full.json()["error"]
        for response in busy.result(), waiting.result():
            assert response.status_code == 504
            assert response.json() == {"error": "the translation took longer than 0.5 s"}
        release.set()
    assert len(calls) == 1  # the timed-out queued request never reached the model


@pytest.mark.parametrize("body, status, fragment", [
    ({"texts": DATES[:5]}, 413, "5 sentences in one request; the limit is 4"),
    ({"text": "x" * 41}, 413, "41 characters; the limit is 40"),
    ({"texts": ["1. 1. 2000", "1 " * 16]}, 413, "sentence 2 has 31 tokens; the limit is 30"),
    ({"text": "1 May 2000", "beam": 5}, 422, "beam: 5 is over this server's limit of 4"),
    ({"text": "1 May 2000", "beam": 2, "n_best": 3}, 422, "n_best: 3 is more than the beam (2)"),
    ({"text": "1 May 2000", "beam": 0}, 422, "beam: Input should be greater than or equal to 1"),
    ({}, 422, "give exactly one of `text` (a string) or `texts`"),
    ({"text": "a", "texts": ["b"]}, 422, "give exactly one of"),
    ({"texts": []}, 422, "texts: List should have at least 1 item"),
    ({"text": 3}, 422, "text: Input should be a valid string"),
    ({"texts": ["a", None]}, 422, "texts.1: Input should be a valid string"),
    ({"text": "a", "beam": "2"}, 422, "beam: Input should be a valid integer"),
    ({"text": "a", "attention": "yes"}, 422, "attention: Input should be a valid boolean"),
    ({"text": "a", "temperature": 1}, 422, "temperature: not a field of this request; it takes text, texts, beam, "
                                           "n_best, attention, maps, alignments"),
    ({"txt": "a"}, 422, "txt: not a field of this request (did you mean text?); it takes text, texts, beam"),
    (["a"], 422, "the body must be a JSON object"),
])
def test_limits_and_invalid_requests_are_one_line_json_errors(client, body, status, fragment):
    response = client.post("/translate", json=body)
    assert response.status_code == status, response.text
    assert list(response.json()) == ["error"] and fragment in response.json()["error"]


@pytest.mark.parametrize("content, headers, status, fragment", [
    (b'{"text": "1 May', {"content-type": "application/json"}, 400, "malformed JSON"),
    (b"text=1 May 2000", {"content-type": "application/x-www-form-urlencoded"}, 415, "send the body as JSON"),
    (b"x" * (LIMITS.max_body_bytes() + 1), {"content-type": "application/json"}, 413, "the limit is"),
    (iter([b'{"text": "1 May 2000"}']), {"content-type": "application/json"}, 411, "Content-Length"),
])
def test_bodies_that_are_not_requests(client, content, headers, status, fragment):
    response = client.post("/translate", content=content, headers=headers)
    assert response.status_code == status, response.text
    assert fragment in response.json()["error"]


def test_a_body_that_stalls_is_answered_408_and_one_cut_short_reaches_no_handler():
    """BodyLimit on its own (a client that stops sending cannot be played through TestClient)."""
    body = b'{"text": "1 May 2000"}'
    handled: list[bytes] = []

    async def app(_scope, receive, _send) -> None:
        handled.append((await receive())["body"])

    async def exchange(*messages: dict) -> list[dict]:
        """The messages the client sends, then nothing more (the client stalls)."""
        queue = [*messages]
        answer: list[dict] = []

        async def receive() -> dict:
            return queue.pop(0) if queue else await asyncio.Event().wait()

        async def send(message: dict) -> None:
            answer.append(message)

        scope = {"type": "http", "method": "POST", "path": "/translate",
                 "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]}
        await BodyLimit(app, max_bytes=1000, timeout_s=0.2)(scope, receive, send)
        return answer

    half = {"type": "http.request", "body": body[:9], "more_body": True}
    rest = {"type": "http.request", "body": body[9:], "more_body": False}
    assert asyncio.run(exchange(half, rest)) == [] and handled == [body]
    start, answer_body = asyncio.run(exchange(half))
    assert start["status"] == 408 and (b"connection", b"close") in start["headers"]
    assert json.loads(answer_body["body"]) == {"error": "the body did not arrive within 0.2 s"}
    assert asyncio.run(exchange(half, {"type": "http.disconnect"})) == [] and handled == [body]


def test_unknown_paths_and_methods_are_json_errors(client):
    assert client.get("/nowhere").json() == {"error": "Not Found"}
    refused = client.get("/translate")
    assert refused.status_code == 405 and "error" in refused.json() and refused.headers["allow"] == "POST"


def test_openapi_describes_the_endpoints(client):
    spec = client.get("/openapi.json").json()
    assert {"/translate", "/health", "/model", "/models"} <= set(spec["paths"]) and "/" not in spec["paths"]
    schemas = spec["components"]["schemas"]
    assert set(schemas["TranslateRequest"]["properties"]) == {"text", "texts", "beam", "n_best", "attention", "maps",
                                                              "alignments", "split", "model"}
    assert set(schemas["SentenceResult"]["properties"]) == {"translation", "tokens", "score", "confidence", "attention",
                                                            "source_tokens", "nbest", "maps", "alignment"}
    assert set(schemas["WordAlignment"]["properties"]) == {"method", "source_words", "target_words", "links"}
    responses = spec["paths"]["/translate"]["post"]["responses"]
    assert {"200", "400", "413", "422", "501", "503", "504"} <= set(responses)
    assert responses["422"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorResponse")


def test_explorer_page_and_assets_are_served_and_offline(client):
    page = client.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert '/static/explorer.js' in page.text and '/static/explorer.css' in page.text
    assert "javascript" in client.get("/static/explorer.js").headers["content-type"]
    for path in STATIC.iterdir():  # no CDN: nothing the page loads comes from elsewhere
        assert "://" not in path.read_text(encoding="utf-8"), path.name
    assert "innerHTML" not in (STATIC / "explorer.js").read_text(encoding="utf-8")


def test_cli_serve_reports_a_busy_port_in_one_line(dates_model):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "attnmt", "serve", str(dates_model), "--port", str(port)],
                                capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == f"attnmt: error: cannot listen on 127.0.0.1:{port}: Address already in use"


def test_sigterm_answers_the_request_in_flight_then_exits_0(dates_model):
    body = b'{"text": "1 May 2000"}'
    with server_process(dates_model) as (url, process):
        address = (urlsplit(url).hostname, urlsplit(url).port)
        with socket.create_connection(address) as held:
            held.sendall(b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(body), body[:-1]))
            # A connection accepted after this one is read after it: once the server has answered on
            # it, it has read the held request's start, which makes that request one in flight.
            assert httpx.get(url + "health", headers={"Connection": "close"}, timeout=60).status_code == 200
            process.send_signal(signal.SIGTERM)
            wait_for(lambda: refused(address), "the server to stop listening, as it does first when it stops")
            held.sendall(body[-1:])
            assert held.makefile("rb").readline().startswith(b"HTTP/1.1 200")
        assert process.wait(timeout=60) == 0, process.stderr.read()


@pytest.mark.parametrize("sig, status, stderr", [
    (signal.SIGTERM, 0, ""),                                  # `kill`, systemd, docker stop: serving ends
    (signal.SIGINT, 130, "attnmt: interrupted\n"),            # Ctrl-C: the CLI says it was interrupted
], ids=["SIGTERM", "SIGINT"])
def test_an_idle_server_stops_on_a_signal_and_says_so(dates_model, sig, status, stderr):
    """Sent as soon as the server has said where it listens (its handler is set by then): the
    server stops, and its log's last line says so (issue 60)."""
    with server_process(dates_model, "--no-access-log") as (_, process):
        process.send_signal(sig)
        assert process.wait(timeout=60) == status             # the timeout: a safety net, not a measure
    assert process.stdout.read().splitlines() == [f"attnmt serve: stopped ({sig.name})"]
    assert process.stderr.read() == stderr


def test_a_stop_wakes_the_server_where_uvicorn_looked_for_one_every_tenth_of_a_second(monkeypatch):
    """The cause of an idle server's late stop on its side: uvicorn's main loop slept 0.1 s at a
    time between looks at should_exit. attnmt's sleeps until the stop's event wakes it (or the
    Date header's renewal, put off here), and never sleeps on a clock."""
    sleep = asyncio.sleep

    async def no_clock(delay: float, *args):
        assert delay == 0, f"the main loop slept {delay} s on a clock"
        return await sleep(0, *args)

    monkeypatch.setattr(asyncio, "sleep", no_clock)
    monkeypatch.setattr(runner, "DATE_EVERY_S", 3600)          # only the stop can wake it within the test
    server, ticks = runner.Server(uvicorn.Config(app=None)), []
    look = server.on_tick

    async def on_tick(counter: int) -> bool:
        ticks.append(counter)
        return await look(counter)

    server.on_tick = on_tick

    async def stop_it() -> None:
        looping = asyncio.create_task(server.main_loop())
        while not ticks:                                        # until it has looked once, and waits
            await sleep(0)
        server.handle_exit(signal.SIGTERM, None)                # as the signal handler calls it
        await asyncio.wait_for(looping, 60)                     # the timeout: a safety net, not a measure

    asyncio.run(stop_it())
    assert server.should_exit and len(ticks) == 2               # once on starting, once on the stop
    assert [name for name, _ in server.server_state.default_headers] == [b"date"]


def refused(address: tuple) -> bool:
    """Whether a connection to `address` is refused: nothing listens there. A connection reset while
    the listening socket closes under it is a refusal too (bench/load.py's `listening` meets the same race)."""
    try:
        socket.create_connection(address).close()
    except (ConnectionRefusedError, ConnectionResetError):
        return True
    return False


def test_a_model_without_attention_answers_without_weights(no_attention_model: Path):
    with TestClient(create_app(Translator.load(no_attention_model, device="cpu"), LIMITS)) as client:
        info = client.get("/model").json()
        assert info["architecture"]["attention"] == "none" and info["maps"] == {}
        body = client.post("/translate", json={"texts": DATES[:2], "beam": 2, "n_best": 2, "attention": True})
        assert body.status_code == 200, body.text
        for result in body.json()["results"]:
            assert result["translation"] and result.get("attention") is None
            assert all(h.get("attention") is None for h in result["nbest"])


def test_a_text_of_several_lines_is_translated_line_by_line(client, translator):
    lines = ["3. Oktober 1990", "", "March 14, 2026"]
    answer = client.post("/translate", json={"texts": ["\n".join(lines), DATES[3]], "beam": 2, "n_best": 2,
                                             "attention": True})
    assert answer.status_code == 200, answer.text
    joined, single = answer.json()["results"]
    nbests = translator.translate_nbest(lines, 2, 2)
    assert joined["translation"] == "\n".join(nbest[0].text for nbest in nbests)
    # Rank 2 of each line (an empty line has one translation only, and keeps it).
    assert joined["nbest"][1]["translation"] == "\n".join(nbest[min(1, len(nbest) - 1)].text for nbest in nbests)
    assert joined["score"] == pytest.approx(sum(nbest[0].log_prob for nbest in nbests), abs=1e-3)
    first, last = nbests[0][0], nbests[2][0]
    assert joined["tokens"] == first.tokens + ["\n", "\n"] + last.tokens
    assert joined["source_tokens"] == first.source_tokens + ["\n", "\n"] + last.source_tokens
    # Block-diagonal: each line's output attends to its own line only; the newlines' rows are 0.
    attention = np.array(joined["attention"])
    rows, cols = len(first.tokens), len(first.source_tokens)
    np.testing.assert_allclose(attention[:rows, :cols], first.attention, atol=1e-4)
    np.testing.assert_allclose(attention[rows + 2:, cols + 2:], last.attention, atol=1e-4)
    assert attention[:rows, cols:].sum() == 0 and attention[rows + 2:, :cols + 2].sum() == 0
    assert attention[rows: rows + 2].sum() == 0
    assert single["translation"] == translator.translate(DATES[3:4])[0].text
    # Each line counts against the request's sentences, as on LibreTranslate's path (limit 4).
    over = client.post("/translate", json={"text": "\n".join(DATES[:5])})
    assert over.status_code == 413 and over.json() == {"error": "5 sentences in one request; the limit is 4"}
    maps = client.post("/translate", json={"text": "1 May 2000\n2 May 2000", "maps": True})
    assert maps.status_code == 422 and "send its sentences as `texts`" in maps.json()["error"]


@pytest.mark.parametrize("flags", [[], ["--no-access-log"]], ids=["access-log", "no-access-log"])
def test_the_access_log_names_the_client_and_the_status(dates_model, flags):
    with server_process(dates_model, *flags) as (url, process):
        assert httpx.post(url + "translate", json={"text": DATES[0]}, timeout=30).status_code == 200
        assert httpx.post(url + "translate", json={"texts": []}, timeout=30).status_code == 422
        assert httpx.post(url + "translate", data={"q": DATES[0], "source": "de", "target": "en"},
                          timeout=30).status_code == 200
    log = process.stdout.read().splitlines()
    requests = [line for line in log if '"POST /translate HTTP/1.1"' in line]
    assert log[-1] == "attnmt serve: stopped (SIGTERM)"       # server_process stops it with SIGTERM
    if flags:
        assert log == ["attnmt serve: stopped (SIGTERM)"]  # (server_process read the line with the URL)
    else:
        assert len(requests) == 3 and all(re.search(r" 127\.0\.0\.1:\d+ - ", line) for line in requests)
        assert [line.split('"')[-1].split()[0] for line in requests] == ["200", "422", "200"]
    assert process.stderr.read() == ""
