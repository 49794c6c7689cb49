"""Load check of `attnmt serve`: mixed and faulty traffic on 127.0.0.1 for T seconds, then a stop
(SIGTERM) with requests in flight; with --models, a server of several models beside its models in
one-model servers, side by side (all at once, as one server per model would run), then alone.

    python bench/load.py                                             # trains the demo model first
    python bench/load.py --model attnmt-demo/model.safetensors --clients 50 --seconds 60
    python bench/load.py --models                                    # trains and builds three models first
    python bench/load.py --models de_en=A en_fr=B en_de=C [--pivot en] --clients 50 --seconds 60

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

Several models (--models MODEL ...: what `attnmt serve` takes, a model file, a run's folder, a
CTranslate2 export or NAME=PATH, a folder of models or a models file; --pivot LANG goes to the
server). The clients are spread over every pair the server translates: the well-behaved ones one
pair after another (client k on pair k mod P), the faulty ones over the pairs a model translates
directly (fault i on pair i mod D). A client of a direct pair sends the mix above with the model's
name in attnmt's JSON (`model`) and the pair's source and target on LibreTranslate's API; a client of
a pair the server translates through the pivot sends LibreTranslate's form only (80 % valid, 20 %
a language it does not translate). The server is loaded, then stopped, as above.

Then each model is served by a one-model server (`attnmt serve NAME=PATH`, its models file's precision
and engine, the same flags after --) under the very clients of its pairs in the several-model run (the
same seeds, kinds and requests; a pair through the pivot has no one-model server, and its clients load
only the several-model server), for the same seconds (as above, a load ends with its faulty clients'
last answers), and stopped as above; twice:

- side by side: the one-model servers all started, then loaded at the same time (their loads start
  together, after each server's warm-up, and their well-behaved clients stop together, once the last
  server's faulty clients have ended), then each stopped. This is the comparison for the choice
  between one server for all the models and one server per model on the same machine: the servers
  share the machine's cores as they would in production, under the several-model run's clients.
- alone, one after the other: each one-model server with the machine to itself. This says what a
  pair costs on its own, not what one server per model would do: each one-model server had all the
  cores for its clients only (three models: three times the machine the several-model server had
  for them). It costs the seconds once per model.

The one-model servers get the clients of their pairs only: --clients 50 is 15 well-behaved clients a
pair with three pairs. In every run the clients are tasks of this one process, which takes its share
of the cores. A run of three models loads for five times --seconds, besides the starts, warm-ups and
stops.

Prints, per pair (pair_SOURCE_TARGET_...), the requests, errors and latency p50/p90/p99 of the valid
requests on the several-model server (pair_SOURCE_TARGET_p50_ms, ...), the same on its one-model
server side by side (..._side_by_side_...) and alone (..._single_...), and the ratios of the
several-model server's to them (pair_SOURCE_TARGET_p50_over_side_by_side, and pair_SOURCE_TARGET_p50_ratio
to the one-model server alone; above 1, the several-model server answered the pair more slowly); per
model, its load time and the memory loading it added (GET /models); each server's requests, errors,
resident memory at the start and the end of its load and its stop (multi_..., side_by_side_NAME_...,
single_NAME_...). Against the several-model server's requests per second (multi_requests_per_s):
the one-model servers' side by side, in all (side_by_side_requests_per_s: their requests over the
longest of their loads' seconds; requests_per_s_multi_over_side_by_side; with pairs through the pivot,
the several-model server answers their clients too, which the one-model servers do not have). Its
memory at the end of the load (rss_mib_multi) against the sum of the one-model servers' side by side
(rss_mib_sum_side_by_side, rss_multi_over_sum_side_by_side) and alone (rss_mib_sum_single,
rss_multi_over_sum_single), the same at the start (..._start); a sum counts the Python, torch and
server memory once per server. Then a line per pair and comparison with its latencies, and the
requests per second and memory in words. The check passes when no server of any run had an error of
any kind (errors_all, the logs, the stops).

Without a model named, `--models` builds three, deterministically, into a temporary directory:
the demo model (the RNN `attnmt demo` trains, as the one-model mode does) relabelled de -> en; a
small Transformer (TRANSFORMER_SETTINGS: 2 + 2 layers, d 32, 4 heads, trained on 1,700 generated
dates for 3 epochs, some 30 s on two cores; its translations are wrong more often than not but end
as long as dates, which is what a load check needs) relabelled en -> fr and served by attnmt's
engine; and the same Transformer relabelled en -> de and exported to CTranslate2 (served by
attnmt's engine instead, and said so, where the ctranslate2 package is not installed). A relabelled
model says it translates other languages (its config's data.src_lang and tgt_lang) and is the
same network: the three pairs read the same generated dates.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterator, Optional, Union
from urllib.parse import urlencode, urlsplit

import httpx

from attnmt.config import ServeConfig
from attnmt.configfile import config_from_dict
from attnmt.corpus.dates import generate_dates
from attnmt.errors import AttnmtError
from attnmt.modelfile import read_model, save_model
from attnmt.serve.models import ModelSpec, model_specs
from attnmt.training.demo import run_demo
from attnmt.training.train import train

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
WARM_UP_REQUESTS = 20  # per pair (one-model mode: the model), before the load, not counted
# --models without a model: the small Transformer trained beside the demo model (the dates the demo
# reads, into ISO dates), relabelled as two pairs.
TRANSFORMER_SETTINGS: dict[str, dict[str, Any]] = {
    "data": {"format": "dates", "source_languages": "en de", "tgt_lang": "iso", "num_pairs": 1700, "valid_size": 100,
             "test_size": 100, "max_len": 60},
    "tokenizer": {"level": "char"},
    "model": {"arch": "transformer", "emb_dim": 32, "heads": 4, "ff_dim": 64, "enc_layers": 2, "dec_layers": 2,
              "dropout": 0.0},
    "train": {"epochs": 3, "batch_size": 64, "lr": 0.003, "scheduler": "warmup", "warmup_steps": 40},
}

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


def request_kinds(model: dict, options: dict, name: Optional[str] = None, pair: Optional[tuple[str, str]] = None
                  ) -> tuple[list[Kind], list[Kind]]:
    """The well-behaved clients' kinds of request, valid and invalid, and the faulty clients', from the
    server's /model (its languages and limits); `options` go with every valid request of the JSON API.
    On a server of several models: `name` is the model the JSON API names, `pair` the source and target
    LibreTranslate's API asks for (else the model's own)."""
    limits = ServeConfig(**model["limits"])
    source, target = pair or (model["src_lang"], model["tgt_lang"])
    languages = {"source": source, "target": target}
    named = {} if name is None else {"model": name}

    def translate(sentence: str, **more: object) -> tuple[str, bytes]:
        return as_json({**options, **named, "text": sentence, **more})

    invalid = [
        Kind("invalid_malformed_json", 400, lambda s: (JSON, translate(s)[1][:-1])),
        Kind("invalid_wrong_type", 422, lambda s: as_json({"text": [s]})),
        Kind("invalid_no_sentence", 422, lambda _: as_json({"texts": []})),
        Kind("invalid_beam_over_limit", 422, lambda s: translate(s, beam=limits.max_beam + 1)),
        Kind("invalid_unknown_field", 422, lambda s: translate(s, temperature=0.5)),
        Kind("invalid_form_to_json_api", 415, lambda s: as_form({"text": s})),
        Kind("invalid_too_many_characters", 413, lambda _: translate("x" * (limits.max_chars + 1))),
        Kind("invalid_language", 400, lambda s: as_form({"q": s, **languages, "target": "not-" + target})),
    ]
    well_behaved = [Kind("valid_json", 200, translate, weight=0.75 * (1 - INVALID_SHARE)),
                    Kind("valid_libretranslate_form", 200, lambda s: as_form({"q": s, **languages}),
                         weight=0.25 * (1 - INVALID_SHARE)),
                    *(replace(kind, weight=INVALID_SHARE / len(invalid)) for kind in invalid)]
    faults = [Kind("fault_disconnect_after_request", None, translate),
              Kind("fault_disconnect_mid_body", None, translate, part=0.5),
              Kind("fault_slow_body", 200, translate, slow=True),
              Kind("fault_stalled_body", 408, translate, part=0.5),
              Kind("fault_oversized_body", 413, lambda s: translate(s + " " * limits.max_body_bytes()))]
    return well_behaved, faults


def pivot_kinds(source: str, target: str) -> list[Kind]:
    """The well-behaved clients' kinds of request for a pair translated through the pivot, which no
    model's name answers on the JSON API: LibreTranslate's form, valid, or with a target the server
    does not translate into."""
    languages = {"source": source, "target": target}
    return [Kind("valid_libretranslate_form", 200, lambda s: as_form({"q": s, **languages}), weight=1 - INVALID_SHARE),
            Kind("invalid_language", 400, lambda s: as_form({"q": s, **languages, "target": "not-" + target}),
                 weight=INVALID_SHARE)]


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
    """Whether the server still accepts connections. A stopping server may refuse the connection or
    reset it mid-handshake (its listening socket closed while the connection waited): both mean no."""
    try:
        _, writer = await asyncio.open_connection(HOST, port)
    except (ConnectionRefusedError, ConnectionResetError):
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
    assert port is not None
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


@dataclass
class Group:
    """The clients of one pair (one-model mode: of the server): the well-behaved ones, one per seed,
    drawing from `well_behaved`, and the faulty ones, each with its seed and its kind. `model`: the
    model that translates the pair (None: through the pivot)."""

    pair: str
    model: Optional[str]
    well_behaved: list[Kind]
    seeds: list[int]
    faults: list[tuple[int, Kind]] = field(default_factory=list)

    @property
    def valid(self) -> list[Kind]:
        return [kind for kind in self.well_behaved if kind.status == 200]


@dataclass
class Load:
    """What a server under load, then stopped, gave: each group's tally, its memory samples (KiB),
    the load's seconds, the server's CPU seconds and /health at the end, the answers to the requests
    in flight at SIGTERM, how long it took to stop and its exit status."""

    tallies: dict[str, Tally]
    memory: list[int]
    elapsed: float
    server_cpu: float
    health: dict
    held_answers: list[Answer | BaseException]
    stop_s: float
    exit_code: Optional[int]

    @property
    def requests(self) -> int:
        return sum(sum(tally.requests.values()) for tally in self.tallies.values())

    @property
    def errors(self) -> Counter[str]:
        return sum((tally.errors for tally in self.tallies.values()), Counter())

    def failures(self) -> list[str]:
        failures = []
        if self.errors:
            failures.append("requests failed: " + ", ".join(f"{count} {error}" for error, count in self.errors.items()))
        if self.held_answers.count(200) < len(self.held_answers):
            unanswered = [answer for answer in self.held_answers if answer != 200]
            failures.append(f"{len(unanswered)} of the {len(self.held_answers)} requests in flight at SIGTERM were "
                            f"not answered 200 (first: {unanswered[0]!r})")
        if self.stop_s > SHUTDOWN_LIMIT_S:
            failures.append(f"the server had not stopped {SHUTDOWN_LIMIT_S:g} s after SIGTERM")
        elif self.exit_code != 0:
            failures.append(f"the server exited with {self.exit_code}")
        return failures

    def server_metrics(self) -> dict[str, object]:
        """Requests, errors, the server's work, memory and stop, as the one-model mode names them."""
        requests, memory = self.requests, self.memory
        return {
            "seconds": round(self.elapsed, 1), "requests": requests,
            "requests_per_s": round(requests / self.elapsed, 1),
            "errors": sum(self.errors.values()),
            **{f"errors_{error}": self.errors[error] for error in ERROR_KINDS},
            "server_cpu_ms_per_request": round(1000 * self.server_cpu / requests, 2),
            "model_calls": self.health["model_calls"],
            "sentences_per_model_call": round(self.health["sentences"] / max(self.health["model_calls"], 1), 1),
            "server_rss_start_mib": round(memory[0] / 1024, 1),
            "server_rss_end_mib": round(memory[-1] / 1024, 1),
            "server_rss_peak_mib": round(max(memory) / 1024, 1),
            "stop_requests_in_flight": len(self.held_answers),
            "stop_requests_answered": self.held_answers.count(200),
            "server_exit_code": self.exit_code,
            "stop_seconds": round(self.stop_s, 1),
        }


SENTENCES = [source for source, _ in generate_dates(2000, seed=7)]


class Together:
    """Where loads run side by side wait for each other: each load meets the others at a point (its
    start, after the warm-up; the end of its faulty clients, before its well-behaved ones stop) and goes
    on once every load still running has come to it. A load that fails drops out, and the others do not
    wait for it."""

    def __init__(self, loads: int) -> None:
        self.loads = loads
        self.arrived: Counter[str] = Counter()
        self.all_there: dict[str, asyncio.Event] = {}

    def _release(self) -> None:
        for point, event in self.all_there.items():
            if self.arrived[point] >= self.loads:
                event.set()

    async def meet(self, point: str) -> None:
        self.arrived[point] += 1
        event = self.all_there.setdefault(point, asyncio.Event())
        self._release()
        await event.wait()

    def drop_out(self) -> None:
        self.loads -= 1
        self._release()


async def load_and_stop(base: str, server: subprocess.Popen, groups: list[Group], seconds: float,
                        limits: ServeConfig, together: Optional[Together] = None) -> Load | str:
    """Each group's clients for `seconds` (after WARM_UP_REQUESTS of each group's first valid kind), then
    the stop with a valid request of each well-behaved client in flight; what the server exited with
    during the load, if it did. With `together`, the load starts with the other loads side by side, and
    its well-behaved clients stop with theirs, once the last load's faulty clients have ended."""
    port, pid = urlsplit(base).port, server.pid
    assert port is not None
    sentences = SENTENCES
    clients = sum(len(group.seeds) + len(group.faults) for group in groups)
    answer_timeout_s = limits.timeout_s + limits.body_timeout_s + ANSWER_MARGIN_S
    pool = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=base, limits=pool, timeout=answer_timeout_s) as http:
        for group in groups:  # warm-up, not counted
            for sentence in sentences[:WARM_UP_REQUESTS]:
                content_type, body = group.valid[0].body(sentence)
                (await http.post("translate", content=body, headers={"content-type": content_type})).raise_for_status()

        if together is not None:
            await together.meet("start")
        tallies = {group.pair: Tally() for group in groups}
        memory: list[int] = []
        stop = asyncio.Event()
        started, cpu_started = time.monotonic(), cpu_seconds(pid)
        stop_at = started + seconds
        sampler = asyncio.create_task(sample_memory(server, memory))
        running = [asyncio.create_task(well_behaved_client(random.Random(seed), http, group.well_behaved, sentences,
                                                           stop, tallies[group.pair]))
                   for group in groups for seed in group.seeds]
        # The faulty clients end with their last request (a stalled body waits for its 408 past stop_at).
        await asyncio.gather(asyncio.sleep(seconds),
                             *(faulty_client(random.Random(seed), port, kind, sentences, stop_at, limits,
                                             answer_timeout_s, tallies[group.pair])
                               for group in groups for seed, kind in group.faults))
        if together is not None:
            await together.meet("stop")
        stop.set()
        await asyncio.gather(*running)
        sampler.cancel()
        if server.poll() is not None:
            return f"the server exited during the load, with status {server.returncode}"
        elapsed, server_cpu = time.monotonic() - started, cpu_seconds(pid) - cpu_started
        health = (await http.get("health")).json()

    held = [(group.valid[j % len(group.valid)], seed) for group in groups for j, seed in enumerate(group.seeds)]
    held_requests = [(kind, sentences[i]) for i, (kind, _) in enumerate(held)]
    held_answers, stop_s = await stop_in_flight(server, base, held_requests, answer_timeout_s)
    return Load(tallies, memory, elapsed, server_cpu, health, held_answers, stop_s, server.returncode)


async def check(base: str, server: subprocess.Popen, clients: int, seconds: float, options: dict) -> list[str]:
    """The load, then the stop, on a server of one model; prints the metrics and returns what failed."""
    async with httpx.AsyncClient(base_url=base) as http:
        model = (await http.get("model")).json()
    well_behaved, faults = request_kinds(model, options)
    if clients <= len(faults):
        sys.exit(f"--clients {clients}: give more than the {len(faults)} faulty ones")
    group = Group("", None, well_behaved, list(range(clients - len(faults))),
                  [(-1 - i, kind) for i, kind in enumerate(faults)])
    run = await load_and_stop(base, server, [group], seconds, ServeConfig(**model["limits"]))
    if isinstance(run, str):
        return [run]
    tally, memory, server_metrics = run.tallies[""], run.memory, run.server_metrics()
    third = max(len(memory) // 3, 1)  # of the samples, taken at even intervals
    metrics = {
        "clients": clients, "faulty_clients": len(faults),
        **{name: server_metrics[name] for name in ("seconds", "requests", "requests_per_s")},
        "valid_requests_answered": len(tally.latencies),
        "latency_p50_ms": round(percentile_ms(tally.latencies, 0.5), 1),
        "latency_p99_ms": round(percentile_ms(tally.latencies, 0.99), 1),
        "latency_max_ms": round(percentile_ms(tally.latencies, 1.0), 1),
        **{f"requests_{kind.name}": tally.requests[kind.name] for kind in well_behaved + faults},
        **{name: server_metrics[name] for name in ("errors", *(f"errors_{error}" for error in ERROR_KINDS),
                                                   "server_cpu_ms_per_request", "model_calls",
                                                   "sentences_per_model_call", "server_rss_start_mib",
                                                   "server_rss_end_mib", "server_rss_peak_mib")},
        "server_rss_first_third_mib": round(statistics.mean(memory[:third]) / 1024, 1),
        "server_rss_last_third_mib": round(statistics.mean(memory[-third:]) / 1024, 1),
        **{name: server_metrics[name] for name in ("stop_requests_in_flight", "stop_requests_answered",
                                                   "server_exit_code", "stop_seconds")},
    }
    for name, value in metrics.items():
        print(f"metric={name} value={value}")
    for error, example in tally.examples.items():
        print(f"error: {error}: {example}")
    return run.failures()


def server_log_errors(log: str) -> list[str]:
    """The lines of the server's stderr that tell of an error (uvicorn's ERROR lines, tracebacks)."""
    return [line for line in log.splitlines() if line.startswith(("ERROR", "Traceback", "attnmt: error"))]


@contextlib.contextmanager
def started_server(arguments: list[str], log_path: Path) -> Iterator[tuple[subprocess.Popen, str]]:
    """`attnmt serve ARGUMENTS`, its stderr into `log_path`: the process and its address. Its stdout
    (the log, one line per request) is read all along, so that a full pipe never stalls it; the
    process is killed on the way out if it still runs."""
    with open(log_path, "w") as log:
        server = subprocess.Popen([sys.executable, "-m", "attnmt", "serve", *arguments],
                                  stdout=subprocess.PIPE, stderr=log, text=True)
    assert server.stdout is not None
    try:
        lines = []  # with several models, a line per model comes before the address
        while (line := server.stdout.readline()) and not (url := re.search(r"http://\S+/", line)):
            lines.append(line)
        if not line or url is None:
            server.wait(timeout=30)
            sys.exit(f"the server did not start: {''.join(lines)}{log_path.read_text()}")
        for model_line in lines:
            print(f"server: {model_line.strip()}", file=sys.stderr)
        print(f"server: {line.strip()} pid={server.pid}", file=sys.stderr)
        threading.Thread(target=server.stdout.read, daemon=True).start()
        yield server, url.group()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def logged_errors(log_path: Path, label: str, failures: list[str]) -> int:
    """How many errors the server's log at `log_path` tells of; the first few printed, a failure added."""
    logged = server_log_errors(log_path.read_text())
    for line in logged[:5]:
        print(f"server log{label}: {line}")
    if logged:
        failures.append(f"{len(logged)} errors in the server's log")
    return len(logged)


def one_model(args: argparse.Namespace) -> list[str]:
    """The one-model mode: the load check of `attnmt serve --model`."""
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or str(run_demo(tmp, log=lambda line: print(line, file=sys.stderr))["model"])
        log_path = Path(tmp) / "server.log"
        with started_server([model, "--port", "0", *args.serve_args], log_path) as (server, url):
            options = {"beam": args.beam, "attention": not args.no_attention}
            failures = asyncio.run(check(url, server, args.clients, args.seconds, options))
        logged = server_log_errors(log_path.read_text())
    print(f"metric=server_log_errors value={len(logged)}")
    for line in logged[:5]:
        print(f"server log: {line}")
    if logged:
        failures.append(f"{len(logged)} errors in the server's log")
    return failures


def relabelled(model: Path, out: Path, source: str, target: str) -> Path:
    """A copy of `model` at `out` that says it translates `source` into `target` (the same network)."""
    description, weights, _ = read_model(model)
    data = dataclasses.replace(description.config.data, src_lang=source, source_languages="", tgt_lang=target)
    description = dataclasses.replace(description, config=dataclasses.replace(description.config, data=data))
    out.parent.mkdir(parents=True, exist_ok=True)
    save_model(out, description, weights)
    return out


def three_models(folder: Path) -> list[str]:
    """The three models --models builds without one named (see the docstring), as NAME=PATH."""
    def log(line: str) -> None:
        print(line, file=sys.stderr)

    demo = Path(run_demo(str(folder / "demo"), log=log)["model"])
    settings = {**TRANSFORMER_SETTINGS, "train": {**TRANSFORMER_SETTINGS["train"], "out_dir": str(folder / "transformer")}}
    transformer = Path(train(config_from_dict(settings), log=log).model_path)
    models = {"de_en": relabelled(demo, folder / "de_en.safetensors", "de", "en"),
              "en_fr": relabelled(transformer, folder / "en_fr.safetensors", "en", "fr")}
    en_de = relabelled(transformer, folder / "en_de.safetensors", "en", "de")
    try:
        from attnmt.formats.ctranslate2 import export_ctranslate2

        models["en_de"] = export_ctranslate2(en_de, folder / "en_de_ct2")
    except AttnmtError as err:  # the ctranslate2 package is not installed
        print(f"en_de: {err}: served by attnmt's engine instead", file=sys.stderr)
        models["en_de"] = en_de
    return [f"{name}={path}" for name, path in models.items()]


async def described(base: str) -> tuple[list[dict], list[dict]]:
    """The server's /models and LibreTranslate's /languages."""
    async with httpx.AsyncClient(base_url=base) as http:
        return (await http.get("models")).json(), (await http.get("languages")).json()


def pair_groups(infos: list[dict], languages: list[dict], clients: int, options: dict) -> list[Group]:
    """The clients of every pair the server translates (/models and /languages): the direct pairs in
    the models' order, then those through the pivot; well-behaved client k on pair k mod P, fault i
    on direct pair i mod D."""
    groups: list[Group] = []
    faults_of: dict[str, list[Kind]] = {}
    for info in infos:
        for source in info["source_languages"]:
            pair = f"{source}_{info['tgt_lang']}"
            if any(group.pair == pair for group in groups):
                sys.exit(f"two models translate {source} to {info['tgt_lang']}: the load run compares each pair with "
                         f"its model served alone, so give models of different pairs")
            well_behaved, faults_of[pair] = request_kinds(info, options, info["name"], (source, info["tgt_lang"]))
            groups.append(Group(pair, info["name"], well_behaved, []))
    direct = len(groups)
    for language in languages:
        for target in language["targets"]:
            if not any(group.pair == f"{language['code']}_{target}" for group in groups[:direct]):
                groups.append(Group(f"{language['code']}_{target}", None, pivot_kinds(language["code"], target), []))
    faults = len(next(iter(faults_of.values())))
    if clients - faults < len(groups):
        sys.exit(f"--clients {clients}: give at least {faults} faulty ones and one for each of the {len(groups)} pairs")
    for seed in range(clients - faults):
        groups[seed % len(groups)].seeds.append(seed)
    for i in range(faults):
        group = groups[i % direct]
        group.faults.append((-1 - i, faults_of[group.pair][i]))
    return groups


def pair_metrics(group: Group, tally: Tally, prefix: str) -> dict[str, object]:
    return {f"{prefix}_clients": len(group.seeds), f"{prefix}_faulty_clients": len(group.faults),
            f"{prefix}_requests": sum(tally.requests.values()), f"{prefix}_errors": sum(tally.errors.values()),
            f"{prefix}_valid_answered": len(tally.latencies),
            **{f"{prefix}_p{p}_ms": round(percentile_ms(tally.latencies, p / 100), 1) for p in (50, 90, 99)}}


def one_model_arguments(spec: ModelSpec, args: argparse.Namespace) -> list[str]:
    """`attnmt serve`'s arguments for a one-model server of `spec`: NAME=PATH, its
    models file's precision and engine, the flags after --."""
    return [f"{spec.name}={spec.path}", "--port", "0", *args.serve_args,
            *(["--precision", spec.precision] if spec.precision else []),
            *(["--engine", spec.engine] if spec.engine else [])]


async def loads_side_by_side(runs: list[tuple[str, subprocess.Popen, list[Group]]], seconds: float,
                             limits: ServeConfig) -> list[Load | str]:
    """Each (address, server, groups) loaded and stopped at the same time as the others (Together): what
    each gave, or the error its load ran into."""
    together = Together(len(runs))

    async def one(base: str, server: subprocess.Popen, groups: list[Group]) -> Load | str:
        try:
            return await load_and_stop(base, server, groups, seconds, limits, together)
        except Exception as err:  # the others go on without it
            together.drop_out()
            return f"{type(err).__name__}: {err}"

    return list(await asyncio.gather(*(one(*run) for run in runs)))


def one_model_run(name: str, run: Load | str, log_path: Path, how: str, prefix: str, failures: list[str],
                  metrics: dict[str, object]) -> Optional[Load]:
    """A one-model server's run (`how`: alone, side by side): its metrics (PREFIX_NAME_...) and
    failures recorded; the run, unless it failed before its end."""
    label = f"one-model server {name} ({how})"
    logged = {"server_log_errors": logged_errors(log_path, f" ({name} {how})", failures)}
    if isinstance(run, str):
        failures.append(f"{label}: {run}")
        server_metrics: dict[str, object] = {}
    else:
        failures += [f"{label}: {failure}" for failure in run.failures()]
        server_metrics = run.server_metrics()
    metrics.update({f"{prefix}_{name}_{metric}": value for metric, value in {**server_metrics, **logged}.items()})
    return None if isinstance(run, str) else run


def several_models(args: argparse.Namespace) -> list[str]:
    """The several-model mode: the server of all the models, then the one-model servers side by side,
    then each alone (see the docstring)."""
    options = {"beam": args.beam, "attention": not args.no_attention}
    failures: list[str] = []
    metrics: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        arguments = args.models or three_models(Path(tmp))
        try:
            specs = model_specs(arguments)  # the names and files, for the one-model servers
        except AttnmtError as err:
            sys.exit(f"--models: {err}")
        pivot = ["--pivot", args.pivot] if args.pivot else []
        log_path = Path(tmp) / "server.log"
        with started_server([*arguments, *pivot, "--port", "0", *args.serve_args], log_path) as (server, url):
            infos, languages = asyncio.run(described(url))
            groups = pair_groups(infos, languages, args.clients, options)
            limits = ServeConfig(**infos[0]["limits"])
            multi = asyncio.run(load_and_stop(url, server, groups, args.seconds, limits))
        if isinstance(multi, str):
            failures.append(f"several-model server: {multi}")
        multi_logged = logged_errors(log_path, " (several models)", failures)
        if isinstance(multi, str):
            return failures
        metrics.update({"models": len(infos), "pairs": len(groups), "clients": args.clients,
                        "faulty_clients": sum(len(group.faults) for group in groups)})
        for info in infos:
            metrics[f"model_{info['name']}_load_s"] = info["load_s"]
            metrics[f"model_{info['name']}_load_rss_mib"] = info["rss_mb"]
        metrics.update({f"multi_{name}": value for name, value in multi.server_metrics().items()})
        metrics["multi_server_log_errors"] = multi_logged
        failures += [f"several-model server: {failure}" for failure in multi.failures()]

        def own(spec: ModelSpec) -> list[Group]:
            return [group for group in groups if group.model == spec.name]

        # The one-model servers side by side: all started, then all loaded at once.
        side: dict[str, Load] = {}
        log_paths = {spec.name: Path(tmp) / f"server_{spec.name}_side_by_side.log" for spec in specs}
        with contextlib.ExitStack() as servers:
            runs = []
            for spec in specs:
                server, url = servers.enter_context(started_server(one_model_arguments(spec, args), log_paths[spec.name]))
                runs.append((url, server, own(spec)))
            side_runs = asyncio.run(loads_side_by_side(runs, args.seconds, limits))
        for spec, side_run in zip(specs, side_runs):
            if (done := one_model_run(spec.name, side_run, log_paths[spec.name], "side by side", "side_by_side",
                                      failures, metrics)) is not None:
                side[spec.name] = done

        # Each one-model server alone, one after the other.
        singles: dict[str, Load] = {}
        for spec in specs:
            log_path = Path(tmp) / f"server_{spec.name}.log"
            with started_server(one_model_arguments(spec, args), log_path) as (server, url):
                single = asyncio.run(load_and_stop(url, server, own(spec), args.seconds, limits))
            if (done := one_model_run(spec.name, single, log_path, "alone", "single", failures, metrics)) is not None:
                singles[spec.name] = done

    # (metric key, ratio metric, words, the runs)
    comparisons = (("side_by_side", "p{p}_over_side_by_side", "side by side", side),
                   ("single", "p{p}_ratio", "alone", singles))
    table = []
    for group in groups:
        pair, together = f"pair_{group.pair}", multi.tallies[group.pair].latencies
        metrics.update(pair_metrics(group, multi.tallies[group.pair], pair))
        if group.model is None:
            table.append(f"pair {group.pair}: p50 {percentile_ms(together, 0.5):.1f} ms (through the pivot: no "
                         f"one-model server)")
            continue
        for key, ratio_name, words, loads in comparisons:
            other = loads.get(group.model)
            if other is None:
                table.append(f"pair {group.pair} ({group.model}): no run {words} (its one-model server failed)")
                continue
            metrics.update(pair_metrics(group, other.tallies[group.pair], f"{pair}_{key}"))
            ratios = []
            for p in (50, 90, 99):
                mine, apart = percentile_ms(together, p / 100), percentile_ms(other.tallies[group.pair].latencies, p / 100)
                metrics[f"{pair}_{ratio_name.format(p=p)}"] = round(mine / apart, 2)
                ratios.append(f"p{p} {mine:.1f} ms vs {apart:.1f} ms ({mine / apart:.2f}x)")
            table.append(f"pair {group.pair} ({group.model}), several-model server vs one-model server {words}: "
                         + ", ".join(ratios))
    if len(side) == len(specs):
        seconds = max(run.elapsed for run in side.values())
        requests = sum(run.requests for run in side.values())
        multi_rate, side_rate = multi.requests / multi.elapsed, requests / seconds
        metrics.update({"side_by_side_seconds": round(seconds, 1), "side_by_side_requests": requests,
                        "side_by_side_requests_per_s": round(side_rate, 1),
                        "requests_per_s_multi_over_side_by_side": round(multi_rate / side_rate, 2)})
        table.append(f"requests per second: {multi_rate:.1f} for the {len(specs)} models in one server, {side_rate:.1f} "
                     f"for them in {len(specs)} servers side by side ({multi_rate / side_rate:.2f}x)")
    for key, words, loads in (("side_by_side", "side by side", side), ("single", "one after the other", singles)):
        if len(loads) < len(specs):
            continue
        for when, index in (("", -1), ("_start", 0)):
            multi_mib, sum_mib = multi.memory[index] / 1024, sum(run.memory[index] for run in loads.values()) / 1024
            metrics[f"rss_mib_multi{when}"] = round(multi_mib, 1)
            metrics[f"rss_mib_sum_{key}{when}"] = round(sum_mib, 1)
            metrics[f"rss_multi_over_sum_{key}{when}"] = round(multi_mib / sum_mib, 2)
        table.append(f"memory at the end of the load: {metrics['rss_mib_multi']} MiB for the {len(specs)} models in one "
                     f"server, {metrics[f'rss_mib_sum_{key}']} MiB for them in {len(specs)} servers {words} "
                     f"({metrics[f'rss_multi_over_sum_{key}']}x)")
    runs_by_label = [("several models", multi), *((f"{name} side by side", run) for name, run in side.items()),
                     *((f"{name} alone", run) for name, run in singles.items())]
    metrics["errors_all"] = sum(sum(run.errors.values()) for _, run in runs_by_label)
    for name, value in metrics.items():
        print(f"metric={name} value={value}")
    for line in table:
        print(line)
    for label, run in runs_by_label:
        for tally in run.tallies.values():
            for error, example in tally.examples.items():
                print(f"error ({label}): {error}: {example}")
    return failures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="model file (default: train the demo model into a temporary directory)")
    parser.add_argument("--models", nargs="*", metavar="MODEL",
                        help="serve several models (what `attnmt serve` takes), then each in a server of its own, all "
                             "side by side, then one after the other, and compare; without a MODEL, build three (see above)")
    parser.add_argument("--pivot", metavar="LANG", help="with --models: the server's --pivot")
    parser.add_argument("--clients", type=int, default=50, help="all of them, the faulty ones included")
    parser.add_argument("--seconds", type=float, default=60.0, help="of load, per run (--models: the several-model "
                        "server's, the one-model servers' side by side, each one-model server's alone)")
    parser.add_argument("--beam", type=int, default=1)
    parser.add_argument("--no-attention", action="store_true", help="do not ask for the attention matrix")
    parser.add_argument("serve_args", nargs="*", help="more `attnmt serve` flags, after --")
    args = parser.parse_args()
    if args.models is not None and args.model:
        parser.error("--model is the one-model mode, --models the several-model one: give one of them")
    if args.pivot and args.models is None:
        parser.error("--pivot goes with --models")

    failures = one_model(args) if args.models is None else several_models(args)
    print(f"load check failed: {'; '.join(failures)}" if failures else "load check passed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
