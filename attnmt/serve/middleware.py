"""What runs before a route, as ASGI middleware: the body's limits (BodyLimit), then the API keys
and request rates of the routes that translate (Guard); and the request's body as BodyLimit read
it (Body), which every reader after it (the middleware, the routes) parses once between them."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Callable, Coroutine, Optional
from urllib.parse import parse_qs

from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .access import Caller, KeyFile, RateLimited, RateLimits
from .errors import error_response, rate_limited

FORM = "application/x-www-form-urlencoded"
BODY = "attnmt.body"    # the request's Body, in its scope's state


class UnreadableBody(ValueError):
    """A body that is neither a JSON object nor a UTF-8 form; the message says which."""


class Body:
    """A request's body as BodyLimit read it, parsed when a reader first asks (as JSON, or as the
    form its content type says) and given again to every later one: the dispatch of POST /translate
    between the two APIs, an api_key field, the route's handler or FastAPI's body model."""

    def __init__(self, content_type: str, raw: bytes):
        self.content_type = content_type
        self.raw = raw
        self._parsed: dict[str, tuple[Any, Optional[ValueError]]] = {}   # kind -> (value, error)

    def _once(self, kind: str, parse: Callable[[bytes], Any]) -> Any:
        """parse(raw), or the ValueError it raised, from the first ask on."""
        if kind not in self._parsed:
            try:
                self._parsed[kind] = (parse(self.raw), None)
            except ValueError as err:                # JSONDecodeError and UnicodeDecodeError are ValueErrors
                self._parsed[kind] = (None, err)
        value, error = self._parsed[kind]
        if error is not None:
            raise error
        return value

    def json(self) -> Any:
        """The body as JSON: what json.loads gives or raises (FastAPI turns the latter into its 400)."""
        return self._once("json", json.loads)

    def fields(self, lists: frozenset[str] = frozenset()) -> dict[str, Any]:
        """The fields of a body sent as a JSON object or as a form; a form's field named in `lists`
        is a list when it is sent more than once. What is neither raises UnreadableBody."""
        if FORM in self.content_type:
            try:
                form = self._once("form", lambda raw: parse_qs(raw.decode("utf-8"), keep_blank_values=True))
            except UnicodeDecodeError:
                raise UnreadableBody("the form is not UTF-8") from None
            return {k: v if k in lists and len(v) > 1 else v[0] for k, v in form.items()}
        try:
            fields = self.json()
        except ValueError:
            raise UnreadableBody(f"send the fields as JSON or as a form ({FORM})") from None
        if not isinstance(fields, dict):
            raise UnreadableBody("the body must be a JSON object")
        return fields


def body_of(scope: Scope) -> Body:
    """The request's Body: the one BodyLimit read, or an empty one for a request without a body."""
    state = scope.setdefault("state", {})
    if BODY not in state:
        state[BODY] = Body(content_type(scope), b"")
    return state[BODY]


def content_type(scope: Scope) -> str:
    return dict(scope["headers"]).get(b"content-type", b"").decode("latin-1")


def body_fields(scope: Scope) -> dict[str, Any]:
    """The fields of a request's body, or none if it has none that can be read."""
    try:
        return body_of(scope).fields()
    except UnreadableBody:
        return {}


class ParsedBodyRequest(Request):
    """A request whose JSON is its Body's, parsed once whoever asked first."""

    async def json(self) -> Any:
        return body_of(self.scope).json()


class ParsedBodyRoute(APIRoute):
    """A route whose body model FastAPI reads from the request's Body (ParsedBodyRequest) rather
    than parsing the body again: a middleware may have parsed it already (POST /translate's dispatch)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def with_parsed_body(request: Request) -> Response:
            return await handler(ParsedBodyRequest(request.scope, request.receive))

        return with_parsed_body


async def buffered(receive: Receive) -> tuple[bytes, Receive]:
    """A request's whole body, and a receive that gives it again to the app."""
    body, more = b"", True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return body, replay


class BodyLimit:
    """Refuse a body over the limit before reading it (413) and one of unknown length (411); read the
    rest whole within `timeout_s`, or answer 408 and close the connection; pass nothing on from a
    client that leaves half-way through its body (no one is left to answer). What it read is the
    request's Body (body_of) for every reader after it."""

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
                scope.setdefault("state", {})[BODY] = Body(content_type(scope), body)
        if problem is not None:
            await problem(scope, receive, send)
            return
        await self.app(scope, receive, send)


class Guard:
    """The API keys and request rate of the POSTs that translate (`paths`), checked before a body
    is parsed; the caller goes on in the request's state, for the sentence rate (the app's check).
    Other methods pass, to be answered 405 as on a server without keys. A request to one of
    `key_field_paths` (LibreTranslate's) may send its key as the body's `api_key` field."""

    def __init__(self, app: ASGIApp, paths: frozenset[str], keys: Optional[KeyFile], rates: RateLimits,
                 key_field_paths: frozenset[str] = frozenset()):
        self.app = app
        self.paths = paths
        self.keys = keys
        self.rates = rates
        self.key_field_paths = key_field_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in self.paths:
            await self.app(scope, receive, send)
            return
        if self.keys is None:
            address = scope["client"][0] if scope.get("client") else "an unknown address"
            caller = Caller(f"address {address}", address)
        else:
            presented = self._presented(scope)
            if not presented:
                where = " or the api_key field" if scope["path"] in self.key_field_paths else ""
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

    def _presented(self, scope: Scope) -> Any:
        """The key a request carries: its Bearer token, or the api_key field (any JSON value)."""
        authorization = dict(scope["headers"]).get(b"authorization")
        if authorization is not None:
            scheme, _, key = authorization.decode("latin-1").strip().partition(" ")
            return key.strip() if scheme.lower() == "bearer" else None
        if scope["path"] in self.key_field_paths:
            return body_fields(scope).get("api_key")
        return None
