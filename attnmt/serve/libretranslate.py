"""The LibreTranslate API beside attnmt's own, so that its clients can use an `attnmt serve`.

LibreTranslate (libretranslate.com) is the common API of self-hosted machine translation:
`POST /translate` with `q` (a text or a list of texts), `source`, `target`, `format` and
`alternatives`, sent as JSON or as a form, answered with `translatedText` (and
`detectedLanguage` when `source` is `auto`); `POST /detect`; `GET /languages`; `GET
/frontend/settings`, which its web front end and some clients read first; `POST /suggest` and
`POST /translate_file`, refused as LibreTranslate refuses them when they are off. All live under
/libretranslate/, and at the root: a POST /translate whose body has `q` is LibreTranslate's
(`LibreTranslateDispatch`, which parses the body once for both APIs), any other is attnmt's. A
model translates from the languages it declares (`data.source_languages`) into one, sentence by
sentence, so a text is cut into sentences (documents.text) and put together again; detection picks among the declared languages
(corpus/detect.py). With several models, a request goes to the model of its pair, or through the pivot
language where the server has one (its models.ModelChain, from ModelSet.chain); `source: auto`
detects among the languages that reach the target.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Awaitable, Callable, NoReturn, Optional, Union

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field
from starlette.types import ASGIApp, Receive, Scope, Send

from ..config import ServeConfig
from ..corpus.detect import detect
from ..translate import Translation
from .errors import ServeError
from .middleware import FORM, UnreadableBody, body_fields, body_of, content_type
from .models import ModelChain, ModelSet
from .schemas import BODY_LIMIT_RESPONSES, ERROR_RESPONSES, ErrorResponse

PREFIX = "/libretranslate"
# The fields of LibreTranslate's /translate; attnmt's own has none of them.
LIBRETRANSLATE_FIELDS = frozenset({"q", "source", "target", "format", "api_key", "alternatives"})
ATTNMT_FIELDS = frozenset({"text", "texts"})
# How long a front end waits after the last keystroke before it translates (LibreTranslate's default).
FRONTEND_TIMEOUT_MS = 500
# What LibreTranslate answers, with 403, to a suggestion or a file when it takes none; this server never does.
SUGGESTIONS_OFF = "Suggestions are disabled on this server."
FILES_OFF = "Files translation are disabled on this server."

# Names for /languages; a code without one is named by its code.
LANGUAGE_NAMES = {
    "ar": "Arabic", "cs": "Czech", "da": "Danish", "de": "German", "el": "Greek", "en": "English", "es": "Spanish",
    "fi": "Finnish", "fr": "French", "hi": "Hindi", "hu": "Hungarian", "it": "Italian", "ja": "Japanese",
    "ko": "Korean", "mr": "Marathi", "iso": "ISO 8601 date", "nl": "Dutch", "pl": "Polish", "pt": "Portuguese", "ro": "Romanian",
    "ru": "Russian", "sv": "Swedish", "tr": "Turkish", "uk": "Ukrainian", "vi": "Vietnamese", "zh": "Chinese",
}


class LibreTranslateError(ServeError):
    """Answered as LibreTranslate answers errors: {"error": "..."} with status 400."""

    def __init__(self, message: str):
        super().__init__(400, message)


class LibreTranslateRequest(BaseModel):
    q: Union[str, list[str]] = Field(description="a text, or a list of texts answered as a list")
    source: str = Field(description="a source language of the server's (GET /languages), or auto")
    target: str = Field(description="a language the source is translated into (its `targets` in GET /languages)")
    format: str = Field("text", description="text (html is not supported)")
    alternatives: Union[Annotated[int, Field(ge=0)], Annotated[str, Field(pattern="^[0-9]+$")]] = Field(
        0, description="how many next best translations to give, per text; its digits as a form sends them")
    api_key: Optional[str] = Field(None, description="the API key, on a server with keys (or Authorization: Bearer)")


class DetectedLanguage(BaseModel):
    language: str = Field(description="one of the server's source languages")
    confidence: float = Field(ge=0, le=100, description="percent (corpus/detect.py says how it is reckoned)")


class LibreTranslateResponse(BaseModel):
    translatedText: Union[str, list[str]] = Field(description="a text for a text, a list for a list, in order")
    alternatives: Optional[Union[list[str], list[list[str]]]] = Field(
        None, description="when `alternatives` > 0: the next best translations, per text")
    detectedLanguage: Optional[Union[DetectedLanguage, list[DetectedLanguage]]] = Field(
        None, description="when `source` is auto: the language detected, per text for a list")
    pivot: Optional[str] = Field(
        None, description="when a text was translated through this language (attnmt serve --pivot): no model "
                          "translates its pair directly")


class DetectRequest(BaseModel):
    q: str = Field(description="the text whose language to detect")
    api_key: Optional[str] = Field(None, description="accepted and not needed: detection is open, as /languages is")


class LanguageName(BaseModel):
    code: str
    name: str


class FrontendLanguages(BaseModel):
    source: LanguageName = Field(description="the source language a front end starts with")
    target: LanguageName = Field(description="the target language a front end starts with")


class FrontendSettings(BaseModel):
    charLimit: int = Field(description="the most characters of one sentence the server translates "
                                             "whole; a text is cut into sentences, a longer one at a clause end")
    frontendTimeout: int = Field(description="milliseconds a front end waits after typing before it translates")
    apiKeys: bool = Field(description="whether the server has API keys")
    keyRequired: bool = Field(description="whether translating needs an API key")
    suggestions: bool = Field(description="whether suggestions are taken (never: /suggest refuses them)")
    filesTranslation: bool = Field(description="whether files are translated (never: /translate_file refuses them)")
    supportedFilesFormat: list[str] = Field(description="file formats translated: none")
    language: FrontendLanguages


class Language(BaseModel):
    code: str
    name: str
    targets: list[str] = Field(description="the languages this server translates it into")


class LibreTranslateDispatch:
    """Send a POST /translate that carries LibreTranslate's `q` (JSON or a form) to its handler; the
    body it parsed to tell (middleware.Body) is what either API's route reads."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != "/translate":
            await self.app(scope, receive, send)
            return
        if _libretranslate_shaped(scope):
            scope = {**scope, "path": PREFIX + "/translate", "raw_path": (PREFIX + "/translate").encode()}
        await self.app(scope, receive, send)


def _libretranslate_shaped(scope: Scope) -> bool:
    """Whether a POST /translate is LibreTranslate's: it has one of LibreTranslate's fields, or it is a
    form (attnmt's API takes JSON only) without attnmt's own `text` or `texts`. Such a request without
    `q` is answered LibreTranslate's 400, which its client understands; a form in attnmt's shape keeps
    attnmt's 415 (send the body as JSON)."""
    fields = body_fields(scope).keys()
    return bool(LIBRETRANSLATE_FIELDS & fields) or (
        content_type(scope).split(";")[0].strip().lower() == FORM and not ATTNMT_FIELDS & fields)


def _fields(request: Request) -> dict[str, Any]:
    """The request's fields from JSON or a form (a repeated `q` is a list of texts)."""
    try:
        return body_of(request.scope).fields(lists=frozenset({"q"}))
    except UnreadableBody as err:
        raise LibreTranslateError(str(err)) from None


def api_key_is_text(fields: dict[str, Any]) -> None:
    if not isinstance(fields.get("api_key", ""), (str, type(None))):
        raise LibreTranslateError("Invalid request: api_key must be a text")


# The server's batched, limit-checked n-best translation of groups of texts, each group's texts in one source
# language, cut into sentences and translated along its chain of models:
# (request, [(chain, source language, texts)], n_best) -> [group][text][rank].
DecodeChains = Callable[[Request, list[tuple[ModelChain, str, list[str]]], int], Awaitable[list[list[list[Translation]]]]]


class LibreTranslate:
    """The LibreTranslate API over the server's models: its handlers, and the routers that serve them.
    `decode` translates; `limits` and `keys_required` are what /frontend/settings tells."""

    def __init__(self, models: ModelSet, decode: DecodeChains, limits: ServeConfig, keys_required: bool):
        self.models, self.decode = models, decode
        self.sources = models.sources()
        self.targets = [language for language in models.languages() if models.sources_for(language)]
        self.pairs = f"this server translates {models.pairs()}"
        first = models.first
        self.settings = {"charLimit": limits.max_chars, "frontendTimeout": FRONTEND_TIMEOUT_MS,
                         "apiKeys": keys_required, "keyRequired": keys_required, "suggestions": False,
                         "filesTranslation": False, "supportedFilesFormat": [],
                         "language": {"source": _named(first.sources[0]), "target": _named(first.target)}}

    def router(self, prefix: str = PREFIX, with_translate: bool = True) -> APIRouter:
        """The API under `prefix`; the root gets all but /translate: its /translate is attnmt's, and
        LibreTranslateDispatch sends LibreTranslate's requests on."""
        router = APIRouter(prefix=prefix, tags=["LibreTranslate"])
        if with_translate:
            # The handler reads the body itself (JSON or a form); its schema is described here, with
            # the languages this server translates.
            fields = LibreTranslateRequest.model_json_schema()
            fields["properties"]["source"]["enum"] = [*self.sources, "auto"]
            fields["properties"]["target"]["enum"] = self.targets
            fields["properties"]["format"]["enum"] = ["text"]
            router.add_api_route("/translate", self.translate, methods=["POST"], response_model=LibreTranslateResponse,
                                 response_model_exclude_none=True, openapi_extra=_body(fields),
                                 responses=ERROR_RESPONSES)
        router.add_api_route("/detect", self.detect_language, methods=["POST"], response_model=list[DetectedLanguage],
                             openapi_extra=_body(DetectRequest.model_json_schema()), responses=ERROR_RESPONSES)
        router.add_api_route("/languages", self.languages, methods=["GET"], response_model=list[Language])
        router.add_api_route("/frontend/settings", self.frontend_settings, methods=["GET"],
                             response_model=FrontendSettings)
        # Refusals: their one answer is the 403 (and BodyLimit's, for a body it refuses), not a 200.
        for path, refuse, message in [("/suggest", self.suggest, SUGGESTIONS_OFF),
                                      ("/translate_file", self.translate_file, FILES_OFF)]:
            router.add_api_route(path, refuse, methods=["POST"], status_code=403, response_model=ErrorResponse,
                                 response_description=f'always: {{"error": "{message}"}}',
                                 responses=BODY_LIMIT_RESPONSES)
        return router

    async def translate(self, request: Request) -> dict[str, Any]:
        """LibreTranslate's translate: `q` a text or a list of texts, `source`, `target`, `format`
        (text), `alternatives`; JSON or a form. A text is cut into sentences, as LibreTranslate cuts it
        (documents.sentences: at line breaks and by the source language's rules), each translated on its
        own, and put together again with the text's own spacing and line breaks."""
        fields = _fields(request)
        q = fields.get("q")
        if q is None:
            raise LibreTranslateError("Invalid request: missing q parameter")
        texts = [q] if isinstance(q, str) else q
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            raise LibreTranslateError("Invalid request: q must be a text or a non-empty list of texts")
        source, target = fields.get("source"), fields.get("target")
        if source is None or target is None:
            raise LibreTranslateError(f"Invalid request: missing {'source' if source is None else 'target'} parameter")
        if source != "auto" and source not in self.sources:
            raise LibreTranslateError(f"{source} is not supported: {self.pairs}")
        if target not in self.targets:
            raise LibreTranslateError(f"{target} is not supported: {self.pairs}")
        if source != "auto" and self.models.chain(source, target) is None:
            raise LibreTranslateError(f"{source} to {target} is not supported: {self.pairs}")
        if fields.get("format", "text") != "text":
            raise LibreTranslateError(f"format {fields['format']} is not supported: this server translates plain text")
        # A whole number, or its digits as a form sends them (and some JSON clients); never a bool or 1.5.
        alternatives = fields.get("alternatives", 0)
        if isinstance(alternatives, str) and re.fullmatch(r"[0-9]+", alternatives):
            alternatives = int(alternatives)
        if not isinstance(alternatives, int) or isinstance(alternatives, bool) or alternatives < 0:
            raise LibreTranslateError(f"Invalid request: alternatives must be a whole number, 0 or more, "
                                      f"not {fields.get('alternatives')!r}")
        api_key_is_text(fields)

        # Each text's source language (detected among those that reach the target), then the texts
        # grouped by it, each group along its chain of models.
        detected = [detect(text, self.models.sources_for(target))[0] for text in texts] if source == "auto" else None
        languages = [d.language for d in detected] if detected else [source] * len(texts)
        groups = {language: [i for i, lang in enumerate(languages) if lang == language] for language in languages}
        chains = {language: self._chain(language, target) for language in groups}
        n_best = alternatives + 1
        decoded = await self.decode(request, [(chains[language], language, [texts[i] for i in members])
                                              for language, members in groups.items()], n_best)
        nbests: list[list[Translation]] = [[] for _ in texts]
        for members, group_nbests in zip(groups.values(), decoded, strict=True):
            for i, nbest in zip(members, group_nbests, strict=True):
                nbests[i] = nbest
        # [text][rank]; a rank a text lacks (an empty text has one translation) repeats its last.
        ranked = [[nbest[min(rank, len(nbest) - 1)].text for rank in range(n_best)] for nbest in nbests]
        answer: dict[str, Any] = {"translatedText": ranked[0][0] if isinstance(q, str) else [r[0] for r in ranked]}
        if alternatives:
            answer["alternatives"] = ranked[0][1:] if isinstance(q, str) else [r[1:] for r in ranked]
        if detected:
            found = [{"language": d.language, "confidence": d.confidence} for d in detected]
            answer["detectedLanguage"] = found[0] if isinstance(q, str) else found
        pivots = {chain.pivot for chain in chains.values() if chain.pivot is not None}
        if pivots:
            answer["pivot"] = pivots.pop()
        return answer

    def _chain(self, source: str, target: str) -> ModelChain:
        chain = self.models.chain(source, target)
        assert chain is not None          # checked above, or detected among the sources that reach the target
        return chain

    async def detect_language(self, request: Request) -> list[dict[str, Any]]:
        """LibreTranslate's detect: `q`, a text (JSON or a form) -> the server's source languages, likeliest
        first, with confidences in percent; detection picks only among those (see the serving docs)."""
        fields = _fields(request)
        api_key_is_text(fields)
        q = fields.get("q")
        if q is None:
            raise LibreTranslateError("Invalid request: missing q parameter")
        if not isinstance(q, str):
            raise LibreTranslateError("Invalid request: q must be a text")
        return [{"language": d.language, "confidence": d.confidence} for d in detect(q, self.sources)]

    async def languages(self) -> list[dict[str, Any]]:
        """The languages this server translates from and into, each with the languages it reaches."""
        return [{**_named(code), "targets": self.models.targets_of(code)} for code in self.models.languages()]

    async def frontend_settings(self) -> dict[str, Any]:
        """What LibreTranslate's web front end (and clients that ask first) read: limits, keys, languages."""
        return self.settings

    async def suggest(self) -> NoReturn:
        """LibreTranslate's suggest (`q`, `s` a better translation, `source`, `target`): this server takes no
        suggestions, as /frontend/settings says, and refuses them as LibreTranslate does when they are
        off: 403, the body unread, with or without an API key."""
        raise ServeError(403, SUGGESTIONS_OFF)

    async def translate_file(self) -> NoReturn:
        """LibreTranslate's translate_file (a multipart form with `file`, `source`, `target`): this server
        translates no files, as /frontend/settings says, and refuses them as LibreTranslate does when
        file translation is off: 403, the body unread, with or without an API key."""
        raise ServeError(403, FILES_OFF)


def _named(code: str) -> dict[str, str]:
    return {"code": code, "name": LANGUAGE_NAMES.get(code, code)}


def _body(schema: dict[str, Any]) -> dict[str, Any]:
    """The OpenAPI description of a body read by its handler: `schema`, as JSON or as a form."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema},
                                                          FORM: {"schema": schema}}}}
