"""Every number of a decoding step, for one sentence: what `attnmt explain` shows a learner.

At each step of greedy decoding, the attention the learner picked (`AttentionView`) gives:
    scores   e_j = score(q, k_j) for each key j (a source position, or an output position so far)
    weights  α_j = softmax(e)_j; masked keys (pads, the future, outside a local window) get no
             score and weight 0; local-p multiplies by a Gaussian factor_j around its centre p_t
    shares   |α_j v_j| / Σ_k |α_k v_k|: how much of the context vector comes from each key
and the prediction: the 5 likeliest next tokens, beside the 5 likeliest when the attention over
the source is made uniform (the context becomes the plain average of the encoder states), which
shows what attention changed at that step. The numbers are the model's own, computed in float32
by its reference modules (families.reference_copy, probed through the family's `fit_probe`); the
output is its greedy translation.
"""

from __future__ import annotations

import html
from dataclasses import asdict, dataclass
from typing import Optional, Protocol, Sequence, TypeVar

import torch

from ..errors import AttnmtError
from ..families import reference_copy
from ..seam import AttentionView, Probe, require
from ..translate import TextTranslator, Translator, map_shapes
from .tables import table

TOP = 5


class Explainable(Protocol):
    """What attnmt explain asks of a family's network (seam.py: a capability, not every family's)."""

    def fit_probe(self, view: AttentionView) -> tuple[Probe, AttentionView]:
        """Make the attention `view` of this network (a reference copy made for explaining, in eval mode)
        record its numbers into the probe at each step, and its attention over the source turn uniform
        while `probe.uniform` is set; return the probe and the view with its defaults filled in. Refuses
        a view the family lacks in one line."""
        ...

    def score_function(self, view: AttentionView) -> str:
        """The score of `view` as the model computes it, in one line, for learners."""
        ...


@dataclass(frozen=True)
class Naming:
    """How a refusal names the options of the request it refuses, in the words of the front that
    took it: `attnmt explain`'s flags (--ig-steps) or POST /explain's JSON fields (ig_steps). The
    checks are written once, here and in attribution.py; each front passes its naming."""

    flags: bool                               # True: the CLI's flags; False: the HTTP API's fields
    likeliest: str                            # how this front lists a step's likeliest tokens

    def __call__(self, option: str) -> str:
        """The option (named as its field) as this front spells it: --ig-steps or ig_steps."""
        return "--" + option.replace("_", "-") if self.flags else option

    def given(self, option: str, value: str) -> str:
        """The option with a value, as a user of this front writes it: --attention decoder, or "attention": "decoder"."""
        return f"{self(option)} {value}" if self.flags else f'"{option}": "{value}"'


FLAGS = Naming(True, "attnmt explain MODEL SENTENCE --step N lists the likeliest")
FIELDS = Naming(False, "POST /explain with step N and no attribution lists the likeliest in `next`")


@dataclass
class ExplainedStep:
    step: int                                 # 1 for the first output token
    token: str                                # the token this step chose (<eos> at the end)
    keys: list[str]                           # what the query looked at: source tokens, or outputs so far
    scores: list[Optional[float]]             # e_j over `keys`; None where masked
    weights: list[float]                      # α_j
    shares: list[float]                       # share of the context vector from each key
    next: list[tuple[str, float]]             # the TOP likeliest next tokens with their probabilities
    next_uniform: list[tuple[str, float]]     # the same with uniform attention over the source
    factors: Optional[list[float]] = None     # local-p: α_j = softmax(e)_j × factor_j

    def __repr__(self) -> str:
        likeliest = ", ".join(f"{token} {p:.3f}" for token, p in self.next[:3])
        return f"ExplainedStep(step {self.step} writes {self.token!r} over {len(self.keys)} keys; next: {likeliest})"

    def _repr_html_(self) -> str:
        """Jupyter's view of the step: each key's score, weight and share of the context, and what
        the model predicts next, with its attention and with uniform attention."""
        rows = [(key, [weight, share], "" if score is None else f"score {score:.4f}")
                for key, score, weight, share in zip(self.keys, self.scores, self.weights, self.shares)]
        caption = f"step {self.step} writes {self.token}"
        return "\n".join([table(["weight", "share"], rows, caption, corner="key"),
                          f"<p>next: {html.escape(_likeliest(self.next))}<br>with uniform attention: "
                          f"{html.escape(_likeliest(self.next_uniform))}</p>"])


@dataclass
class Explanation:
    source_tokens: list[str]
    output_tokens: list[str]                  # the greedy translation, end of sentence left out
    attention: str                            # cross, or decoder (self-attention)
    layer: Optional[int]                      # Transformer: the layer and head shown, from 1
    head: Optional[int]
    score_function: str
    steps: list[ExplainedStep]

    def to_dict(self) -> dict:
        return asdict(self)

    def __repr__(self) -> str:
        where = f", layer {self.layer} head {self.head}" if self.layer is not None else ""
        return (f"Explanation({self.attention} attention{where}, {len(self.steps)} steps: "
                f"{' '.join(self.source_tokens)!r} -> {' '.join(self.output_tokens)!r})")

    def _repr_html_(self) -> str:
        """Jupyter's view: each step's attention weights over its keys (a row per step), with the
        likeliest next tokens; a step itself (explanation.steps[i]) shows every number of it."""
        columns = max((step.keys for step in self.steps), key=len, default=[])
        rows = [(f"{step.step} {step.token}", [*step.weights, *[None] * (len(columns) - len(step.weights))],
                 f"next: {_likeliest(step.next[:3])}") for step in self.steps]
        where = f", layer {self.layer}, head {self.head}" if self.layer is not None else ""
        return table(columns, rows, f"{self.attention} attention ({self.score_function}{where})", corner="step")


def _likeliest(tokens: list[tuple[str, float]]) -> str:
    """Tokens with their probabilities, as the CLI's step table and the notebook's tables show them."""
    return " | ".join(f"{token} {p:.4f}" for token, p in tokens)


def opening_steps(translator: TextTranslator) -> Translator:
    """The translator, where its engine can open its decoding steps (`explains`: attnmt's own); else one line."""
    if not translator.explains or not isinstance(translator, Translator):
        raise AttnmtError(f"the {translator.engine_info().engine} engine gives no per-step numbers: explain the model "
                          f"file (.safetensors) with attnmt's own engine")
    return translator


@torch.inference_mode()
def explain(translator: TextTranslator, sentence: str, view: AttentionView = AttentionView(),
            step: Optional[int] = None, naming: Naming = FLAGS) -> Explanation:
    """The numbers of every greedy decoding step of `sentence` (or of step `step` alone, from 1) for
    the attention `view`, where the translator's engine can open its steps (`explains`: attnmt's own).
    `naming`: how a refusal names the options (the CLI's flags, or the HTTP API's fields)."""
    translator = opening_steps(translator)
    source_tokens = translator.tokenize_source(sentence)
    if not source_tokens:
        raise AttnmtError("nothing to explain: the sentence is empty")
    view.check(map_shapes(translator.model))
    text = translator.tokenization
    network = reference_copy(translator.model, len(text.src_vocab), len(text.tgt_vocab))
    explainable: Explainable = require(network, Explainable, "attnmt explain")
    probe, view = explainable.fit_probe(view)
    device = translator.device
    src = torch.tensor([translator.tokenization.src_vocab.encode(source_tokens)], device=device)
    memory, state = network.encode(src, torch.tensor([len(source_tokens)]))
    max_tokens = translator.max_output_tokens(len(source_tokens))  # steps, as the searches allow; cut there: no <eos>
    vocab, symbols = translator.tokenization.tgt_vocab, translator.symbols()

    def top(logits: torch.Tensor) -> list[tuple[str, float]]:
        probabilities = torch.softmax(logits.float(), dim=-1)
        values, ids = probabilities.topk(TOP)
        return [(vocab.itos[i], round(p, 6)) for p, i in zip(values.tolist(), ids.tolist())]

    inputs = [vocab.sos_id]
    steps: list[ExplainedStep] = []
    while not steps or (inputs[-1] != vocab.eos_id and len(steps) < max_tokens):
        previous = torch.tensor([[inputs[-1]]], device=device)
        probe.uniform = True
        uniform_logits, _, _ = network.step(previous, state, memory)            # the counterfactual, same state
        probe.uniform = False
        logits, state, _ = network.step(previous, state, memory)
        chosen = int(symbols.log_probs(logits[0, -1:]).argmax())               # as greedy chooses
        record = probe.record
        assert record is not None, "the probed network records at every step"
        keys = (source_tokens if view.kind == "cross"
                else [vocab.itos[i] for i in inputs])                           # <sos> and the outputs so far
        row = (0, (view.head or 1) - 1, -1)                                    # [sentence, head, this position]
        scores = record.scores[row][: len(keys)].tolist()
        steps.append(ExplainedStep(
            len(steps) + 1, vocab.itos[chosen], keys,
            [round(s, 6) if s != float("-inf") else None for s in scores],
            [round(w, 6) for w in record.weights[row][: len(keys)].tolist()],
            [round(s, 6) for s in record.shares[row][: len(keys)].tolist()],
            top(logits[0, -1]), top(uniform_logits[0, -1]),
            None if record.factors is None else [round(f, 6) for f in record.factors[row][: len(keys)].tolist()]))
        inputs.append(chosen)
    output = [vocab.itos[i] for i in inputs[1:] if i != vocab.eos_id]
    if step is not None:
        check_step_number(step, len(steps), naming)
        steps = [steps[step - 1]]
    return Explanation(source_tokens, output, view.kind, view.layer, view.head,
                       explainable.score_function(view), steps)


def check_step_number(step: int, steps: int, naming: Naming = FLAGS) -> None:
    """Refuse, in one line, a step (from 1) outside a translation of `steps` steps (its tokens and the end)."""
    if not 1 <= step <= steps:
        raise AttnmtError(f"{naming('step')} {step}: this translation has steps 1 to {steps} "
                          f"({steps - 1} tokens and the end of sentence)")


class Numbered(Protocol):
    step: int


Kept = TypeVar("Kept", bound=Numbered)


def kept_step(steps: Sequence[Kept], step: int) -> Kept:
    """Step `step` (from 1) of those kept (every step, or the one asked for), or one line naming them."""
    for kept in steps:
        if kept.step == step:
            return kept
    raise AttnmtError(f"step {step} is not among the steps kept ({', '.join(str(s.step) for s in steps)})")


def render(explanation: Explanation, step: Optional[int] = None) -> str:
    """The explanation as text: one compact line per step, or every number of step `step` (from 1)."""
    steps = explanation.steps
    where = "" if explanation.layer is None else f", layer {explanation.layer}, head {explanation.head}"
    lines = [f"source:      {' '.join(explanation.source_tokens)}",
             f"translation: {' '.join(explanation.output_tokens)}",
             f"attention:   {explanation.attention}{where}",
             f"             {explanation.score_function}",
             "uniform:     what the step predicts when its attention over the source is uniform, i.e. the context "
             "is the plain average of the encoder states (a counterfactual, not the model's output)", ""]
    if step is None:
        lines.append("step token          <- the 3 keys with most weight (key@position weight) | next | uniform")
        for s in steps:
            attended = sorted(zip(s.weights, range(1, len(s.keys) + 1), s.keys), key=lambda a: -a[0])[:3]
            lines.append(f"{s.step:3d} {s.token:<14} <- " + ", ".join(f"{k}@{j} {w:.2f}" for w, j, k in attended)
                         + " | next: " + ", ".join(f"{t} {p:.2f}" for t, p in s.next[:3])
                         + " | uniform: " + ", ".join(f"{t} {p:.2f}" for t, p in s.next_uniform[:3]))
        lines.append("")
        lines.append("attnmt explain MODEL SENTENCE --step N shows every number of step N.")
        return "\n".join(lines)
    s = kept_step(steps, step)
    width = max(len(k) for k in s.keys + ["key"])
    lines.append(f"step {s.step}: the model writes {s.token!r}")
    factor_head = f"  {'× Gaussian':>10}" if s.factors else ""
    lines.append(f"  {'key':<{width}}  {'score e_j':>10}{factor_head}  {'weight α_j':>10}  {'context share':>13}")
    for j, (key, score, weight, share) in enumerate(zip(s.keys, s.scores, s.weights, s.shares)):
        shown = f"{score:10.4f}" if score is not None else f"{'masked':>10}"
        factor = f"  {s.factors[j]:10.4f}" if s.factors else ""
        lines.append(f"  {key:<{width}}  {shown}{factor}  {weight:10.4f}  {share:13.4f}")
    lines.append("  next token, as the model predicts it:   " + _likeliest(s.next))
    lines.append("  with uniform attention (counterfactual): " + _likeliest(s.next_uniform))
    return "\n".join(lines)
