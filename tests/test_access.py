"""API keys and rate limits of `attnmt serve`: a real server over loopback, and the key file's checks."""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
from pathlib import Path

import httpx
import pytest
from conftest import server_process
from fastapi.testclient import TestClient
from test_door import assert_refused, run

from attnmt.config import ServeConfig
from attnmt.files import atomic_write
from attnmt.serve import create_app
from attnmt.serve.access import Caller, KeyFile, MovingWindow, RateLimited, RateLimits
from attnmt.translate import Translator

ALICE = "alice-0123456789abcdef"
BOB = "bob-Zyxwvutsrqponm-_~+/=="
CAROL = "carol-0123456789abcdef"  # as long as ALICE: rewriting one with the other keeps the file's size
DATE = "3. Oktober 1990"


def key_file(path: Path, *lines: str) -> Path:
    """A key file written whole: a server looking at it sees the old file or the new one."""
    atomic_write(path, "".join(line + "\n" for line in lines).encode())
    return path


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def wait_until(condition, what: str, seconds: float = 60) -> None:
    """Wait for `condition`; the deadline only turns a hang into a failure."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_translating_needs_a_key_and_the_rest_stays_open(dates_model, tmp_path):
    from libretranslatepy import LibreTranslateAPI

    keys = key_file(tmp_path / "keys", "# the team", f"{ALICE}\talice", "", f"  {BOB}  ")
    with server_process(dates_model, "--api-keys", str(keys)) as (url, process), httpx.Client(base_url=url) as http:
        missing = http.post("/translate", json={"text": DATE})
        assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
        assert missing.json() == {"error": "this server needs an API key: send it as Authorization: Bearer KEY"}
        assert http.post("/translate", json={"text": DATE}, headers={"Authorization": f"Basic {ALICE}"}).status_code == 401
        wrong = http.post("/translate", json={"text": DATE}, headers=bearer(ALICE + "x"))
        assert wrong.status_code == 403 and wrong.json() == {"error": "this API key is not valid here"}
        expected = http.post("/translate", json={"text": DATE}, headers=bearer(ALICE))
        assert expected.status_code == 200, expected.text
        translation = expected.json()["results"][0]["translation"]
        assert http.post("/translate", json={"text": DATE}, headers=bearer(BOB)).status_code == 200
        assert http.post("/explain", json={"text": DATE}).status_code == 401
        assert http.post("/explain", json={"text": DATE}, headers=bearer(BOB)).status_code == 200

        # LibreTranslate's clients send the key as api_key, in JSON or a form, at either place.
        for path in "/translate", "/libretranslate/translate":
            fields = {"q": DATE, "source": "de", "target": "en"}
            refused = http.post(path, json=fields)
            assert refused.status_code == 401 and "or the api_key field" in refused.json()["error"]
            assert http.post(path, json={**fields, "api_key": ""}).status_code == 401
            assert http.post(path, json={**fields, "api_key": BOB[:-1]}).status_code == 403
            assert http.post(path, json={**fields, "api_key": 7}).status_code == 403
            assert http.post(path, json=fields, headers=bearer(ALICE)).json() == {"translatedText": translation}
            assert http.post(path, json={**fields, "api_key": ALICE}).json() == {"translatedText": translation}
            assert http.post(path, data={**fields, "api_key": BOB}).json() == {"translatedText": translation}
        assert LibreTranslateAPI(url, api_key=ALICE).translate(DATE, "de", "en") == translation
        with pytest.raises(urllib.error.HTTPError) as refused_client:
            LibreTranslateAPI(url, api_key=BOB + "x").translate(DATE, "de", "en")
        assert refused_client.value.code == 403
        assert json.loads(refused_client.value.read()) == {"error": "this API key is not valid here"}

        for path in "/health", "/model", "/languages", "/libretranslate/languages", "/", "/static/explorer.js":
            assert http.get(path).status_code == 200, path
        # A method the endpoint lacks is answered as without keys (schemathesis's unsupported_method found a 401).
        assert http.get("/translate").status_code == 405 and http.get("/translate").headers["allow"] == "POST"
    log, errors = process.stdout.read(), process.stderr.read()
    assert f"API keys read from {keys}: 2; translating needs one" in log and errors == ""  # 127.0.0.1: no warning
    assert ALICE not in log + errors and BOB not in log + errors


def test_the_key_file_is_read_again_when_it_changes_at_most_once_a_second(tmp_path):
    clock, log = Clock(), []
    path = key_file(tmp_path / "keys", ALICE)
    keys = KeyFile(str(path), log.append, clock)
    key_file(path, BOB)
    clock.now += 0.5
    assert keys.identify(ALICE) is not None and keys.identify(BOB) is None  # not looked at again yet
    clock.now += 0.5  # a second after the last look: the file has changed, and is read again
    assert keys.identify(ALICE) is None and keys.identify(BOB) is not None

    key_file(path, BOB, "too-short")  # a bad file now: the keys loaded before stay
    clock.now += 1
    assert keys.identify(BOB) is not None

    key_file(path, ALICE)
    clock.now += 1
    assert keys.identify(ALICE) is not None
    # The same size, time and inode: only reload() (SIGHUP) reads the file again.
    same_stamp(path, CAROL)
    clock.now += 1
    assert keys.identify(CAROL) is None and keys.identify(ALICE) is not None
    keys.reload()
    assert keys.identify(CAROL) is not None and keys.identify(ALICE) is None
    assert log == [f"attnmt serve: API keys read from {path}: 1",
                   f"attnmt serve: keys not reloaded, the 1 loaded before stay: {path} line 2: the key has 9 characters; "
                   f"use 16 or more (python -c 'import secrets; print(secrets.token_urlsafe())' makes one)"] + \
        [f"attnmt serve: API keys read from {path}: 1"] * 2


def same_stamp(path: Path, key: str) -> None:
    """Overwrite the file's one key in place with one as long, keeping its time: it looks unchanged."""
    before = path.stat()
    with open(path, "r+", encoding="utf-8") as handle:
        handle.write(key + "\n")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size


def test_a_running_server_reads_the_changed_key_file_and_again_on_sighup(dates_model, tmp_path):
    keys = key_file(tmp_path / "keys", BOB)
    # Without the access log: the server's own lines about the keys are the whole log.
    with server_process(dates_model, "--api-keys", str(keys), "--no-access-log") as (url, process), \
            httpx.Client(base_url=url) as http:
        def status(key: str) -> int:
            return http.post("/translate", json={"text": DATE}, headers=bearer(key)).status_code

        assert (status(BOB), status(ALICE)) == (200, 403)
        key_file(keys, ALICE)  # the file changes: seen within about a second, without a restart
        wait_until(lambda: status(ALICE) == 200, "the new key")
        assert status(BOB) == 403
        same_stamp(keys, CAROL)  # looks unchanged: only SIGHUP tells the server to read it again
        process.send_signal(signal.SIGHUP)
        wait_until(lambda: status(CAROL) == 200, "the key read on SIGHUP")
        assert status(ALICE) == 403
    log = process.stdout.read().splitlines()
    assert log == [f"attnmt serve: API keys read from {keys}: 1; translating needs one"] + \
        [f"attnmt serve: API keys read from {keys}: 1"] * 2 + ["attnmt serve: stopped (SIGTERM)"]
    assert process.stderr.read() == ""


@pytest.mark.parametrize("content, line, fragment", [
    (f"{ALICE}\n\n{ALICE[:10]}\n".encode(), 3, "the key has 10 characters; use 16 or more"),
    (f"# keys\n{ALICE} {BOB}\n".encode(), 2, "a key is one word"),
    (f"{ALICE}\talice\n{BOB}\tbob\n{ALICE}\tagain\n".encode(), 3, "the same key as line 1"),
    (f"{ALICE}\talice\tsmith\n".encode(), 1, "without tabs"),
    (f"{ALICE}\n{BOB}\xe9\n".encode("latin-1"), 2, "not UTF-8 text"),
    (b"# nobody yet\n\n", None, "no keys in the file"),
])
def test_a_bad_key_file_stops_the_server_in_one_line(tmp_path, capsys, content, line, fragment):
    keys = tmp_path / "keys"
    keys.write_bytes(content)
    # The key file is read before the model (which does not exist here) is loaded.
    code, err = run(capsys, ["serve", str(tmp_path / "no-model.safetensors"), "--api-keys", str(keys)])
    assert_refused(code, err, str(keys), fragment, *([f"line {line}"] if line else []))
    assert ALICE not in err and BOB not in err


def test_a_bad_key_file_stops_a_real_server_in_one_line(dates_model, tmp_path):
    keys = key_file(tmp_path / "keys", ALICE, "", f"{BOB}\tbob\tsmith")
    result = subprocess.run([sys.executable, "-m", "attnmt", "serve", str(dates_model), "--port", "0", "--api-keys",
                             str(keys)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [f"attnmt: error: {keys} line 3: the name after the tab must be printable "
                                          f"text without tabs"]


def test_rate_limits_count_each_request_until_it_leaves_the_window():
    # 3 requests and 5 sentences per 3 s for each caller, on a clock the test moves.
    clock = Clock()
    rates = RateLimits(ServeConfig(requests_per_minute=60, sentences_per_minute=100, rate_window_s=3), clock)
    one, other = Caller("address 127.0.0.1", "127.0.0.1"), Caller("address 203.0.113.7", "203.0.113.7")

    def refused(take, *args) -> RateLimited:
        with pytest.raises(RateLimited) as refusal:
            take(*args)
        return refusal.value

    rates.sentences_of(one, 4)  # at 0 s
    clock.now += 1
    over = refused(rates.sentences_of, one, 2)  # 2 sentences when 1 is left: refused whole, and counts none
    assert str(over) == "over the limit of 5 sentences per 3 s for 127.0.0.1; retry in 2 s" and over.retry_after == 2
    rates.sentences_of(one, 1)
    for _ in range(3):  # at 1 s
        rates.request(one)
    assert refused(rates.request, one).retry_after == 3
    rates.request(other)  # each caller has a count of its own
    clock.now += 1.5
    assert refused(rates.request, one).retry_after == 2  # 1.5 s until the requests of 1 s leave: rounded up
    clock.now += 0.5  # 3 s: the 4 sentences of 0 s have left the window, the one of 1 s has not
    rates.sentences_of(one, 4)
    assert refused(rates.sentences_of, one, 1).retry_after == 1
    clock.now += 0.75
    assert refused(rates.request, one).retry_after == 1  # 0.25 s: never 0
    clock.now += 0.25  # 4 s: the 3 requests of 1 s leave together
    for _ in range(3):
        rates.request(one)
    assert "over the limit of 3 requests per 3 s" in str(refused(rates.request, one))


def test_the_moving_window_forgets_callers_gone_quiet():
    clock = Clock()
    window = MovingWindow(2, 10, clock)
    assert window.take("quiet", 1) is None and window.take("busy", 2) is None
    clock.now += 9
    assert window.take("busy", 1) == 1  # the 2 taken at 0 s leave in 1 s
    clock.now += 1
    assert window.take("busy", 1) is None
    assert set(window.taken) == {"busy"}  # a window after its last request, a caller holds no memory
    with pytest.raises(ValueError, match="3 units can never fit in a window of 2"):
        window.take("busy", 3)


def test_rate_limits_refuse_with_retry_after_on_a_real_server(dates_model):
    # 3 requests and 5 sentences per 60 s for each client address; a request holds at most 4 sentences.
    flags = ["--requests-per-minute", "3", "--sentences-per-minute", "5", "--max-sentences", "4"]
    with server_process(dates_model, *flags) as (url, process), httpx.Client(base_url=url) as http:
        def post(texts: int, **headers: str) -> httpx.Response:
            return http.post("/translate", json={"texts": [DATE] * texts}, headers=headers)

        assert post(4).status_code == 200
        over = post(2)  # 2 sentences when 1 is left: refused whole, and counts none
        retry_after = int(over.headers["retry-after"])
        assert over.status_code == 429 and 1 <= retry_after <= 60
        assert over.json() == {"error": f"over the limit of 5 sentences per 60 s for 127.0.0.1; retry in {retry_after} s"}
        assert post(1).status_code == 200
        many = post(1)  # the fourth request in the window
        assert many.status_code == 429 and "over the limit of 3 requests per 60 s" in many.json()["error"]
        # The LibreTranslate API is counted with the rest, and refused in its own form.
        refused = http.post("/libretranslate/translate", json={"q": DATE, "source": "de", "target": "en"})
        assert refused.status_code == 429 and list(refused.json()) == ["error"] and "retry-after" in refused.headers
        # A reverse proxy on this machine names the client (uvicorn trusts X-Forwarded-For from 127.0.0.1).
        assert post(1, **{"X-Forwarded-For": "203.0.113.7"}).status_code == 200
        assert http.get("/health").status_code == 200  # not counted
    assert process.stderr.read() == ""


def test_rates_are_counted_per_key(translator_for_access, tmp_path):
    keys = KeyFile(str(key_file(tmp_path / "keys", f"{ALICE}\talice", BOB)), log=lambda _: None)
    limits = ServeConfig(requests_per_minute=2)
    with TestClient(create_app(translator_for_access, limits, keys)) as client:
        for _ in range(2):
            assert client.post("/translate", json={"text": DATE}, headers=bearer(ALICE)).status_code == 200
        over = client.post("/translate", json={"text": DATE}, headers=bearer(ALICE))
        assert over.status_code == 429 and "over the limit of 2 requests per 60 s for alice" in over.json()["error"]
        assert client.post("/translate", json={"text": DATE}, headers=bearer(BOB)).status_code == 200


@pytest.fixture
def translator_for_access(dates_model: Path) -> Translator:
    return Translator.load(dates_model, device="cpu")


def test_a_server_on_every_address_without_keys_warns_in_one_line(dates_model):
    with server_process(dates_model, "--host", "0.0.0.0") as (url, process):
        assert url.startswith("http://0.0.0.0:")
        assert httpx.get(url.replace("0.0.0.0", "127.0.0.1") + "health").status_code == 200
    assert process.stderr.read().splitlines() == ["attnmt: warning: listening on 0.0.0.0 without --api-keys: the "
                                                  "server is open to anyone who can reach it"]


@pytest.mark.parametrize("limits, fragment", [
    ({"requests_per_minute": 100, "rate_window_s": 7}, "serve requests_per_minute: 100 per minute is 11.6667 per "
                                                       "rate_window_s of 7 s"),
    ({"sentences_per_minute": 10}, "serve sentences_per_minute: 10 allows 10 sentences per 60 s, fewer than a request "
                                   "may hold (max_sentences 32)"),
])
def test_rate_settings_that_cannot_work_are_refused(capsys, limits, fragment):
    flags = [x for name, value in limits.items() for x in (f"--{name.replace('_', '-')}", str(value))]
    code, err = run(capsys, ["serve", "no-model.safetensors", *flags])
    assert_refused(code, err, fragment)
