"""create_app: attnmt's endpoints (/translate, /explain, /health, /model, the explorer page) and the
LibreTranslate API over the server's models, behind the server's limits, keys and rates."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import asdict
from pathlib import Path
from typing import Any, AsyncIterator, Optional, Union

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles

from ..analysis.align import alignment_method, model_aligner, translation_alignments
from ..analysis.attribution import IG_STEPS, Work, explain_or_attribute
from ..analysis.explain import FIELDS
from ..config import ServeConfig, source_languages, validate_serve
from ..documents.text import joined_nbests, segment
from ..errors import AttnmtError
from ..seam import AttentionView
from ..search import SearchSettings
from ..tokenize import Tokenizer
from ..training.metrics import METRICS_FILE, read_metrics
from ..training.timeline import TIMELINE_FILE, read_timeline
from ..translate import TextTranslator, Translation, Translator
from .access import KeyFile, RateLimits
from .batching import Batcher, model_thread
from .errors import ServeError, answer_errors
from .libretranslate import PREFIX, LibreTranslate, LibreTranslateDispatch
from .middleware import BodyLimit, Guard, ParsedBodyRoute
from .models import ModelChain, ModelSet, ServedModel
from .schemas import (
    EXPLAIN_RESPONSES,
    MODEL_RESPONSES,
    TIMELINE_RESPONSES,
    TRANSLATE_RESPONSES,
    AttributionResponse,
    ExplainRequest,
    ExplainResponse,
    Health,
    ModelInfo,
    TimelineResponse,
    TranslateRequest,
    TranslateResponse,
)

STATIC = Path(__file__).parent.parent / "static"
# Four decimals keep an attention matrix small in JSON and are more than a heatmap can show.
ATTENTION_DECIMALS = 4


def create_app(models: TextTranslator | ModelSet, limits: Optional[ServeConfig] = None, keys: Optional[KeyFile] = None
               ) -> FastAPI:
    """The ASGI app over one translator or a ModelSet: /translate, /explain, the LibreTranslate API
    (each language pair to its chain of models), /health, /model, /models, the explorer page at /
    and its /static files. With `keys`, what translates needs one of them; /health, /model(s),
    /languages and the page stay open (they tell nothing a key protects, and run no model)."""
    limits = limits or ServeConfig()
    validate_serve(limits)
    endpoints = Endpoints(models if isinstance(models, ModelSet) else ModelSet.one(models), limits)
    # FastAPI's /docs and /redoc pages load scripts from a CDN; the server must work offline.
    app = FastAPI(title="attnmt", description="Attention-based NMT: translations with their attention weights.",
                  lifespan=endpoints.lifespan, docs_url=None, redoc_url=None)
    # Run outermost first: BodyLimit bounds the body and reads it, LibreTranslateDispatch sends
    # LibreTranslate's POST /translate on (parsing the body, for either route to read), Guard then
    # sees the path that will answer.
    app.add_middleware(Guard, paths=frozenset({"/translate", "/explain", PREFIX + "/translate"}), keys=keys,
                       rates=endpoints.rates, key_field_paths=frozenset({PREFIX + "/translate"}))
    app.add_middleware(LibreTranslateDispatch)
    app.add_middleware(BodyLimit, max_bytes=limits.max_body_bytes(), timeout_s=limits.body_timeout_s)
    answer_errors(app)

    app.router.add_api_route("/translate", endpoints.translate, methods=["POST"], response_model=TranslateResponse,
                             response_model_exclude_none=True, responses=TRANSLATE_RESPONSES,
                             route_class_override=ParsedBodyRoute)
    libretranslate = LibreTranslate(endpoints.models, endpoints.decode_chains, limits, keys is not None)
    app.include_router(libretranslate.router())
    app.include_router(libretranslate.router(prefix="", with_translate=False))
    app.add_api_route("/explain", endpoints.explain_step_by_step, methods=["POST"],
                      response_model=Union[ExplainResponse, AttributionResponse], responses=EXPLAIN_RESPONSES)
    app.add_api_route("/health", endpoints.health, methods=["GET"], response_model=Health)
    app.add_api_route("/model", endpoints.model, methods=["GET"], response_model=ModelInfo, responses=MODEL_RESPONSES)
    app.add_api_route("/models", endpoints.all_models, methods=["GET"], response_model=list[ModelInfo])
    app.add_api_route("/timeline", endpoints.timeline, methods=["GET"], response_model=TimelineResponse,
                      responses=TIMELINE_RESPONSES)
    app.add_api_route("/", explorer, methods=["GET"], include_in_schema=False)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    name_the_models(app, list(endpoints.models.models))
    return app


def name_the_models(app: FastAPI, names: list[str]) -> None:
    """/openapi.json with this server's model names as the values `model` (and /model's and /timeline's `name`) may
    take, so that a client generated from it, or a fuzzer, sends names the server has."""
    describe = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:                       # the first call builds it; later ones return it
            schema = describe()
            fields = [schema["components"]["schemas"][request]["properties"]["model"]
                      for request in ("TranslateRequest", "ExplainRequest")]
            fields += [parameter["schema"] for path in ("/model", "/timeline") for parameter in
                       schema["paths"][path]["get"]["parameters"]]
            for field in fields:                             # Optional[str]: anyOf a string or null
                next(kind for kind in field["anyOf"] if kind.get("type") == "string")["enum"] = names
        return describe()

    app.openapi = openapi  # type: ignore[method-assign]


class ModelService:
    """One model behind the server: its batching queue, its aligner, the limits it enforces, and
    what /model says of it."""

    batcher: Batcher  # made by start, in the event loop the app runs in

    def __init__(self, served: ServedModel, limits: ServeConfig, names: list[str]):
        translator = served.translator
        self.translator = translator
        self.limits = limits
        self.engine = translator.engine_info().engine
        # Never let the translator cut a long input silently: refuse it instead.
        self.max_tokens = min(limits.max_tokens, translator.config.decode.max_src_len)
        # Read once, at start: what `alignments: true` links words with, and /model says.
        self.aligner = model_aligner(translator)
        self.run_folder = Path(served.path).parent        # where a training run kept its timeline, if it did
        self.info = {**model_info(translator, limits, self.max_tokens, alignment_method(translator, self.aligner)),
                     "name": served.name, "models": names,
                     "timeline": (self.run_folder / TIMELINE_FILE).is_file(),
                     "load_s": None if served.load_s is None else round(served.load_s, 3),
                     "rss_mb": None if served.rss_mb is None else round(served.rss_mb, 1)}

    def check_length(self, what: str, text: str, tokenizer: Tokenizer) -> None:
        """Refuse a text over the characters or tokens a sentence may have."""
        if len(text) > self.limits.max_chars:
            raise ServeError(413, f"{what} has {len(text)} characters; the limit is {self.limits.max_chars}")
        tokens = len(tokenizer.tokenize(text))
        if tokens > self.max_tokens:
            raise ServeError(413, f"{what} has {tokens} tokens; the limit is {self.max_tokens}")

    def settings(self, beam_size: Optional[int], n_best: int) -> SearchSettings:
        """A request's search (the request's `beam`, else the model's), refused over this server's limit."""
        try:
            settings = self.translator.settings(beam_size, n_best=n_best, names=("n_best", "beam"))
        except AttnmtError as err:
            raise ServeError(422, str(err)) from None
        if settings.beam_size > self.limits.max_beam:
            raise ServeError(422, f"beam: {settings.beam_size} is over this server's limit of {self.limits.max_beam}")
        return settings

    def fits(self, text: str) -> bool:
        """Whether a sentence is within this server's characters and the model's tokens (check_length's limits)."""
        return len(text) <= self.limits.max_chars and len(self.translator.src_tokenizer.tokenize(text)) <= self.max_tokens

    def check(self, texts: list[str]) -> None:
        """Refuse a sentence over this model's limits."""
        for i, text in enumerate(texts, 1):
            self.check_length(f"sentence {i}", text, self.translator.src_tokenizer)


class Endpoints:
    """attnmt's own endpoints over the server's models: each request's model and limits, then its batcher."""

    def __init__(self, models: ModelSet, limits: ServeConfig):
        self.models = models
        self.limits = limits
        self.rates = RateLimits(limits)
        names = list(models.models)
        self.services = {name: ModelService(served, limits, names) for name, served in models.models.items()}

    @contextlib.asynccontextmanager
    async def lifespan(self, _app: FastAPI) -> AsyncIterator[None]:
        # Each model its own queue; their calls take turns on one thread (batching.model_thread).
        thread = model_thread()
        for service in self.services.values():
            service.batcher = Batcher(service.translator, self.limits, thread)
            service.batcher.start()
        yield
        for service in self.services.values():
            await service.batcher.stop()
        thread.shutdown(wait=True)

    def service(self, name: Optional[str]) -> ModelService:
        """The model a request names (`model`), or the only one; 422 naming the models otherwise."""
        try:
            return self.services[self.models.named(name).name]
        except AttnmtError as err:
            raise ServeError(422, str(err)) from None

    def limit_sentences(self, texts: list[str]) -> None:
        if len(texts) > self.limits.max_sentences:
            raise ServeError(413, f"{len(texts)} sentences in one request; the limit is {self.limits.max_sentences}")

    def admit(self, http: Request, service: ModelService, texts: list[str]) -> None:
        """Refuse what is over a limit; a request that passes counts its sentences against its caller."""
        self.limit_sentences(texts)
        service.check(texts)
        self.rates.sentences_of(http.state.caller, len(texts))

    async def decode_chains(self, http: Request, groups: list[tuple[ModelChain, str, list[str]]], n_best: int
                            ) -> list[list[list[Translation]]]:
        """LibreTranslate's translate: each group's texts, in its source language, cut into sentences (a
        sentence over the first model's limits cut at a clause end), translated along the group's chain of
        models and joined again; checked as one request (its sentences counted once), every group queued
        at once (their calls take turns on the model thread); [group][text][rank]."""
        documents = [[segment(text, language, self.services[chain.models[0].name].fits) for text in texts]
                     for chain, language, texts in groups]
        sentences = [[sentence for document in group for sentence in document.sentences] for group in documents]
        self.limit_sentences([sentence for group in sentences for sentence in group])
        for (chain, _, _), group in zip(groups, sentences):
            first = self.services[chain.models[0].name]
            first.check(group)
            leg_search(first, chain, 0, n_best)
        self.rates.sentences_of(http.state.caller, sum(len(group) for group in sentences))
        decoded = await asyncio.gather(*(self.along(chain, group, n_best)
                                         for (chain, _, _), group in zip(groups, sentences)))
        return [joined_nbests(group, nbests, n_best) for group, nbests in zip(documents, decoded)]

    async def along(self, chain: ModelChain, texts: list[str], n_best: int) -> list[list[Translation]]:
        """The n_best of each text by the chain's one model, or the first model's best translation
        translated again by the second (its n_best); the texts already checked for the first."""
        for leg, model in enumerate(chain.models):
            service = self.services[model.name]
            settings = leg_search(service, chain, leg, n_best)
            if leg > 0:
                service.check(texts)
            nbests = await service.batcher.translate(texts, settings)
            texts = [nbest[0].text for nbest in nbests]
        return nbests

    async def translate(self, request: TranslateRequest, http: Request) -> JSONResponse:
        """Translate one text or several; concurrent requests are decoded together. A text is translated
        a line a sentence, or, with `split`, cut into sentences (a sentence over the limits cut at a clause
        end), each sentence on its own; a text of several is answered as one result, its sentences joined
        (documents.text.Segmented.join)."""
        service = self.service(request.model)
        if request.texts is not None:
            texts = request.texts
        else:
            assert request.text is not None                                 # _one_input: one of the two is given
            texts = [request.text]
        settings = service.settings(request.beam, request.n_best)
        language = service.translator.source_languages()[0] if request.split else None
        documents = [segment(text, language, service.fits if request.split else None) for text in texts]
        if request.maps and any(len(document.spans) > 1 for document in documents):
            raise ServeError(422, "maps: a text of several sentences has no one set of maps; send its sentences as "
                                  "`texts`")
        if request.alignments and any(len(document.spans) > 1 for document in documents):
            raise ServeError(422, "alignments: a text of several sentences is aligned sentence by sentence; send its "
                                  "sentences as `texts`")
        if request.alignments and not service.translator.explains:     # an engine without the model's weights
            raise ServeError(501, f"this model decodes with {service.engine}, which cannot align words: serve the "
                                  f"model file (.safetensors) for alignments")
        sentences = [sentence for document in documents for sentence in document.sentences]
        self.admit(http, service, sentences)
        nbests = joined_nbests(documents, await service.batcher.translate(sentences, settings), request.n_best)
        maps = await service.batcher.maps([nbest[0] for nbest in nbests]) if request.maps else [None] * len(nbests)
        results = [_sentence(nbest, request.attention, request.n_best, sentence_maps)
                   for nbest, sentence_maps in zip(nbests, maps)]
        if request.alignments:
            alignments = await self.alignments(service, texts, [n[0].text for n in nbests])
            for result, alignment in zip(results, alignments, strict=True):
                result["alignment"] = alignment
        # Built to match TranslateResponse (the tests check it) and sent as is: validating attention
        # matrices again on the way out costs the event loop more than the model call under load.
        return JSONResponse({"results": results, "beam": settings.beam_size, "n_best": request.n_best})

    async def alignments(self, service: ModelService, sources: list[str], translations: list[str]
                         ) -> list[dict[str, Any]]:
        """Each sentence's word alignment with its translation (TranslateRequest.alignments), on the model's thread."""
        translator = service.translator
        assert isinstance(translator, Translator)                           # explains: attnmt's own engine

        def work() -> list[dict[str, Any]]:
            try:
                method, alignments = translation_alignments(translator, service.aligner, sources, translations)
            except AttnmtError as err:
                raise ServeError(422, f"alignments: {err}") from None
            return [{"method": method, "source_words": a.source_words, "target_words": a.target_words,
                     "links": [list(link) for link in a.links]} for a in alignments]

        return await service.batcher.run(work, "the alignments")

    async def explain_step_by_step(self, request: ExplainRequest, http: Request) -> dict[str, Any]:
        """Every number of each greedy decoding step of one sentence, or with `attribution` how much
        each source word decides each step (attnmt explain [--attribution] --json)."""
        service = self.service(request.model)
        translator = service.translator
        if not translator.explains:
            raise ServeError(501, f"this model decodes with {service.engine}, which gives no per-step numbers: serve "
                                  f"the model file (.safetensors) to explain")
        if request.target is not None:
            service.check_length("target", request.target, translator.tgt_tokenizer)
        ig_steps = request.ig_steps or IG_STEPS
        if request.attribution == "ig" and ig_steps > self.limits.max_ig_steps:
            raise ServeError(422, f"ig_steps: {ig_steps} is over this server's limit of {self.limits.max_ig_steps} "
                                  f"(attnmt serve --max-ig-steps)")
        self.admit(http, service, [request.text])
        view = AttentionView(request.attention, request.layer, request.head)

        def work() -> dict[str, Any]:
            try:
                return explain_or_attribute(translator, request.text, view, request.step, request.attribution,
                                            request.target, request.contrast, request.ig_steps,
                                            afford=self.afford, naming=FIELDS).to_dict()
            except AttnmtError as err:
                raise ServeError(422, str(err)) from None

        return await service.batcher.run(work, "the attribution" if request.attribution else "the explanation")

    def afford(self, work: Work) -> None:
        """Refuse an attribution over the server's bound on its work."""
        if work.units > self.limits.max_attribution_work:
            raise ServeError(422, f"this attribution runs {work}, over this server's limit of "
                                  f"{self.limits.max_attribution_work} (attnmt serve --max-attribution-work): ask "
                                  f"for one step, fewer ig_steps or a shorter sentence")

    async def health(self) -> dict[str, Any]:
        batchers = [service.batcher for service in self.services.values()]
        return {"status": "ok", "queued": sum(b.queue.qsize() for b in batchers),
                "model_calls": sum(b.model_calls for b in batchers), "sentences": sum(b.sentences for b in batchers)}

    async def model(self, name: Optional[str] = None) -> dict[str, Any]:
        """What the server translates with, and its limits: the model `name`, else the first (its
        `models` names them all)."""
        return self.service(name).info if name is not None else self.services[self.models.first.name].info

    async def all_models(self) -> list[dict[str, Any]]:
        """What /model says of each model, in the order they were given."""
        return [service.info for service in self.services.values()]

    async def timeline(self, name: Optional[str] = None) -> dict[str, Any]:
        """How the attention of the sentences its training run watched formed (the model `name`, else the
        first): read at each request, so that a run still training adds its new points."""
        service = self.service(name) if name is not None else self.services[self.models.first.name]
        try:
            points = await asyncio.to_thread(read_timeline, service.run_folder)
        except AttnmtError as err:
            raise ServeError(404, str(err)) from None
        metrics = service.run_folder / METRICS_FILE
        curve = [{"step": r["step"], "valid_loss": r["valid_loss"]} for r in (read_metrics(metrics) if metrics.is_file()
                                                                              else []) if "valid_loss" in r]
        last = points[-1].sentences
        return {"name": service.info["name"], "sources": [s.source for s in last],
                "source_tokens": [s.source_tokens for s in last], "curve": curve,
                "points": [{"step": p.step, "epoch": p.epoch, "valid_loss": p.valid_loss,
                            "sentences": [{"tokens": s.tokens, "text": s.text, "attention": _rounded(s.shown()),
                                           "aer": s.aer} for s in p.sentences]} for p in points]}


def leg_search(service: ModelService, chain: ModelChain, leg: int, n_best: int) -> SearchSettings:
    """The search of one model of a chain: the last gives n_best, a pivot leg its best; the model's beam,
    widened to the n-best asked for."""
    wanted = n_best if leg == len(chain.models) - 1 else 1
    return service.settings(max(service.translator.settings().beam_size, wanted), wanted)


async def explorer() -> FileResponse:
    return FileResponse(STATIC / "index.html")


def model_info(translator: TextTranslator, limits: ServeConfig, max_tokens: int, alignments: Optional[str]
               ) -> dict[str, Any]:
    """What GET /model answers (ModelInfo); `alignments`: how the server aligns words (align.alignment_method)."""
    decode, engine = translator.config.decode, translator.engine_info()
    config = translator.config
    return {"src_lang": config.data.src_lang, "source_languages": source_languages(config.data),
            "tgt_lang": config.data.tgt_lang, "arch": config.model.arch, "tokenizer": config.tokenizer.level,
            "beam_size": decode.beam_size, **asdict(engine), "explains": translator.explains,
            "start_token": translator.start_token,
            "alignments": alignments,
            "limits": {**asdict(limits), "max_tokens": max_tokens}}


def _hypothesis(translation: Translation, attention: bool) -> dict[str, Any]:
    result: dict[str, Any] = {"translation": translation.text, "tokens": translation.tokens,
                              "score": round(translation.log_prob, ATTENTION_DECIMALS),
                              "confidence": round(translation.confidence, ATTENTION_DECIMALS)}
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
