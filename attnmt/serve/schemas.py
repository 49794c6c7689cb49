"""The requests and answers of attnmt's own HTTP API (pydantic models), as /openapi.json describes them."""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass

from ..analysis.attribution import COMPLETENESS, IG_STEPS, AttributedStep, Attribution
from ..analysis.explain import ExplainedStep


class TranslateRequest(BaseModel):
    """One sentence (`text`) or several (`texts`), and how to decode them."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={
        "examples": [{"text": "Ein Satz."}, {"texts": ["Ein Satz. Noch einer.", "Ein dritter."], "split": True}]})

    text: Optional[str] = Field(None, description="one sentence, or a text of one a line (or any, with `split`)")
    texts: Optional[list[str]] = Field(None, min_length=1, description="several, answered in order")
    beam: Optional[int] = Field(None, ge=1, description="beam size, 1 = greedy (default: the model's decode.beam_size)")
    n_best: int = Field(1, ge=1, description="translations per sentence, best first; at most `beam`")
    attention: bool = Field(False, description="include the attention weights of each translation")
    maps: bool = Field(False, description="include every attention map of each sentence's best translation: "
                                          "cross, and the Transformer's encoder and decoder self-attention")
    alignments: bool = Field(False, description="include word alignments between each sentence and its best "
                                                "translation (words split at spaces): the model's aligner where its "
                                                "file holds one (attnmt train-aligner), else attention's argmax")
    split: bool = Field(False, description="cut each text into sentences by the rules of the model's (first) "
                                           "source language, as LibreTranslate's API does; a sentence over the "
                                           "limits is cut at a clause end (default: a line a sentence)")
    model: Optional[str] = Field(None, description="the model to translate with, by its name in GET /models "
                                                   "(needed when the server has several)")

    @model_validator(mode="after")
    def _one_input(self) -> "TranslateRequest":
        if (self.text is None) == (self.texts is None):
            raise ValueError("give exactly one of `text` (a string) or `texts` (a list of strings)")
        return self


class Hypothesis(BaseModel):
    translation: str
    tokens: list[str] = Field(description="output tokens, end of sentence left out")
    score: float = Field(description="log-probability of the output, end of sentence included")
    confidence: float = Field(description="how sure the model is, in (0, 1]: the geometric mean of its tokens' "
                                          "probabilities, exp(score / (tokens + 1)); a text's, over all its "
                                          "sentences' tokens (docs/documents.md says what it tells)")
    attention: Optional[list[list[float]]] = Field(
        None, description="[len(tokens)][len(source_tokens)] weights; only when asked for and the model has attention")


class WordAlignment(BaseModel):
    method: Literal["aligner", "argmax"] = Field(description="aligner: the aligner trained for the model (attnmt "
                                                            "align --method aligner); argmax: each target word to "
                                                            "the source word it attends most")
    source_words: list[str] = Field(description="the sentence split at spaces")
    target_words: list[str] = Field(description="the translation split at spaces")
    links: list[tuple[int, int]] = Field(description="(source word, target word) index pairs, from 0, sorted")


class SentenceResult(Hypothesis):
    source_tokens: list[str] = Field(description="the tokens the model read")
    maps: Optional[dict[str, list[list[list[list[float]]]]]] = Field(
        None, description="when asked for: name -> [layers][heads][queries][keys] (Translator.attention_maps); "
                          "cross [..][len(tokens)][len(source_tokens)], encoder [..][len(source_tokens)]"
                          "[len(source_tokens)], decoder [..][len(tokens)][len(tokens)] over <sos> and the "
                          "tokens before each")
    nbest: Optional[list[Hypothesis]] = Field(None, description="when n_best > 1: the n_best translations, best first")
    alignment: Optional["WordAlignment"] = Field(None, description="when asked for: the best translation's word "
                                                                   "alignment")


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
    """One sentence to translate greedily and explain step by step, or whose steps to attribute
    (attnmt explain [--attribution])."""

    model_config = ConfigDict(extra="forbid", strict=True)

    text: str = Field(description="one sentence")
    attention: Literal["cross", "decoder"] = Field("cross", description="cross: output over source; decoder: a "
                                                                         "Transformer's self-attention (not with "
                                                                         "`attribution`)")
    layer: Optional[int] = Field(None, ge=1, description="Transformer: the decoder layer, from 1 (default: the last; "
                                                         "with `attribution`, the penultimate, as attnmt align reads it)")
    head: Optional[int] = Field(None, ge=1, description="Transformer: the head, from 1 (default: 1; with "
                                                        "`attribution`, the mean of the heads)")
    step: Optional[int] = Field(None, ge=1, description="only this decoding step, from 1 (default: every step); past "
                                                        "the translation's end: 422")
    attribution: Optional[Literal["grad", "ig", "occlusion"]] = Field(
        None, description="answer instead how much each source word decides each step's output, beside its "
                          "cross-attention (AttributionResponse): grad (gradient × input), ig (integrated gradients) "
                          "or occlusion (the sentence run again without each word)")
    target: Optional[str] = Field(None, description="with `attribution`: attribute the forced decoding of this "
                                                    "translation (default: the model's greedy one)")
    contrast: Optional[str] = Field(None, description="with `attribution` and `step`: why the step wrote its token "
                                                      "rather than this one (a token of the target vocabulary)")
    ig_steps: Optional[int] = Field(None, ge=1, le=10000, description=f"with `attribution: ig`: the points from the "
                                                                      f"baseline to the input (default {IG_STEPS}); "
                                                                      f"at most the server's max_ig_steps (GET "
                                                                      f"/model's limits), else 422")
    model: Optional[str] = Field(None, description="the model to explain, by its name in GET /models (needed "
                                                   "when the server has several)")


def described(descriptions: dict[str, str]) -> ConfigDict:
    """A pydantic config that gives the named fields these descriptions in the JSON schema, for a
    response model whose fields (names, types, defaults) come from a dataclass it derives from."""

    def describe(schema: dict[str, Any]) -> None:
        for name, description in descriptions.items():
            schema["properties"][name]["description"] = description

    return ConfigDict(json_schema_extra=describe)


@pydantic_dataclass(config=described({
    "step": "1 for the first output token",
    "token": "the token this step chose (<eos> at the end)",
    "keys": "what the query looked at: source tokens, or <sos> and the outputs so far",
    "scores": "score e_j per key; null where masked",
    "weights": "softmax of the scores (times `factors` for local-p)",
    "shares": "each key's share of the context vector, |α_j v_j| / Σ_k |α_k v_k|",
    "next": "the 5 likeliest next tokens and their probabilities",
    "next_uniform": "the same when the attention over the source is uniform (a counterfactual)",
    "factors": "local-p attention only: the Gaussian factor of each key, α_j = softmax(e)_j × factor_j"}))
class ExplainedStepResult(ExplainedStep):
    """One greedy decoding step: the fields of explain.ExplainedStep."""


class ExplainResponse(BaseModel):
    source_tokens: list[str]
    output_tokens: list[str] = Field(description="the greedy translation")
    attention: str
    layer: Optional[int]
    head: Optional[int]
    score_function: str
    steps: list[ExplainedStepResult]


@pydantic_dataclass(config=described({
    "step": "from 1",
    "token": "what the step writes (<eos> at the end)",
    "contrast": "with `contrast`: f is log p(token) − log p(contrast); null: f is log p(token)",
    "output": "f, in nats: what every attribution is in units of",
    "source": "the attribution of each source word (its pieces summed), in nats",
    "between_words": "grad and ig: the attribution of the source pieces that belong to no word (a character "
                     "model's spaces), which `completeness` counts beside the words; null where every piece belongs "
                     "to a word, and for occlusion",
    "attention": "the step's cross-attention on each source word (its pieces summed), as attnmt align reads it; "
                 "null: the model has no attention",
    "prefix": "grad and ig: the attribution of each target input, the start token first; null for occlusion",
    "source_share": "grad and ig: Σ|source| / (Σ|source| + Σ|prefix|), how much of the attribution comes from the "
                    "source rather than the translation so far; null for occlusion",
    "completeness": f"ig: `total`, the attributions' sum, Σ source + between_words + Σ prefix, against `change`, "
                    f"f(input) − f(baseline); `holds`: they agree within {COMPLETENESS:.0%} of the change (at least "
                    f"{COMPLETENESS})",
    "without": "occlusion: f with each source word dropped"}))
class AttributedStepResult(AttributedStep):
    """One step's attribution: the fields of attribution.AttributedStep."""


@pydantic_dataclass(config=described({
    "method": "grad, ig or occlusion",
    "source_words": "the sentence's words (split at whitespace), over which each step's `source` and `attention` are",
    "target_tokens": "the translation attributed (its forced decoding), the end of sentence left out",
    "start_token": "what the decoder reads first, the first input of each step's `prefix` (<sos>; Marian's <pad>)",
    "ig_steps": "ig: the points from the baseline to the input; null for the other methods",
    "layer": "the attention's layer, from 1 (null: a Transformer's penultimate, as attnmt align reads it)",
    "head": "the attention's head, from 1 (null: the mean of the layer's heads, as attnmt align reads it)",
    "steps": "each decoding step, or the one asked for"}))
class AttributionResponse(Attribution):
    """How much each source word decides each step's output, beside its attention: the fields of
    attribution.Attribution, as attnmt explain --attribution --json prints them."""

    # The same steps, described for the schema; mypy refuses a list field narrowed in a subclass
    # (a list is invariant), but this class is only ever read from JSON, never given a step list.
    steps: list[AttributedStepResult]  # type: ignore[assignment]


class ModelInfo(BaseModel):
    name: str = Field(description="what requests call it (`model`): its NAME= or models-file name, else its file's")
    models: list[str] = Field(description="the names of all the server's models, in the order they were given")
    load_s: Optional[float] = Field(description="seconds it took to load, at the server's start; null where the "
                                                "server was given it loaded (create_app)")
    rss_mb: Optional[float] = Field(description="the resident memory (MB) the server grew by while loading it; null "
                                                "where not measured or the system does not say")
    src_lang: str = Field(description="data.src_lang: the source side of the training files")
    source_languages: list[str] = Field(description="the languages the model reads (data.source_languages, "
                                                    "or src_lang)")
    tgt_lang: str
    arch: str = Field(description="the model family (model.arch): rnn, transformer, or another registered one")
    architecture: dict[str, int | str | bool] = Field(
        description="what the family says of the network (Model.describe()): `summary`, one line naming the family "
                    "and its kinds (models exported before it was added lack it), then its sizes and kinds by name")
    tokenizer: str
    src_vocab_size: int
    tgt_vocab_size: int
    beam_size: int = Field(description="the beam used when a request names none")
    precision: str = Field(description="what decoding runs in here: fp32, bf16 or int8 (`auto` resolved)")
    engine: str = Field(description="what decodes: attnmt (its own engine) or ctranslate2 (an exported model)")
    explains: bool = Field(description="whether /explain can open the decoding steps (attnmt's own engine)")
    start_token: str = Field(description="the token the decoder starts from, the first key of the decoder map and of "
                                         "an attribution's prefix: <sos> (attnmt's vocabularies), <pad> (Marian's)")
    alignments: Optional[Literal["aligner", "argmax"]] = Field(
        description="how `alignments: true` links words: aligner (the model file holds one), argmax (attention's); "
                    "null where it cannot (no attention and no aligner, or an engine without the model's weights)")
    # A list, not a tuple: FastAPI writes a tuple's schema in a form OpenAPI 3.1 does not allow.
    maps: dict[str, list[int]] = Field(description="the attention maps `maps: true` returns, name -> "
                                                   "[layers, heads]; none without attention")
    limits: dict[str, int | float] = Field(description="the server's limits (ServeConfig), max_tokens as enforced")
    timeline: bool = Field(description="whether GET /timeline answers for it: its file lies in the folder of a "
                                       "training run that watched sentences (train.watch)")


class WatchedSentence(BaseModel):
    tokens: list[str] = Field(description="the greedy translation's tokens at this point, without <eos>")
    text: str
    attention: list[list[float]] = Field(description="the last layer's cross-attention, its heads' mean: "
                                                     "rows the tokens, columns the sentence's source_tokens")
    aer: Optional[float] = Field(description="where the run was given the sentence's reference and gold links "
                                             "(train.watch_file): the alignment error of the attention's links then")


class TimelinePoint(BaseModel):
    step: int = Field(description="the update after which it was recorded")
    epoch: int
    valid_loss: Optional[float] = Field(description="at a validation; null at an early update (1, 2, 4, 8, ...)")
    sentences: list[WatchedSentence]


class ValidationPoint(BaseModel):
    step: int
    valid_loss: float


class TimelineResponse(BaseModel):
    name: str = Field(description="the model's name")
    sources: list[str] = Field(description="the sentences the run watched")
    source_tokens: list[list[str]] = Field(description="each watched sentence's tokens as the model reads them")
    points: list[TimelinePoint] = Field(description="in training order; a run under way adds to them")
    curve: list[ValidationPoint] = Field(description="every validation's loss (metrics.jsonl)")


MODEL_RESPONSES: dict[int | str, dict[str, Any]] = {
    422: {"model": ErrorResponse, "description": "`name` is not one of the server's models"}}
TIMELINE_RESPONSES: dict[int | str, dict[str, Any]] = {
    **MODEL_RESPONSES, 404: {"model": ErrorResponse, "description": "the model's folder holds no timeline"}}

# What BodyLimit answers before a route reads the body: any route a body is sent to may answer it.
BODY_LIMIT_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorResponse, "description": "a malformed Content-Length"},
    408: {"model": ErrorResponse, "description": "a body that took longer than the server's body timeout to arrive"},
    411: {"model": ErrorResponse, "description": "a body without Content-Length"},
    413: {"model": ErrorResponse, "description": "a body over the server's size limit"},
}
# The error answers of the routes that take a body, for the OpenAPI description.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorResponse, "description": "malformed JSON or Content-Length"},
    401: {"model": ErrorResponse, "description": "no API key, on a server with keys (--api-keys)"},
    403: {"model": ErrorResponse, "description": "an API key this server does not know"},
    408: BODY_LIMIT_RESPONSES[408],
    411: BODY_LIMIT_RESPONSES[411],
    413: {"model": ErrorResponse, "description": "over a size limit (body, sentences, characters, tokens)"},
    415: {"model": ErrorResponse, "description": "a body that is not sent as application/json"},
    422: {"model": ErrorResponse, "description": "a field missing or of the wrong type, or options out of range"},
    429: {"model": ErrorResponse, "description": "over a rate limit; retry after the seconds in Retry-After",
          "headers": {"Retry-After": {"description": "seconds", "schema": {"type": "integer"}}}},
    503: {"model": ErrorResponse, "description": "the request queue is full; retry later"},
    504: {"model": ErrorResponse, "description": "the request took longer than the server's timeout"},
}
# /translate's: what it cannot align.
TRANSLATE_RESPONSES: dict[int | str, dict[str, Any]] = {
    **ERROR_RESPONSES,
    422: {"model": ErrorResponse, "description": "a field missing or of the wrong type, or options out of range; "
                                                 "alignments asked of a model with neither attention nor an aligner, "
                                                 "or of a text of several lines; a `model` the server does not have, "
                                                 "or none named on a server of several"},
    501: {"model": ErrorResponse, "description": "alignments asked of a model whose engine (CTranslate2) cannot "
                                                 "align words"},
}
# /explain's: what it cannot explain, or would take too long to attribute.
EXPLAIN_RESPONSES: dict[int | str, dict[str, Any]] = {
    **ERROR_RESPONSES,
    422: {"model": ErrorResponse, "description": "a field missing or of the wrong type, or options out of range: "
                                                 "an empty sentence or target, a step past the translation's end, a "
                                                 "contrast the target vocabulary lacks; or an attribution over the "
                                                 "server's max_ig_steps or max_attribution_work; a `model` the "
                                                 "server does not have, or none named on a server of several"},
    501: {"model": ErrorResponse, "description": "the model's engine (CTranslate2) gives no per-step numbers"},
}
