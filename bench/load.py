"""Load check of `attnmt serve`: mixed and faulty traffic on 127.0.0.1 for T seconds, then a stop
(SIGTERM) with requests in flight.

    python bench/load.py                                             # trains the demo model first
    python bench/load.py --model attnmt-demo/model.safetensors --clients 50 --seconds 60

Starts the server in a subprocess. Of the N clients, one per fault misbehaves all through the run,
with a pause between its requests: it closes its connection as soon as its request is sent (before
the answer), or half-way through the body; it sends a valid body a few bytes at a time, taking half
the server's --body-timeout-s (it must be answered 200); it stops half-way through the body (408
when the body timeout has passed); or it sends a body over the server's size limit (413). The other
clients post one request at a time and post again as soon as the answer comes, drawn from a mix:
mostly valid ones (attnmt's JSON API, a generated date with its attention as the explorer asks;
LibreTranslate's form API), and invalid ones the server must refuse with a given 4xx (malformed
JSON, a wrong type, no sentence, a beam over the limit, an unknown field, a form sent to the JSON
API, a sentence over the character limit, a language the model does not translate).

Then the clients stop, each well-behaved one sends a valid request but for its last byte, the server
gets SIGTERM once it has read their starts, and the last bytes follow once it has stopped listening
(the first thing it does when it stops): each request must be answered 200, and the server must
exit 0 within SHUTDOWN_LIMIT_S.

Prints `metric=<name> value=<number>` lines: requests per second, latency percentiles of the valid
requests, requests by kind, errors by kind (a valid request not answered 200, another answered 5xx
or with another status than its own, no answer within the server's timeouts, a connection error),
errors in the server's log, the server's resident memory at the start and the end of the load (and
its mean in the first and the last third: flat memory, the two are close), and the stop. The last
line says whether the check passed; the exit status is 1 if it did not.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Awaitable, Callable, Optional, Union
from urllib.parse import urlencode, urlsplit

import httpx

from attnmt.config import ServeConfig
from attnmt.dates import generate_dates
from attnmt.demo import run_demo

HOST = "127.0.0.1"
JSON = "application/json"
FORM = "application/x-www-form-urlencoded"
MEMORY_SAMPLE_S = 0.25
INVALID_SHARE = 0.2  # of the well-behaved clients' requests
FAULT_PAUSE_S = 0.1  # between a faulty client's requests: faults are part of the traffic, not most of it
SLOW_PIECE_BYTES = 4
# A request still unanswered this long after the server's own timeouts have passed hangs.
ANSWER_MARGIN_S = 10.0
SHUTDOWN_LIMIT_S = 10.0
ERROR_KINDS = ("valid_not_200", "invalid_5xx", "wrong_status", "timeout", "connection")  # see error_kind

# What a request got: its answer's status, None where the client leaves before the answer, or the
# error it ran into.
Answer = Union[int, None, Exception]


@dataclass(frozen=True)
class Kind:
    """A kind of request: its body for a sentence, the status the server must answer (None: the client
    leaves before the answer), its weight in the well-behaved clients' mix, and how a faulty client
    sends the body: the part of it sent (the rest never is), in slow pieces or at once."""

    name: str
    status: Optional[int]
    body: Callable[[str], tuple[str, bytes]]  # a sentence -> the content type and the body
    weight: float = 0.0
    part: float = 1.0
    slow: bool = False


def as_json(fields: object) -> tuple[str, bytes]:
    return JSON, json.dumps(fields).encode()


def as_form(fields: dict[str, str]) -> tuple[str, bytes]:
    return FORM, urlencode(fields).encode()


def request_kinds(model: dict, options: dict) -> tuple[list[Kind], list[Kind]]:
    """The well-behaved clients' kinds of request, valid and invalid, and the faulty clients', from the
    server's /model (its languages and limits); `options` go with every valid request of the JSON API."""
    limits = ServeConfig(**model["limits"])
    pair = {"source": model["src_lang"], "target": model["tgt_lang"]}

    def translate(sentence: str, **more: object) -> tuple[str, bytes]:
        return as_json({**options, "text": sentence, **more})

    invalid = [
        Kind("invalid_malformed_json", 400, lambda s: (JSON, translate(s)[1][:-1])),
        Kind("invalid_wrong_type", 422, lambda s: as_json({"text": [s]})),
        Kind("invalid_no_sentence", 422, lambda _: as_json({"texts": []})),
        Kind("invalid_beam_over_limit", 422, lambda s: translate(s, beam=limits.max_beam + 1)),
        Kind("invalid_unknown_field", 422, lambda s: translate(s, temperature=0.5)),
        Kind("invalid_form_to_json_api", 415, lambda s: as_form({"text": s})),
        Kind("invalid_too_many_characters", 413, lambda _: translate("x" * (limits.max_chars + 1))),
        Kind("invalid_language", 400, lambda s: as_form({"q": s, **pair, "target": "not-" + pair["target"]})),
    ]
    well_behaved = [Kind("valid_json", 200, translate, weight=0.75 * (1 - INVALID_SHARE)),
                    Kind("valid_libretranslate_form", 200, lambda s: as_form({"q": s, **pair}),
                         weight=0.25 * (1 - INVALID_SHARE)),
                    *(replace(kind, weight=INVALID_SHARE / len(invalid)) for kind in invalid)]
    faults = [Kind("fault_disconnect_after_request", None, translate),
              Kind("fault_disconnect_mid_body", None, translate, part=0.5),
              Kind("fault_slow_body", 200, translate, slow=True),
              Kind("fault_stalled_body", 408, translate, part=0.5),
              Kind("fault_oversized_body", 413, lambda s: translate(s + " " * limits.max_body_bytes()))]
    return well_behaved, faults


def error_kind(kind: Kind, answer: Answer) -> Optional[str]:
    """What went wrong with `answer` to a request of `kind` (one of ERROR_KINDS), or None."""
    if isinstance(answer, (asyncio.TimeoutError, httpx.TimeoutException)):
        return "timeout"
    if isinstance(answer, Exception):
        return "connection"
    if answer == kind.status:
        return None
    if kind.status == 200:
        return "valid_not_200"
    return "invalid_5xx" if answer is not None and answer >= 500 else "wrong_status"


class Tally:
    """Requests by kind, errors by kind with an example of each, and the latencies of the valid
    requests the well-behaved clients had answered."""

    def __init__(self) -> None:
        self.requests: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.examples: dict[str, str] = {}
        self.latencies: list[float] = []

    def record(self, kind: Kind, answer: Answer, detail: str = "") -> bool:
        """Count `answer` to a request of `kind`; True if it is the answer the kind must get."""
        self.requests[kind.name] += 1
        error = error_kind(kind, answer)
        if error is not None:
            self.errors[error] += 1
            got = f"status {answer}" if isinstance(answer, int) else f"{type(answer).__name__} {answer}"
            self.examples.setdefault(error, f"{kind.name} got {got} {detail}".strip()[:300])
        return error is None


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


def request_head(content_type: str, length: int) -> bytes:
    return (f"POST /translate HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


async def read_status(reader: asyncio.StreamReader) -> int:
    """The status of an HTTP/1.1 answer, read whole (up to its Content-Length)."""
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionError("the server closed the connection without an answer")
    length = 0
    while (line := await reader.readline()).strip():
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    await reader.readexactly(length)
    return int(status_line.split()[1])


async def outcome(exchange: Awaitable[Optional[int]]) -> Answer:
    """What a request sent over a socket of its own got, the error it ran into included."""
    try:
        return await exchange
    except (OSError, EOFError, asyncio.TimeoutError) as err:  # EOFError: an answer cut short
        return err


async def send_faulty(port: int, kind: Kind, sentence: str, limits: ServeConfig, answer_timeout_s: float
                      ) -> Optional[int]:
    """One request sent as `kind` sends it, on a connection of its own: the status of the answer, or
    None where the client leaves before it."""
    content_type, body = kind.body(sentence)
    sent = body[: round(len(body) * kind.part)]
    pieces = [sent[i: i + SLOW_PIECE_BYTES] for i in range(0, len(sent), SLOW_PIECE_BYTES)] if kind.slow else [sent]
    reader, writer = await asyncio.open_connection(HOST, port)
    try:
        writer.write(request_head(content_type, len(body)))
        for piece in pieces:
            writer.write(piece)
            await writer.drain()
            if kind.slow:
                await asyncio.sleep(limits.body_timeout_s / 2 / len(pieces))
        if kind.status is None:
            return None
        return await asyncio.wait_for(read_status(reader), answer_timeout_s)
    finally:
        writer.close()


@dataclass
class HeldRequest:
    """A request sent on a connection of its own but for its last byte."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    last_byte: bytes

    @classmethod
    async def send(cls, port: int, kind: Kind, sentence: str) -> HeldRequest:
        content_type, body = kind.body(sentence)
        reader, writer = await asyncio.open_connection(HOST, port)
        writer.write(request_head(content_type, len(body)) + body[:-1])
        await writer.drain()
        return cls(reader, writer, body[-1:])

    async def finish(self, answer_timeout_s: float) -> int:
        """The last byte: the answer's status."""
        try:
            self.writer.write(self.last_byte)
            await self.writer.drain()
            return await asyncio.wait_for(read_status(self.reader), answer_timeout_s)
        finally:
            self.writer.close()


async def listening(port: int) -> bool:
    """Whether the server still accepts connections."""
    try:
        _, writer = await asyncio.open_connection(HOST, port)
    except ConnectionRefusedError:
        return False
    writer.close()
    return True


async def well_behaved_client(rng: random.Random, http: httpx.AsyncClient, kinds: list[Kind], sentences: list[str],
                              stop: asyncio.Event, tally: Tally) -> None:
    weights = [kind.weight for kind in kinds]
    while not stop.is_set():
        kind = rng.choices(kinds, weights)[0]
        content_type, body = kind.body(rng.choice(sentences))
        started = time.monotonic()
        detail = ""
        try:
            response = await http.post("translate", content=body, headers={"content-type": content_type})
            answer: Answer = response.status_code
            if answer != kind.status:
                detail = response.text[:200]
        except httpx.HTTPError as err:
            answer = err
        if tally.record(kind, answer, detail) and kind.status == 200:
            tally.latencies.append(time.monotonic() - started)


async def faulty_client(rng: random.Random, port: int, kind: Kind, sentences: list[str], stop_at: float,
                        limits: ServeConfig, answer_timeout_s: float, tally: Tally) -> None:
    while time.monotonic() < stop_at:
        tally.record(kind, await outcome(send_faulty(port, kind, rng.choice(sentences), limits, answer_timeout_s)))
        await asyncio.sleep(FAULT_PAUSE_S)


async def sample_memory(server: subprocess.Popen, samples: list[int]) -> None:
    """The server's resident memory in KiB every MEMORY_SAMPLE_S, until cancelled or the server ends."""
    while server.poll() is None:
        samples.append(rss_kib(server.pid))
        await asyncio.sleep(MEMORY_SAMPLE_S)


async def stop_in_flight(server: subprocess.Popen, base: str, requests: list[tuple[Kind, str]],
                         answer_timeout_s: float) -> tuple[list[Answer | BaseException], float]:
    """SIGTERM with `requests` (kind, sentence) in flight: their answers, and the seconds the server
    took to exit (it is killed if it has not within SHUTDOWN_LIMIT_S)."""
    port = urlsplit(base).port
    held = await asyncio.gather(*(HeldRequest.send(port, kind, sentence) for kind, sentence in requests),
                                return_exceptions=True)
    # A connection accepted after theirs is read after them: once the server has answered on it, it
    # has read each held request's start, which makes them requests in flight.
    async with httpx.AsyncClient(base_url=base, timeout=answer_timeout_s) as fresh:
        (await fresh.get("health")).raise_for_status()
    server.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    while await listening(port) and time.monotonic() < signalled + SHUTDOWN_LIMIT_S:
        await asyncio.sleep(0.01)  # their last bytes come when the server is stopping

    async def answer(request: HeldRequest | BaseException) -> Answer | BaseException:
        """The held request's answer, or the error that kept it from being sent."""
        return await outcome(request.finish(answer_timeout_s)) if isinstance(request, HeldRequest) else request

    answers = await asyncio.gather(*(answer(request) for request in held))
    try:
        await asyncio.to_thread(server.wait, max(0.0, signalled + SHUTDOWN_LIMIT_S - time.monotonic()))
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
    return answers, time.monotonic() - signalled


def percentile_ms(values: list[float], share: float) -> float:
    return 1000 * sorted(values)[min(int(len(values) * share), len(values) - 1)] if values else float("nan")


async def check(base: str, server: subprocess.Popen, clients: int, seconds: float, options: dict) -> list[str]:
    """The load, then the stop; prints the metrics and returns what failed."""
    port, pid = urlsplit(base).port, server.pid
    sentences = [source for source, _ in generate_dates(2000, seed=7)]
    pool = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=base, limits=pool) as http:
        model = (await http.get("model")).json()
        limits = ServeConfig(**model["limits"])
        well_behaved, faults = request_kinds(model, options)
        if clients <= len(faults):
            sys.exit(f"--clients {clients}: give more than the {len(faults)} faulty ones")
        answer_timeout_s = limits.timeout_s + limits.body_timeout_s + ANSWER_MARGIN_S
        http.timeout = httpx.Timeout(answer_timeout_s)
        for sentence in sentences[:20]:  # warm-up, not counted
            (await http.post("translate", json={**options, "text": sentence})).raise_for_status()

        tally, memory, stop = Tally(), [], asyncio.Event()
        started, cpu_started = time.monotonic(), cpu_seconds(pid)
        stop_at = started + seconds
        sampler = asyncio.create_task(sample_memory(server, memory))
        running = [asyncio.create_task(well_behaved_client(random.Random(seed), http, well_behaved, sentences, stop,
                                                           tally)) for seed in range(clients - len(faults))]
        # The faulty clients end with their last request (a stalled body waits for its 408 past stop_at).
        await asyncio.gather(*(faulty_client(random.Random(-1 - i), port, kind, sentences, stop_at, limits,
                                             answer_timeout_s, tally) for i, kind in enumerate(faults)))
        stop.set()
        await asyncio.gather(*running)
        sampler.cancel()
        if server.poll() is not None:
            return [f"the server exited during the load, with status {server.returncode}"]
        elapsed, server_cpu = time.monotonic() - started, cpu_seconds(pid) - cpu_started
        health = (await http.get("health")).json()

    valid = [kind for kind in well_behaved if kind.status == 200]
    held_requests = [(valid[i % len(valid)], sentences[i]) for i in range(clients - len(faults))]
    held_answers, stop_s = await stop_in_flight(server, base, held_requests, answer_timeout_s)

    requests = sum(tally.requests.values())
    third = max(len(memory) // 3, 1)  # of the samples, taken at even intervals
    metrics = {
        "clients": clients, "faulty_clients": len(faults), "seconds": round(elapsed, 1), "requests": requests,
        "requests_per_s": round(requests / elapsed, 1),
        "valid_requests_answered": len(tally.latencies),
        "latency_p50_ms": round(percentile_ms(tally.latencies, 0.5), 1),
        "latency_p99_ms": round(percentile_ms(tally.latencies, 0.99), 1),
        "latency_max_ms": round(percentile_ms(tally.latencies, 1.0), 1),
        **{f"requests_{kind.name}": tally.requests[kind.name] for kind in well_behaved + faults},
        "errors": sum(tally.errors.values()),
        **{f"errors_{error}": tally.errors[error] for error in ERROR_KINDS},
        "server_cpu_ms_per_request": round(1000 * server_cpu / requests, 2),
        "model_calls": health["model_calls"],
        "sentences_per_model_call": round(health["sentences"] / health["model_calls"], 1),
        "server_rss_start_mib": round(memory[0] / 1024, 1),
        "server_rss_end_mib": round(memory[-1] / 1024, 1),
        "server_rss_peak_mib": round(max(memory) / 1024, 1),
        "server_rss_first_third_mib": round(statistics.mean(memory[:third]) / 1024, 1),
        "server_rss_last_third_mib": round(statistics.mean(memory[-third:]) / 1024, 1),
        "stop_requests_in_flight": len(held_answers),
        "stop_requests_answered": held_answers.count(200),
        "server_exit_code": server.returncode,
        "stop_seconds": round(stop_s, 1),
    }
    for name, value in metrics.items():
        print(f"metric={name} value={value}")
    for error, example in tally.examples.items():
        print(f"error: {error}: {example}")

    failures = []
    if tally.errors:
        failures.append("requests failed: " + ", ".join(f"{count} {error}" for error, count in tally.errors.items()))
    if held_answers.count(200) < len(held_answers):
        unanswered = [answer for answer in held_answers if answer != 200]
        failures.append(f"{len(unanswered)} of the {len(held_answers)} requests in flight at SIGTERM were not "
                        f"answered 200 (first: {unanswered[0]!r})")
    if stop_s > SHUTDOWN_LIMIT_S:
        failures.append(f"the server had not stopped {SHUTDOWN_LIMIT_S:g} s after SIGTERM")
    elif server.returncode != 0:
        failures.append(f"the server exited with {server.returncode}")
    return failures


def server_log_errors(log: str) -> list[str]:
    """The lines of the server's stderr that tell of an error (uvicorn's ERROR lines, tracebacks)."""
    return [line for line in log.splitlines() if line.startswith(("ERROR", "Traceback", "attnmt: error"))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="model file (default: train the demo model into a temporary directory)")
    parser.add_argument("--clients", type=int, default=50, help="all of them, the faulty ones included")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--beam", type=int, default=1)
    parser.add_argument("--no-attention", action="store_true", help="do not ask for the attention matrix")
    parser.add_argument("serve_args", nargs="*", help="more `attnmt serve` flags, after --")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or str(run_demo(tmp, log=lambda line: print(line, file=sys.stderr))["model"])
        log_path = Path(tmp) / "server.log"
        with open(log_path, "w") as log:
            server = subprocess.Popen([sys.executable, "-m", "attnmt", "serve", model, "--port", "0",
                                       *args.serve_args], stdout=subprocess.PIPE, stderr=log, text=True)
        try:
            line = server.stdout.readline()
            url = re.search(r"http://\S+/", line)
            if url is None:
                server.wait(timeout=30)
                sys.exit(f"the server did not start: {line}{log_path.read_text()}")
            print(f"server: {line.strip()} pid={server.pid}", file=sys.stderr)
            options = {"beam": args.beam, "attention": not args.no_attention}
            failures = asyncio.run(check(url.group(), server, args.clients, args.seconds, options))
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
        logged = server_log_errors(log_path.read_text())
    print(f"metric=server_log_errors value={len(logged)}")
    for line in logged[:5]:
        print(f"server log: {line}")
    if logged:
        failures.append(f"{len(logged)} errors in the server's log")
    print(f"load check failed: {'; '.join(failures)}" if failures else "load check passed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
