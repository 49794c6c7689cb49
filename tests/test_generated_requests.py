"""Requests nobody wrote by hand: schemathesis against `attnmt serve`'s own OpenAPI description, over loopback.

Schemathesis's command runs its coverage phase (the edges of each schema, missing and extra
fields, wrong types, methods an endpoint lacks) and its fuzzing phase (hypothesis: bodies, query
strings and headers that fit the description and that do not) against every endpoint of a real
server on 127.0.0.1. The checks:
- not_a_server_error: no 500, whatever comes in;
- status_code_conformance, content_type_conformance, response_schema_conformance,
  response_headers_conformance: every answer is one the description promises;
- negative_data_rejection: what the description rules out is refused with a 4xx, so the
  description says what the server really takes;
- unsupported_method: a method an endpoint lacks gets 405 with an Allow header;
- missing_required_header: a required header left out is refused.
The server runs once (a slow test: about 35 s), with keys and the right one sent with every request,
so that the generated bodies get past the keys and the rate counting to the handlers; the routes open
without a key (/detect, /languages, ...) are open on it as on a server without keys.
Left out: positive_data_acceptance (a request that fits the description may still be over one of
this server's limits, 413, or ask a layer of an RNN model, 422), ignored_auth (the description
declares no security scheme: a LibreTranslate client's key comes in the body; tests/test_access.py
checks the keys), max_response_time (no timings in tests), and
the checks of resources created and deleted (use_after_free, ensure_resource_availability): the
API has none.
"""

import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from conftest import server_process

CHECKS = ["not_a_server_error", "status_code_conformance", "content_type_conformance", "response_schema_conformance",
          "response_headers_conformance", "negative_data_rejection", "unsupported_method", "missing_required_header"]
# Examples per endpoint and phase: enough to reach odd corners, few enough for a fast suite.
EXAMPLES = 25
# negative_data_rejection's own list of refusals, and 413: a generated body over the server's size
# limit is refused by its length before it is read, rightly (a CI run's random seed found it).
SCHEMATHESIS_CONFIG = """[checks.negative_data_rejection]
expected-statuses = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429", "5xx"]
"""
# A fixed seed: the same generated requests on every run, so that CI passes or fails for the code alone.
SEED = "251271193538900815758476341207641696344"


@pytest.mark.slow  # once, on a server with keys (the open routes are open there too), the key sent
def test_generated_requests_get_answers_the_description_promises(dates_model: Path, tmp_path: Path):
    key = "generated-requests-0123456789"
    (tmp_path / "keys").write_text(key + "\n", encoding="utf-8")
    keys, header = ["--api-keys", str(tmp_path / "keys")], ["--header", f"Authorization: Bearer {key}"]
    # Small limits, so that generated texts run into them and no request keeps the model long; no
    # access log: its line per request would fill the pipe server_process reads only at the end.
    with server_process(dates_model, "--max-sentences", "4", "--max-chars", "60", "--max-beam", "3",
                        "--no-access-log", *keys) \
            as (url, process):
        # In tmp_path: schemathesis reads schemathesis.toml and keeps its cache in the working
        # directory; no example database. One worker: with several threads, hypothesis (describing
        # its filters with ast.parse) hit CPython 3.11's thread-unsafe AST recursion counter, a
        # SystemError "AST constructor recursion depth mismatch" that failed the run whatever the server did.
        (tmp_path / "schemathesis.toml").write_text(SCHEMATHESIS_CONFIG, encoding="utf-8")
        run = subprocess.run([sys.executable, "-m", "schemathesis.cli", "run", url + "openapi.json",
                              "--checks", ",".join(CHECKS), "--phases", "examples,coverage,fuzzing",
                              "--max-examples", str(EXAMPLES), "--generation-database", "none", "--workers", "1",
                              "--request-timeout", "30", "--no-color", "--seed", SEED, *header],
                             capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
        assert "Operations:       17 selected / 17 total" in run.stdout, run.stdout  # every endpoint
        # Still alive and answering afterwards.
        health = httpx.get(url + "health", timeout=10)
        assert health.status_code == 200 and health.json()["status"] == "ok"
        assert health.json()["model_calls"] > 0  # the generated requests reached the model
        answer = httpx.post(url + "translate", json={"text": "3. Oktober 1990"}, timeout=30,
                            headers=dict([header[1].split(": ")]))
        assert answer.status_code == 200
    assert "Traceback" not in process.stderr.read()
