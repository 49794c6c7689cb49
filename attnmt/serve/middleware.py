"""What runs before a route, as ASGI middleware: the body's limits (BodyLimit), then the API keys
and request rates of the routes that translate (Guard); and the helpers that read a body there."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Optional
from urllib.parse import parse_qs

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..access import Caller, KeyFile, RateLimited, RateLimits
from .errors import error_response, rate_limited

FORM = "application/x-www-form-urlencoded"


class UnreadableBody(ValueError):
    """A body that is neither a JSON object nor a UTF-8 form; the message says which."""


async def buffered(receive: Receive) -> tuple[bytes, Receive]:
    """A request's whole body (the server's BodyLimit runs first: it bounds the body, reads it within
    a timeout and passes on only whole ones), and a receive that gives it again to the app."""
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


def fields_of(content_type: str, body: bytes, lists: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The fields of a body sent as a JSON object or as a form; a form's field named in `lists` is
    a list when it is sent more than once. What is neither raises UnreadableBody."""
    if FORM in content_type:
        try:
            return {k: v if k in lists and len(v) > 1 else v[0]
                    for k, v in parse_qs(body.decode("utf-8"), keep_blank_values=True).items()}
        except UnicodeDecodeError:
            raise UnreadableBody("the form is not UTF-8") from None
    try:
        fields = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise UnreadableBody(f"send the fields as JSON or as a form ({FORM})") from None
    if not isinstance(fields, dict):
        raise UnreadableBody("the body must be a JSON object")
    return fields


def body_fields(scope: Scope, body: bytes) -> dict[str, Any]:
    """The fields of a request's body, or none if it has none that can be read."""
    try:
        return fields_of(dict(scope["headers"]).get(b"content-type", b"").decode("latin-1"), body)
    except UnreadableBody:
        return {}


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
            presented, receive = await self._presented(scope, receive)
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

    async def _presented(self, scope: Scope, receive: Receive) -> tuple[Any, Receive]:
        """The key a request carries: its Bearer token, or the api_key field (any JSON value)."""
        authorization = dict(scope["headers"]).get(b"authorization")
        if authorization is not None:
            scheme, _, key = authorization.decode("latin-1").strip().partition(" ")
            return (key.strip() if scheme.lower() == "bearer" else None), receive
        if scope["path"] in self.key_field_paths:
            body, receive = await buffered(receive)
            return body_fields(scope, body).get("api_key"), receive
        return None, receive
