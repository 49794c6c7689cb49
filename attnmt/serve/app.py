"""create_app: attnmt's routes (/translate, /explain, /health, /model, the explorer page) and the
LibreTranslate API over one translator, behind the server's limits, keys and rates."""

from __future__ import annotations

import contextlib
from dataclasses import asdict
from pathlib import Path
from typing import Any, AsyncIterator, Optional, Union

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles

from ..access import KeyFile, RateLimits
from ..align import alignment_method, model_aligner, translation_alignments
from ..attribution import IG_STEPS, Work, explain_or_attribute
from ..config import ServeConfig, source_languages, validate_serve
from ..errors import AttnmtError
from ..explain import FIELDS
from ..seam import AttentionView
from ..tokenize import Tokenizer
from ..translate import TextTranslator, Translation, Translator, lines_of, texts_of
from .batching import Batcher
from .errors import ServeError, answer_errors
from .libretranslate import PREFIX, LibreTranslate, RouteLibreTranslate
from .middleware import BodyLimit, Guard, ParsedBodyRoute
from .schemas import (
    EXPLAIN_RESPONSES,
    TRANSLATE_RESPONSES,
    AttributionResponse,
    ExplainRequest,
    ExplainResponse,
    Health,
    ModelInfo,
    TranslateRequest,
    TranslateResponse,
)

STATIC = Path(__file__).parent.parent / "static"
# Four decimals keep an attention matrix small in JSON and are more than a heatmap can show.
ATTENTION_DECIMALS = 4


def create_app(translator: TextTranslator, limits: Optional[ServeConfig] = None, keys: Optional[KeyFile] = None) -> FastAPI:
    """The ASGI app: /translate, /explain, the LibreTranslate API, /health, /model, the explorer page
    at / and its /static files. With `keys`, what translates needs one of them; /health, /model,
    /languages and the page stay open (they tell nothing a key protects, and run no model)."""
    limits = limits or ServeConfig()
    validate_serve(limits)
    routes = Routes(translator, limits)
    # FastAPI's /docs and /redoc pages load scripts from a CDN; the server must work offline.
    app = FastAPI(title="attnmt", description="Attention-based NMT: translations with their attention weights.",
                  lifespan=routes.lifespan, docs_url=None, redoc_url=None)
    # Run outermost first: BodyLimit bounds the body and reads it, RouteLibreTranslate sends
    # LibreTranslate's POST /translate on (parsing the body, for either route to read), Guard then
    # sees the path that will answer.
    app.add_middleware(Guard, paths=frozenset({"/translate", "/explain", PREFIX + "/translate"}), keys=keys,
                       rates=routes.rates, key_field_paths=frozenset({PREFIX + "/translate"}))
    app.add_middleware(RouteLibreTranslate)
    app.add_middleware(BodyLimit, max_bytes=limits.max_body_bytes(), timeout_s=limits.body_timeout_s)
    answer_errors(app)

    app.router.add_api_route("/translate", routes.translate, methods=["POST"], response_model=TranslateResponse,
                             response_model_exclude_none=True, responses=TRANSLATE_RESPONSES,
                             route_class_override=ParsedBodyRoute)
    libretranslate = LibreTranslate(translator, routes.decode_nbest, limits, keys is not None)
    app.include_router(libretranslate.router())
    app.include_router(libretranslate.router(prefix="", with_translate=False))
    app.add_api_route("/explain", routes.explain_step_by_step, methods=["POST"],
                      response_model=Union[ExplainResponse, AttributionResponse], responses=EXPLAIN_RESPONSES)
    app.add_api_route("/health", routes.health, methods=["GET"], response_model=Health)
    app.add_api_route("/model", routes.model, methods=["GET"], response_model=ModelInfo)
    app.add_api_route("/", explorer, methods=["GET"], include_in_schema=False)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


class Routes:
    """attnmt's own routes over one translator: each request's limits, then the batcher."""

    batcher: Batcher  # made by lifespan, in the event loop the app runs in

    def __init__(self, translator: TextTranslator, limits: ServeConfig):
        self.translator = translator
        self.limits = limits
        self.rates = RateLimits(limits)
        self.default_beam = translator.config.decode.beam_size
        self.engine = translator.engine_info().engine
        # Never let the translator cut a long input silently: refuse it instead.
        self.max_tokens = min(limits.max_tokens, translator.config.decode.max_src_len)
        # Read once, at start: what `alignments: true` links words with, and /model says.
        self.aligner = model_aligner(translator)
        self.info = model_info(translator, limits, self.max_tokens, alignment_method(translator, self.aligner))

    @contextlib.asynccontextmanager
    async def lifespan(self, _app: FastAPI) -> AsyncIterator[None]:
        self.batcher = Batcher(self.translator, self.limits)
        self.batcher.start()
        yield
        await self.batcher.stop()

    def check(self, http: Request, texts: list[str], beam: int, n_best: int) -> None:
        """Refuse what is over a limit; a request that passes counts its sentences against its caller."""
        limits = self.limits
        if len(texts) > limits.max_sentences:
            raise ServeError(413, f"{len(texts)} sentences in one request; the limit is {limits.max_sentences}")
        for i, text in enumerate(texts, 1):
            self.check_length(f"sentence {i}", text, self.translator.src_tokenizer)
        if beam > limits.max_beam:
            raise ServeError(422, f"beam: {beam} is over this server's limit of {limits.max_beam}")
        if n_best > beam:
            raise ServeError(422, f"n_best: {n_best} is more than the beam ({beam})")
        self.rates.sentences_of(http.state.caller, len(texts))

    def check_length(self, what: str, text: str, tokenizer: Tokenizer) -> None:
        """Refuse a text over the characters or tokens a sentence may have."""
        if len(text) > self.limits.max_chars:
            raise ServeError(413, f"{what} has {len(text)} characters; the limit is {self.limits.max_chars}")
        tokens = len(tokenizer.tokenize(text))
        if tokens > self.max_tokens:
            raise ServeError(413, f"{what} has {tokens} tokens; the limit is {self.max_tokens}")

    async def decode_nbest(self, http: Request, texts: list[str], beam: int, n_best: int) -> list[list[Translation]]:
        """The n_best translations of each text, checked and batched (LibreTranslate's translate)."""
        self.check(http, texts, beam, n_best)
        return await self.batcher.translate(texts, beam, n_best)

    async def translate(self, request: TranslateRequest, http: Request) -> JSONResponse:
        """Translate one sentence or several; concurrent requests are decoded together. A text of several
        lines is translated line by line and answered as one result, its lines joined (translate.join_lines)."""
        if request.texts is not None:
            texts = request.texts
        else:
            assert request.text is not None                                 # _one_input: one of the two is given
            texts = [request.text]
        beam = request.beam or self.default_beam
        # Each line of a text is a sentence, as on LibreTranslate's path: translated on its own, then joined.
        counts, lines = lines_of(texts)
        if request.maps and max(counts) > 1:
            raise ServeError(422, "maps: a text of several lines has no one set of maps; send its lines as `texts`")
        if request.alignments and max(counts) > 1:
            raise ServeError(422, "alignments: a text of several lines is aligned line by line; send its lines as "
                                  "`texts`")
        if request.alignments and not self.translator.explains:        # an engine without the model's weights
            raise ServeError(501, f"this server decodes with {self.engine}, which cannot align words: serve the "
                                  f"model file (.safetensors) for alignments")
        nbests = texts_of(counts, await self.decode_nbest(http, lines, beam, request.n_best), request.n_best)
        maps = await self.batcher.maps([nbest[0] for nbest in nbests]) if request.maps else [None] * len(nbests)
        results = [_sentence(nbest, request.attention, request.n_best, sentence_maps)
                   for nbest, sentence_maps in zip(nbests, maps)]
        if request.alignments:
            for result, alignment in zip(results, await self.alignments(texts, [n[0].text for n in nbests]), strict=True):
                result["alignment"] = alignment
        # Built to match TranslateResponse (the tests check it) and sent as is: validating attention
        # matrices again on the way out costs the event loop more than the model call under load.
        return JSONResponse({"results": results, "beam": beam, "n_best": request.n_best})

    async def alignments(self, sources: list[str], translations: list[str]) -> list[dict[str, Any]]:
        """Each sentence's word alignment with its translation (TranslateRequest.alignments), on the model's thread."""
        translator = self.translator
        assert isinstance(translator, Translator)                           # explains: attnmt's own engine

        def work() -> list[dict[str, Any]]:
            try:
                method, alignments = translation_alignments(translator, self.aligner, sources, translations)
            except AttnmtError as err:
                raise ServeError(422, f"alignments: {err}") from None
            return [{"method": method, "source_words": a.source_words, "target_words": a.target_words,
                     "links": [list(link) for link in a.links]} for a in alignments]

        return await self.batcher.run(work, "the alignments")

    async def explain_step_by_step(self, request: ExplainRequest, http: Request) -> dict[str, Any]:
        """Every number of each greedy decoding step of one sentence, or with `attribution` how much
        each source word decides each step (attnmt explain [--attribution] --json)."""
        translator = self.translator
        if not translator.explains:
            raise ServeError(501, f"this server decodes with {self.engine}, which gives no per-step numbers: serve "
                                  f"the model file (.safetensors) to explain")
        if request.target is not None:
            self.check_length("target", request.target, translator.tgt_tokenizer)
        ig_steps = request.ig_steps or IG_STEPS
        if request.attribution == "ig" and ig_steps > self.limits.max_ig_steps:
            raise ServeError(422, f"ig_steps: {ig_steps} is over this server's limit of {self.limits.max_ig_steps} "
                                  f"(attnmt serve --max-ig-steps)")
        self.check(http, [request.text], 1, 1)
        view = AttentionView(request.attention, request.layer, request.head)

        def work() -> dict[str, Any]:
            try:
                return explain_or_attribute(translator, request.text, view, request.step, request.attribution,
                                            request.target, request.contrast, request.ig_steps,
                                            afford=self.afford, naming=FIELDS).to_dict()
            except AttnmtError as err:
                raise ServeError(422, str(err)) from None

        return await self.batcher.run(work, "the attribution" if request.attribution else "the explanation")

    def afford(self, work: Work) -> None:
        """Refuse an attribution over the server's bound on its work."""
        if work.units > self.limits.max_attribution_work:
            raise ServeError(422, f"this attribution runs {work}, over this server's limit of "
                                  f"{self.limits.max_attribution_work} (attnmt serve --max-attribution-work): ask "
                                  f"for one step, fewer ig_steps or a shorter sentence")

    async def health(self) -> dict[str, Any]:
        return {"status": "ok", "queued": self.batcher.queue.qsize(), "model_calls": self.batcher.model_calls,
                "sentences": self.batcher.sentences}

    async def model(self) -> dict[str, Any]:
        """What the server translates with, and its limits."""
        return self.info


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
            "alignments": alignments,
            "limits": {**asdict(limits), "max_tokens": max_tokens}}


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
