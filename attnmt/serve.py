"""`attnmt serve`: translations over HTTP, batched across requests, with limits and the attention explorer."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import ipaddress
import signal
import socket
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Literal, Mapping, Optional

import numpy as np
import torch
import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field, model_validator
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from .access import Caller, KeyFile, RateLimited, RateLimits
from .config import ServeConfig, source_languages, validate_serve
from .errors import AttnmtError
from .explain import explain
from .families.seam import AttentionView
from .libretranslate import PREFIX, LibreTranslateError, RouteLibreTranslate, body_fields, buffered, libretranslate_router
from .translate import TextTranslator, Translation, lines_of, texts_of

STATIC = Path(__file__).parent / "static"
# Four decimals keep an attention matrix small in JSON and are more than a heatmap can show.
ATTENTION_DECIMALS = 4


class TranslateRequest(BaseModel):
    """One sentence (`text`) or several (`texts`), and how to decode them."""

    model_config = ConfigDict(extra="forbid", strict=True)

    text: Optional[str] = Field(None, description="one sentence")
    texts: Optional[list[str]] = Field(None, min_length=1, description="several sentences, answered in order")
    beam: Optional[int] = Field(None, ge=1, description="beam size, 1 = greedy (default: the model's decode.beam_size)")
    n_best: int = Field(1, ge=1, description="translations per sentence, best first; at most `beam`")
    attention: bool = Field(False, description="include the attention weights of each translation")
    maps: bool = Field(False, description="include every attention map of each sentence's best translation: "
                                          "cross, and the Transformer's encoder and decoder self-attention")

    @model_validator(mode="after")
    def _one_input(self) -> "TranslateRequest":
        if (self.text is None) == (self.texts is None):
            raise ValueError("give exactly one of `text` (a string) or `texts` (a list of strings)")
        return self


class Hypothesis(BaseModel):
    translation: str
    tokens: list[str] = Field(description="output tokens, end of sentence left out")
    score: float = Field(description="log-probability of the output, end of sentence included")
    attention: Optional[list[list[float]]] = Field(
        None, description="[len(tokens)][len(source_tokens)] weights; only when asked for and the model has attention")


class SentenceResult(Hypothesis):
    source_tokens: list[str] = Field(description="the tokens the model read")
    maps: Optional[dict[str, list[list[list[list[float]]]]]] = Field(
        None, description="when asked for: name -> [layers][heads][queries][keys] (Translator.attention_maps); "
                          "cross [..][len(tokens)][len(source_tokens)], encoder [..][len(source_tokens)]"
                          "[len(source_tokens)], decoder [..][len(tokens)][len(tokens)] over <sos> and the "
                          "tokens before each")
    nbest: Optional[list[Hypothesis]] = Field(None, description="when n_best > 1: the n_best translations, best first")


class TranslateResponse(BaseModel):
    results: list[SentenceResult] = Field(description="one per input sentence, in order")
    beam: int
    n_best: int


class ErrorResponse(BaseModel):
    error: str = Field(description="what was wrong, in one line")


class Health(BaseModel):
    status: str
    queued: int = Field(description="requests waiting for the model")
    model_calls: int = Field(description="model calls so far; concurrent requests share calls")
    sentences: int = Field(description="sentences translated so far")


class ExplainRequest(BaseModel):
    """One sentence to translate greedily and explain step by step (attnmt explain)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    text: str = Field(description="one sentence")
    attention: Literal["cross", "decoder"] = Field("cross", description="cross: output over source; decoder: a "
                                                                         "Transformer's self-attention")
    layer: Optional[int] = Field(None, ge=1, description="Transformer: the decoder layer, from 1 (default: the last)")
    head: Optional[int] = Field(None, ge=1, description="Transformer: the head, from 1 (default: 1)")


class ExplainedStepResult(BaseModel):
    step: int
    token: str = Field(description="the token this step chose (<eos> at the end)")
    keys: list[str] = Field(description="what the query looked at: source tokens, or <sos> and the outputs so far")
    scores: list[Optional[float]] = Field(description="score e_j per key; null where masked")
    weights: list[float] = Field(description="softmax of the scores (times `factors` for local-p)")
    shares: list[float] = Field(description="each key's share of the context vector, |α_j v_j| / Σ_k |α_k v_k|")
    next: list[tuple[str, float]] = Field(description="the 5 likeliest next tokens and their probabilities")
    next_uniform: list[tuple[str, float]] = Field(
        description="the same when the attention over the source is uniform (a counterfactual)")
    factors: Optional[list[float]] = Field(
        default=None, description="local-p attention only: the Gaussian factor of each key, α_j = softmax(e)_j × factor_j")


class ExplainResponse(BaseModel):
    source_tokens: list[str]
    output_tokens: list[str] = Field(description="the greedy translation")
    attention: str
    layer: Optional[int]
    head: Optional[int]
    score_function: str
    steps: list[ExplainedStepResult]


class ModelInfo(BaseModel):
    src_lang: str = Field(description="data.src_lang: the source side of the training files")
    source_languages: list[str] = Field(description="the languages the model reads (data.source_languages, "
                                                    "or src_lang)")
    tgt_lang: str
    arch: str = Field(description="the model family: rnn or transformer")
    architecture: dict[str, int | str | bool] = Field(description="the family's sizes and kinds (model.describe())")
    rnn: Optional[str] = Field(None, description="rnn family: gru or lstm")
    decoder: Optional[str] = Field(None, description="rnn family: the decoder order, bahdanau or luong")
    attention: str = Field(description="bahdanau, concat, dot, general, or none (no attention weights); "
                                       "multihead for the transformer")
    tokenizer: str
    src_vocab_size: int
    tgt_vocab_size: int
    beam_size: int = Field(description="the beam used when a request names none")
    precision: str = Field(description="what decoding runs in here: fp32, bf16 or int8 (`auto` resolved)")
    engine: str = Field(description="what decodes: attnmt (its own engine) or ctranslate2 (an exported model)")
    explains: bool = Field(description="whether /explain can open the decoding steps (attnmt's own engine)")
    # A list, not a tuple: FastAPI writes a tuple's schema in a form OpenAPI 3.1 does not allow.
    maps: dict[str, list[int]] = Field(description="the attention maps `maps: true` returns, name -> "
                                                   "[layers, heads]; none without attention")
    limits: dict[str, int | float] = Field(description="the server's limits (ServeConfig), max_tokens as enforced")


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorResponse, "description": "malformed JSON or Content-Length"},
    401: {"model": ErrorResponse, "description": "no API key, on a server with keys (--api-keys)"},
    403: {"model": ErrorResponse, "description": "an API key this server does not know"},
    408: {"model": ErrorResponse, "description": "a body that took longer than the server's body timeout to arrive"},
    411: {"model": ErrorResponse, "description": "a body without Content-Length"},
    413: {"model": ErrorResponse, "description": "over a size limit (body, sentences, characters, tokens)"},
    415: {"model": ErrorResponse, "description": "a body that is not sent as application/json"},
    422: {"model": ErrorResponse, "description": "a field missing or of the wrong type, or options out of range"},
    429: {"model": ErrorResponse, "description": "over a rate limit; retry after the seconds in Retry-After",
          "headers": {"Retry-After": {"description": "seconds", "schema": {"type": "integer"}}}},
    503: {"model": ErrorResponse, "description": "the request queue is full; retry later"},
    504: {"model": ErrorResponse, "description": "the request took longer than the server's timeout"},
}


class ServeError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def error_response(status: int, message: str, headers: Optional[Mapping[str, str]] = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def rate_limited(err: RateLimited) -> JSONResponse:
    return error_response(429, str(err), {"Retry-After": str(err.retry_after)})


@dataclass
class _Job:
    texts: list[str]
    beam: int
    n_best: int
    future: asyncio.Future


class Batcher:
    """Queued requests in, one model call per group of requests with the same beam and n_best."""

    def __init__(self, translator: TextTranslator, limits: ServeConfig):
        self.translator = translator
        self.limits = limits
        self.queue: asyncio.Queue[_Job] = asyncio.Queue(limits.queue_size)
        # One thread and one worker task: the model is never called from two threads at once.
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="attnmt-model")
        self.model_calls = 0
        self.sentences = 0
        self.task: Optional[asyncio.Task] = None

    def start(self) -> None:
        self.task = asyncio.create_task(self._work())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        self.executor.shutdown(wait=True)

    async def translate(self, texts: list[str], beam: int, n_best: int) -> list[list[Translation]]:
        future = asyncio.get_running_loop().create_future()
        try:
            self.queue.put_nowait(_Job(texts, beam, n_best, future))
        except asyncio.QueueFull:
            raise ServeError(503, f"the server is busy: {self.limits.queue_size} requests are waiting; "
                                  "retry later") from None
        try:
            # On timeout the future is cancelled, so the worker skips the job if it has not started it.
            return await asyncio.wait_for(future, self.limits.timeout_s)
        except asyncio.TimeoutError:
            raise ServeError(504, f"the translation took longer than {self.limits.timeout_s:g} s") from None

    async def run(self, work: Callable[[], Any], what: str) -> Any:
        """`work()` on the model's thread, within the timeout."""
        future = asyncio.get_running_loop().run_in_executor(self.executor, work)
        try:
            return await asyncio.wait_for(future, self.limits.timeout_s)
        except asyncio.TimeoutError:
            raise ServeError(504, f"{what} took longer than {self.limits.timeout_s:g} s") from None

    async def maps(self, translations: list[Translation]) -> list[dict[str, np.ndarray]]:
        """Every attention map of each translation (none for an empty one), on the model's thread."""
        return await self.run(lambda: [self.translator.attention_maps(t) if t.tokens and t.source_tokens else {}
                                       for t in translations], "the attention maps")

    def _drain(self, jobs: list[_Job]) -> None:
        while sum(len(job.texts) for job in jobs) < self.limits.max_batch and not self.queue.empty():
            jobs.append(self.queue.get_nowait())

    async def _work(self) -> None:
        while True:
            jobs = [await self.queue.get()]
            self._drain(jobs)
            if self.queue.empty() and self.limits.batch_window_ms > 0:
                await asyncio.sleep(self.limits.batch_window_ms / 1000)  # let stragglers join this call
                self._drain(jobs)
            groups: dict[tuple[int, int], list[_Job]] = {}
            for job in jobs:
                if not job.future.done():
                    groups.setdefault((job.beam, job.n_best), []).append(job)
            for (beam, n_best), group in groups.items():
                await self._decode(group, beam, n_best)

    async def _decode(self, group: list[_Job], beam: int, n_best: int) -> None:
        texts = [text for job in group for text in job.texts]
        loop = asyncio.get_running_loop()
        try:
            results = await loop.run_in_executor(self.executor, self._call_model, texts, beam, n_best)
        except Exception as err:  # a failed call fails its requests, not the server
            for job in group:
                if not job.future.done():
                    job.future.set_exception(err)
            return
        self.model_calls += 1
        self.sentences += len(texts)
        start = 0
        for job in group:
            if not job.future.done():
                job.future.set_result(results[start: start + len(job.texts)])
            start += len(job.texts)

    def _call_model(self, texts: list[str], beam: int, n_best: int) -> list[list[Translation]]:
        with torch.inference_mode():
            return self.translator.translate_nbest(texts, n_best, beam)


class BodyLimit:
    """Refuse a body over the limit before reading it (413) and one of unknown length (411); read the
    rest whole within `timeout_s`, or answer 408 and close the connection; pass nothing on from a
    client that leaves half-way through its body (no one is left to answer)."""

    def __init__(self, app: ASGIApp, max_bytes: int, timeout_s: float):
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        length = headers.get(b"content-length")
        problem = None
        if length is None and b"transfer-encoding" in headers:
            problem = error_response(411, "send the body with a Content-Length header")
        elif length is not None and not length.isdigit():
            problem = error_response(400, "Content-Length is not a number")
        elif length is not None and int(length) > self.max_bytes:
            problem = error_response(413, f"the body has {int(length)} bytes; the limit is {self.max_bytes}")
        elif length is not None and int(length) > 0:
            try:
                body, receive = await asyncio.wait_for(buffered(receive), self.timeout_s)
            except asyncio.TimeoutError:
                problem = error_response(408, f"the body did not arrive within {self.timeout_s:g} s",
                                         {"Connection": "close"})
            else:
                if len(body) < int(length):  # the client went away
                    return
        if problem is not None:
            await problem(scope, receive, send)
            return
        await self.app(scope, receive, send)


class Guard:
    """The API keys and request rate of the POSTs that translate (`paths`), checked before a body
    is parsed; the caller goes on in the request's state, for the sentence rate (create_app's
    check). Other methods pass, to be answered 405 as on a server without keys."""

    def __init__(self, app: ASGIApp, paths: frozenset[str], keys: Optional[KeyFile], rates: RateLimits):
        self.app = app
        self.paths = paths
        self.keys = keys
        self.rates = rates

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in self.paths:
            await self.app(scope, receive, send)
            return
        if self.keys is None:
            address = scope["client"][0] if scope.get("client") else "an unknown address"
            caller = Caller(f"address {address}", address)
        else:
            presented, receive = await self._presented(scope, receive)
            if not presented:
                where = " or the api_key field" if scope["path"].startswith(PREFIX + "/") else ""
                await error_response(401, f"this server needs an API key: send it as Authorization: Bearer KEY{where}",
                                     {"WWW-Authenticate": "Bearer"})(scope, receive, send)
                return
            known = self.keys.identify(presented) if isinstance(presented, str) else None
            if known is None:
                await error_response(403, "this API key is not valid here")(scope, receive, send)
                return
            caller = known
        try:
            self.rates.request(caller)
        except RateLimited as err:
            await rate_limited(err)(scope, receive, send)
            return
        scope.setdefault("state", {})["caller"] = caller
        await self.app(scope, receive, send)

    @staticmethod
    async def _presented(scope: Scope, receive: Receive) -> tuple[Any, Receive]:
        """The key a request carries: its Bearer token, or LibreTranslate's api_key field (any JSON value)."""
        authorization = dict(scope["headers"]).get(b"authorization")
        if authorization is not None:
            scheme, _, key = authorization.decode("latin-1").strip().partition(" ")
            return (key.strip() if scheme.lower() == "bearer" else None), receive
        if scope["path"].startswith(PREFIX + "/"):
            body, receive = await buffered(receive)
            return body_fields(scope, body).get("api_key"), receive
        return None, receive


def _validation_message(request: Request, err: RequestValidationError) -> tuple[int, str]:
    if "json" not in request.headers.get("content-type", ""):
        return 415, "send the body as JSON, with Content-Type: application/json"
    errors = err.errors()
    if any(e["type"] == "json_invalid" for e in errors):
        detail = next(e for e in errors if e["type"] == "json_invalid").get("ctx", {}).get("error", "")
        return 400, f"malformed JSON: {detail}".rstrip(": ")
    parts = []
    for e in errors[:3]:
        where = ".".join(str(p) for p in e["loc"] if p != "body")
        if not where and e["type"] == "model_attributes_type":
            parts.append("the body must be a JSON object")
        else:
            parts.append(f"{where or 'body'}: {e['msg'].removeprefix('Value error, ')}")
    return 422, "; ".join(parts)


def _hypothesis(translation: Translation, attention: bool) -> dict[str, Any]:
    result: dict[str, Any] = {"translation": translation.text, "tokens": translation.tokens,
                              "score": round(translation.log_prob, ATTENTION_DECIMALS)}
    if attention and translation.attention is not None:
        result["attention"] = _rounded(translation.attention)
    return result


def _sentence(nbest: list[Translation], attention: bool, n_best: int,
              maps: Optional[dict[str, np.ndarray]] = None) -> dict[str, Any]:
    result = {**_hypothesis(nbest[0], attention), "source_tokens": nbest[0].source_tokens}
    if n_best > 1:
        result["nbest"] = [_hypothesis(h, attention) for h in nbest]
    if maps is not None:
        result["maps"] = {name: _rounded(weights) for name, weights in maps.items()}
    return result


def _rounded(weights: np.ndarray) -> list:
    """Weights with ATTENTION_DECIMALS decimals as JSON writes them: rounded in float64, because
    the float32 nearest 0.0001 is written as 9.999999747378752e-05."""
    return weights.astype(np.float64).round(ATTENTION_DECIMALS).tolist()


def create_app(translator: TextTranslator, limits: Optional[ServeConfig] = None, keys: Optional[KeyFile] = None) -> FastAPI:
    """The ASGI app: /translate, /explain, the LibreTranslate API, /health, /model, the explorer page
    at / and its /static files. With `keys`, what translates needs one of them; /health, /model,
    /languages and the page stay open (they tell nothing a key protects, and run no model)."""
    limits = limits or ServeConfig()
    validate_serve(limits)
    rates = RateLimits(limits)
    decode = translator.config.decode
    engine = translator.engine_info()
    # Never let the translator cut a long input silently: refuse it instead.
    max_tokens = min(limits.max_tokens, decode.max_src_len)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.batcher = Batcher(translator, limits)
        app.state.batcher.start()
        yield
        await app.state.batcher.stop()

    # FastAPI's /docs and /redoc pages load scripts from a CDN; the server must work offline.
    app = FastAPI(title="attnmt", description="Attention-based NMT: translations with their attention weights.",
                  lifespan=lifespan, docs_url=None, redoc_url=None)
    # Run outermost first: BodyLimit bounds the body and reads it, RouteLibreTranslate sends
    # LibreTranslate's POST /translate on, Guard then sees the path that will answer.
    app.add_middleware(Guard, paths=frozenset({"/translate", "/explain", PREFIX + "/translate"}), keys=keys,
                       rates=rates)
    app.add_middleware(RouteLibreTranslate)
    app.add_middleware(BodyLimit, max_bytes=limits.max_body_bytes(), timeout_s=limits.body_timeout_s)

    @app.exception_handler(ServeError)
    async def _serve_error(_request: Any, err: ServeError) -> JSONResponse:
        return error_response(err.status, err.message)

    @app.exception_handler(RateLimited)
    async def _rate_limited(_request: Any, err: RateLimited) -> JSONResponse:
        return rate_limited(err)

    @app.exception_handler(LibreTranslateError)
    async def _libretranslate_error(_request: Any, err: LibreTranslateError) -> JSONResponse:
        return error_response(400, str(err))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, err: RequestValidationError) -> JSONResponse:
        return error_response(*_validation_message(request, err))

    @app.exception_handler(HTTPException)
    async def _http_error(_request: Any, err: HTTPException) -> JSONResponse:
        # The headers too: a 405 says which methods the path has (Allow), as RFC 9110 asks.
        return error_response(err.status_code, str(err.detail), err.headers)

    def check(http: Request, texts: list[str], beam: int, n_best: int) -> None:
        """Refuse what is over a limit; a request that passes counts its sentences against its caller."""
        if len(texts) > limits.max_sentences:
            raise ServeError(413, f"{len(texts)} sentences in one request; the limit is {limits.max_sentences}")
        for i, text in enumerate(texts, 1):
            if len(text) > limits.max_chars:
                raise ServeError(413, f"sentence {i} has {len(text)} characters; the limit is {limits.max_chars}")
            tokens = len(translator.src_tokenizer.tokenize(text))
            if tokens > max_tokens:
                raise ServeError(413, f"sentence {i} has {tokens} tokens; the limit is {max_tokens}")
        if beam > limits.max_beam:
            raise ServeError(422, f"beam: {beam} is over this server's limit of {limits.max_beam}")
        if n_best > beam:
            raise ServeError(422, f"n_best: {n_best} is more than the beam ({beam})")
        rates.sentences_of(http.state.caller, len(texts))

    @app.post("/translate", response_model=TranslateResponse, response_model_exclude_none=True,
              responses=ERROR_RESPONSES)
    async def translate(request: TranslateRequest, http: Request) -> JSONResponse:
        """Translate one sentence or several; concurrent requests are decoded together. A text of several
        lines is translated line by line and answered as one result, its lines joined (translate.join_lines)."""
        if request.texts is not None:
            texts = request.texts
        else:
            assert request.text is not None                                 # _one_input: one of the two is given
            texts = [request.text]
        beam = request.beam or decode.beam_size
        # Each line of a text is a sentence, as on LibreTranslate's path: translated on its own, then joined.
        counts, lines = lines_of(texts)
        if request.maps and max(counts) > 1:
            raise ServeError(422, "maps: a text of several lines has no one set of maps; send its lines as `texts`")
        check(http, lines, beam, request.n_best)
        nbests = texts_of(counts, await app.state.batcher.translate(lines, beam, request.n_best), request.n_best)
        maps = await app.state.batcher.maps([nbest[0] for nbest in nbests]) if request.maps else [None] * len(nbests)
        # Built to match TranslateResponse (the tests check it) and sent as is: validating attention
        # matrices again on the way out costs the event loop more than the model call under load.
        return JSONResponse({"results": [_sentence(nbest, request.attention, request.n_best, sentence_maps)
                                         for nbest, sentence_maps in zip(nbests, maps)],
                             "beam": beam, "n_best": request.n_best})

    async def decode_nbest(http: Request, texts: list[str], beam: int, n_best: int) -> list[list[Translation]]:
        check(http, texts, beam, n_best)
        return await app.state.batcher.translate(texts, beam, n_best)

    app.include_router(libretranslate_router(translator, decode_nbest, limits, keys is not None,
                                             responses=ERROR_RESPONSES))
    app.include_router(libretranslate_router(translator, decode_nbest, limits, keys is not None, prefix="",
                                             with_translate=False, responses=ERROR_RESPONSES))

    @app.post("/explain", response_model=ExplainResponse, responses={
        **ERROR_RESPONSES, 501: {"model": ErrorResponse, "description": "this server's engine (CTranslate2) gives no "
                                                                          "per-step numbers"}})
    async def explain_step_by_step(request: ExplainRequest, http: Request) -> dict[str, Any]:
        """Every number of each greedy decoding step of one sentence (attnmt explain --json)."""
        if not translator.explains:
            raise ServeError(501, f"this server decodes with {engine.engine}, which gives no per-step numbers: serve "
                                  f"the model file (.safetensors) to explain")
        check(http, [request.text], 1, 1)
        view = AttentionView(request.attention, request.layer, request.head)

        def work() -> dict[str, Any]:
            try:
                return explain(translator, request.text, view).to_dict()
            except AttnmtError as err:
                raise ServeError(422, str(err)) from None

        return await app.state.batcher.run(work, "the explanation")

    @app.get("/health", response_model=Health)
    async def health() -> dict[str, Any]:
        batcher: Batcher = app.state.batcher
        return {"status": "ok", "queued": batcher.queue.qsize(), "model_calls": batcher.model_calls,
                "sentences": batcher.sentences}

    config = translator.config
    rnn = config.model.arch == "rnn"
    info = {"src_lang": config.data.src_lang, "source_languages": source_languages(config.data),
            "tgt_lang": config.data.tgt_lang, "arch": config.model.arch,
            "rnn": config.model.rnn if rnn else None, "decoder": config.model.decoder if rnn else None,
            "attention": config.model.attention if rnn else "multihead", "tokenizer": config.tokenizer.level,
            "beam_size": decode.beam_size, **asdict(engine), "explains": translator.explains,
            "limits": {**asdict(limits), "max_tokens": max_tokens}}

    @app.get("/model", response_model=ModelInfo)
    async def model() -> dict[str, Any]:
        """What the server translates with, and its limits."""
        return info

    @app.get("/", include_in_schema=False)
    async def explorer() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


def logging_config(access_log: bool) -> dict[str, Any]:
    """uvicorn's logging: its warnings and errors on stderr; with `access_log`, its access log on stdout,
    one line a request with the client's address and port, the request line and the status."""
    config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    config["loggers"]["uvicorn"]["level"] = config["loggers"]["uvicorn.error"]["level"] = "WARNING"
    if not access_log:
        config["loggers"]["uvicorn.access"]["handlers"] = []
    return config


def serve(translator: TextTranslator, host: str, port: int, limits: ServeConfig, log: Callable[[str], None] = print,
          name: str = "the model", keys: Optional[KeyFile] = None, access_log: bool = True) -> None:
    """Serve the translator's model (`name` in the log) until SIGTERM or SIGINT: the requests in flight
    are answered, then serve() returns (SIGTERM) or raises KeyboardInterrupt (SIGINT). Port 0 picks a
    free port (printed). With `keys`, translating needs a key; SIGHUP reads the key file again. With
    `access_log`, each request is logged on stdout (uvicorn's access log)."""
    validate_serve(limits)
    note = translator.precision_note()
    if note:
        log(f"attnmt serve: {note}")
    app = create_app(translator, limits, keys)
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)  # from now on connections wait for uvicorn instead of being refused
    except (OSError, OverflowError) as err:
        sock.close()
        raise AttnmtError(f"cannot listen on {host}:{port}: {getattr(err, 'strerror', None) or err}") from None
    bound = ipaddress.ip_address(sock.getsockname()[0])
    if keys is None and not bound.is_loopback:
        print(f"attnmt: warning: listening on {host} without --api-keys: the server is open to anyone who can "
              f"reach it", file=sys.stderr, flush=True)
    shown = f"[{host}]" if ":" in host else host
    log(f"attnmt serve: {name} on http://{shown}:{sock.getsockname()[1]}/ (Ctrl-C stops)")
    if keys is not None:
        log(f"attnmt serve: API keys read from {keys.path}: {len(keys.keys)}; translating needs one")
    # Idle connections stay open longer than clients keep them (httpx: 5 s), so the client is the one
    # that closes them: otherwise a request sent as the server closes its connection fails.
    # uvicorn's proxy_headers (on) takes the client address from X-Forwarded-For when the connection
    # comes from FORWARDED_ALLOW_IPS (127.0.0.1 unless set): a reverse proxy's clients get their own rates.
    # log_level None: uvicorn keeps the levels of logging_config (warnings, and the access log's lines).
    server = uvicorn.Server(uvicorn.Config(app, log_config=logging_config(access_log), log_level=None,
                                           access_log=access_log, timeout_keep_alive=75))
    # uvicorn stops on SIGTERM once the requests in flight are answered, then raises the signal again
    # for the handler it found (attnmt's CLI: exit 143, as for a killed training run). That stop is
    # the end of serving, not a failure: with uvicorn's own handler found, serve() returns, and a
    # SIGTERM just before uvicorn starts listening for it stops the server too. uvicorn handles
    # SIGINT and SIGTERM, not SIGHUP, which reads the key file again.
    handlers: dict[int, Callable[[int, Any], None]] = {signal.SIGTERM: server.handle_exit}
    if keys is not None and hasattr(signal, "SIGHUP"):
        handlers[signal.SIGHUP] = lambda _signum, _frame: keys.reload()
    # Only the main thread may set a handler.
    main_thread = threading.current_thread() is threading.main_thread()
    previous = {signum: signal.signal(signum, handler) for signum, handler in handlers.items()} if main_thread else {}
    try:
        server.run(sockets=[sock])
    finally:
        for signum, handler in previous.items():
            if handler is not None:  # None: not set by Python
                signal.signal(signum, handler)
