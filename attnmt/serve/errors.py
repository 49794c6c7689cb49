"""How the server refuses a request: one line in {"error": "..."} with the status that says why,
for its own refusals (ServeError) and for those of FastAPI and Starlette alike."""

from __future__ import annotations

from typing import Any, Mapping, Optional

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from ..errors import did_you_mean, nearest
from .access import RateLimited


class ServeError(Exception):
    """A refusal, answered with `status` and {"error": message}."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def error_response(status: int, message: str, headers: Optional[Mapping[str, str]] = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def rate_limited(err: RateLimited) -> JSONResponse:
    return error_response(429, str(err), {"Retry-After": str(err.retry_after)})


def validation_message(request: Request, err: RequestValidationError) -> tuple[int, str]:
    """The status and line for a body FastAPI could not read into a request model: 415 for one that
    is not JSON, 400 for malformed JSON, 422 for wrong fields (the first three named; a field the
    request does not have, with the fields it has)."""
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
        elif e["type"] == "extra_forbidden":
            parts.append(f"{where}: {not_a_field(where, body_fields(request))}")
        else:
            parts.append(f"{where or 'body'}: {e['msg'].removeprefix('Value error, ')}")
    return 422, "; ".join(parts)


def body_fields(request: Request) -> dict[str, bool]:
    """The fields of the JSON body the request's route reads, each with whether it is required
    (empty for a route without a body model)."""
    body = getattr(request.scope.get("route"), "body_field", None)     # FastAPI's APIRoute: what it reads the body into
    model = getattr(getattr(body, "field_info", None), "annotation", None)
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return {}
    return {name: field.is_required() for name, field in model.model_fields.items()}


def not_a_field(name: str, fields: dict[str, bool]) -> str:
    """Why a field `name` is refused: pydantic's "Extra inputs are not permitted" names neither the
    field meant (a misspelt `txt` leaves `text` missing) nor those there are."""
    if not fields:
        return "not a field of this request"
    takes = ", ".join(f"{field} (required)" if required else field for field, required in fields.items())
    return f"not a field of this request{did_you_mean(nearest(name, fields))}; it takes {takes}"


def answer_errors(app: FastAPI) -> None:
    """Answer every error the app raises as {"error": "..."}: ServeError with its status, a rate
    limit with 429 and Retry-After, an unreadable body as validation_message says, and Starlette's
    own (404, 405) with their status and headers."""

    @app.exception_handler(ServeError)
    async def _serve_error(_request: Any, err: ServeError) -> JSONResponse:
        return error_response(err.status, err.message)

    @app.exception_handler(RateLimited)
    async def _rate_limited(_request: Any, err: RateLimited) -> JSONResponse:
        return rate_limited(err)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, err: RequestValidationError) -> JSONResponse:
        return error_response(*validation_message(request, err))

    @app.exception_handler(HTTPException)
    async def _http_error(_request: Any, err: HTTPException) -> JSONResponse:
        # The headers too: a 405 says which methods the path has (Allow), as RFC 9110 asks.
        return error_response(err.status_code, str(err.detail), err.headers)
