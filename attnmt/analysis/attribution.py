"""Attribution beside attention: how much each source word decides what a decoding step writes.

Does the word the model attends to decide its output? (Jain & Wallace 2019, "Attention is not
Explanation"; Wiegreffe & Pinter 2019.) Attention says where a step looked; attribution says what
its prediction depends on. Both are computed here on a forced decoding: the model reads a
translation as its previous outputs (its own greedy translation, or one the user gives), and the
output of step N is

    f = log p(y_N | x, y_<N)                        the log-probability of the token it writes, or
    f = log p(y_N | x, y_<N) − log p(c | x, y_<N)   contrastive: why y_N rather than c

Every number is in f's units (nats). e_j is the token embedding of input piece j: the source's
pieces, and the target prefix <sos> y_1 .. y_{N-1}; positions and the rest of the network stay.

    grad       gradient × input: a_j = ∂f/∂e_j · e_j, the first-order estimate of what f loses when
               e_j goes to zero
    ig         integrated gradients (Sundararajan et al. 2017), along the straight line from the
               baseline (every e_j zero: the padding embedding) to the input, in m steps:
                   a_j = e_j · (1/m) Σ_i ∂f/∂e_j (α_i e),   α_i = (i − ½) / m   (the midpoint rule)
               Completeness: Σ_j a_j = f(input) − f(baseline), up to the rule's error, which falls
               as m grows; each step reports both sides and whether they agree within COMPLETENESS.
               Where f jumps on the way, no m closes the gap: local-p's window moves with the
               input and cuts positions off sharply, and gradients do not see a position leave it.
    occlusion  f − f(x without the word): the sentence tokenized again without one source word and
               run again. The simple, model-agnostic reference; the source words only.

grad and ig attribute the source and the target prefix together: the source share Σ|source| /
(Σ|source| + Σ|prefix|), over the pieces, says how much of the prediction comes from the source
rather than from the translation so far. Source pieces are merged into words as attnmt align merges
attention (align.to_words: a word's pieces summed); the pieces of no word (a character model's
spaces) are summed apart, as `between_words`, so that what a step shows adds up to what
completeness counts: Σ source + between_words + Σ prefix = total. The attention row beside is the
step's cross-attention as attnmt align reads it (a Transformer's penultimate layer, the mean of its
heads, unless a layer or head is given), the spaces' left out.

The gradients come from a float32 copy of the network with its reference modules, as explain.py's
numbers do; the embeddings are replaced through the family's token_embeddings (`TokenEmbeddings`), so
every family and attention kind is attributed alike, a model without attention too.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable, Optional, Protocol, Union, cast

import numpy as np
import torch
from tqdm import tqdm

from ..batch import pad
from ..choices import IG_STEPS, METHODS
from ..errors import AttnmtError
from ..families import reference_copy
from ..seam import AttentionView, Model, forced_logits, gives, require
from ..tokenize import punctuation_apart, without_span
from ..translate import AttentionMaps, TextTranslator, Translator
from .align import chosen_map, to_words
from .aligner import TokenEmbeddings
from .explain import FLAGS, Explanation, Naming, check_step_number, explain, kept_step, opening_steps
from .tables import table


class Attributable(Model, TokenEmbeddings, Protocol):
    """A network the attributions can read: a model with its token embeddings."""


# ig's completeness holds when the attributions add up to f's change within this share of the
# change (or of 1 nat, for a change under 1).
COMPLETENESS = 0.01
ROWS = 128  # forced passes run side by side, as the rows of one batch


@dataclass
class Completeness:
    """Integrated gradients' check: Σ of the attributions over every input piece (source and prefix)
    against f(input) − f(baseline)."""

    total: float                              # Σ source + between_words + Σ prefix: every share the step shows
    change: float
    holds: bool                               # |total − change| ≤ COMPLETENESS × max(1, |change|)


@dataclass
class AttributedStep:
    step: int                                 # from 1
    token: str                                # what the step writes (<eos> at the end)
    contrast: Optional[str]                   # why `token` rather than this one (None: f = log p(token))
    output: float                             # f
    source: list[float]                       # the attribution of each source word
    between_words: Optional[float]            # grad and ig: that of the source pieces of no word (a character
                                              # model's spaces), counted in the total; None: there are none, or occlusion
    attention: Optional[list[float]]          # the step's attention on each source word; None: the model has none
    prefix: Optional[list[float]]             # the attribution of each target input (<sos> first); None: occlusion
    source_share: Optional[float]             # Σ|source| / (Σ|source| + Σ|prefix|); None: occlusion
    completeness: Optional[Completeness] = None   # ig
    without: Optional[list[float]] = None     # occlusion: f with each source word dropped


@dataclass
class Attribution:
    method: str                               # grad, ig or occlusion
    source_words: list[str]
    target_tokens: list[str]                  # the forced translation, the end of sentence left out
    start_token: str                          # what the decoder reads first: the prefix's first input
    ig_steps: Optional[int]                   # ig: m
    layer: Optional[int]                      # the attention row's layer and head, from 1 (None: align's default)
    head: Optional[int]
    steps: list[AttributedStep]

    def to_dict(self) -> dict:
        return asdict(self)

    def __repr__(self) -> str:
        return (f"Attribution({self.method}, {len(self.steps)} steps over {len(self.source_words)} source words: "
                f"{' '.join(self.source_words)!r} -> {' '.join(self.target_tokens)!r})")

    def _repr_html_(self) -> str:
        """Jupyter's view: each step's attribution over the source words (blue for, red against),
        then its attention over them where the model has one."""
        tables = [table(self.source_words, [(f"{s.step} {s.token}", s.source, _completeness(s)) for s in self.steps],
                        f"{self.method} attribution of each step's output over the source words", signed=True,
                        corner="step")]
        if all(step.attention is not None for step in self.steps):
            rows = [(f"{s.step} {s.token}", s.attention or [], "") for s in self.steps]
            tables.append(table(self.source_words, rows, "attention over the source words", corner="step"))
        return "\n".join(tables)


def _completeness(step: AttributedStep) -> str:
    """The note beside a step's row: its output f, and integrated gradients' check."""
    note = f"f {step.output:.4f}"
    if step.completeness is not None:
        note += f"; Σ {step.completeness.total:.4f} of {step.completeness.change:.4f}"
    return note


@dataclass
class Work:
    """What one attribution runs: for each of `steps` decoding steps, `passes` forced passes (forward,
    and backward for grad and ig) over a sentence pair whose source has `source_tokens` pieces."""

    method: str
    steps: int
    passes: int                               # grad 1; ig its ig_steps + 2 (the input, the baseline); occlusion 1 + the words
    source_tokens: int

    @property
    def units(self) -> int:
        """steps × passes × source tokens: what a server bounds."""
        return self.steps * self.passes * self.source_tokens

    def __str__(self) -> str:
        passes = {"grad": "1 pass", "ig": f"{self.passes} passes (ig_steps, the input and the baseline)",
                  "occlusion": f"{self.passes} passes (the sentence, and without each word)"}[self.method]
        return f"{self.steps} steps × {passes} × {self.source_tokens} source tokens = {self.units}"


@dataclass
class Pair:
    """A sentence pair as the forced decoding reads it."""

    words: list[str]                          # the source words
    src: torch.Tensor                         # [1, S] source piece ids
    owners: list[int]                         # the source word of each piece (-1: none)
    tgt_in: torch.Tensor                      # [1, T] <sos> y_1 .. y_{T-1}
    outputs: list[int]                        # y_1 .. y_{T-1} <eos>: what each step writes
    without: list[list[int]]                  # occlusion: the source ids with each word dropped (else empty)


@dataclass
class Outputs:
    """What f reads at each of R rows: the position (step − 1), the token and, contrastively, the other token."""

    positions: torch.Tensor                   # [R]
    tokens: torch.Tensor                      # [R]
    contrasts: Optional[torch.Tensor] = None  # [R]

    def of(self, log_probs: torch.Tensor) -> torch.Tensor:
        """f [k·R] from log-probabilities [k·R, T, V] of k copies of the rows, one after the other."""
        copies = log_probs.shape[0] // len(self.positions)
        rows = torch.arange(log_probs.shape[0], device=log_probs.device)
        positions = self.positions.repeat(copies)
        f = log_probs[rows, positions, self.tokens.repeat(copies)]
        if self.contrasts is not None:
            f = f - log_probs[rows, positions, self.contrasts.repeat(copies)]
        return f


def reference_network(translator: Translator) -> Attributable:
    """A float32 copy of the translator's network with its reference modules, in eval mode, whose
    weights need no gradient (only the embeddings fed to it do)."""
    text = translator.tokenization
    network = reference_copy(translator.model, len(text.src_vocab), len(text.tgt_vocab)).to(torch.float32)
    for weight in network.parameters():
        weight.requires_grad_(False)
    attributable: Attributable = require(network, Attributable, "attribution")
    return attributable


def make_pair(translator: Translator, words: list[str], target: list[int], occluding: bool = False,
              punctuation: bool = False) -> Pair:
    """The source words (split at whitespace) and the target ids (without <sos> and <eos>) as the
    forced decoding reads them; with `occluding`, the source without each word too. With
    `punctuation`, a word's leading and trailing punctuation are words of their own
    (tokenize.punctuation_apart), as a reader sees them."""
    limit = translator.config.decode.max_src_len

    def source(kept: list[str]) -> tuple[list[int], list[int]]:
        pieces, owners = translator.source_word_tokens(kept, limit)
        return translator.tokenization.src_vocab.encode(pieces), owners

    pieces, owners = translator.source_word_tokens(words, limit)
    shown, spans = words, [(index, 0, len(word)) for index, word in enumerate(words)]
    if punctuation:
        shown, owners, spans = punctuation_apart(words, pieces, owners)
    ids = translator.tokenization.src_vocab.encode(pieces)
    if not ids:
        raise AttnmtError("nothing to attribute: the sentence is empty")
    without = []
    if occluding:
        if len(shown) < 2:
            raise AttnmtError("occlusion drops one source word at a time, and a sentence of one word would leave "
                              "nothing to translate: attribute it with grad or ig")
        without = [source(without_span(words, span))[0] for span in spans]
    device = translator.device
    vocab = translator.tokenization.tgt_vocab
    return Pair(shown, torch.tensor([ids], device=device), owners, torch.tensor([[vocab.sos_id] + target], device=device),
                target + [vocab.eos_id], without)


def _embedded(network: Attributable, pair: Pair) -> tuple[torch.Tensor, torch.Tensor]:
    """The token embeddings of the source [S, E] and of the target inputs [T, E]."""
    source, target = network.token_embeddings()
    with torch.no_grad():
        return source(pair.src)[0], target(pair.tgt_in)[0]


def _log_probs(network: Attributable, src: torch.Tensor, tgt_in: torch.Tensor, source: torch.Tensor,
               target: torch.Tensor) -> torch.Tensor:
    """log p [R, T, V] of the forced pass over src [R, S] and tgt_in [R, T], whose token embeddings
    are `source` [R, S, E] and `target` [R, T, E] instead of the ids' own."""
    given = {id(src): source, id(tgt_in): target}
    replaced = []

    def replace(module: torch.nn.Module, inputs: tuple[torch.Tensor], output: torch.Tensor) -> torch.Tensor:
        replaced.append(id(inputs[0]))
        return given.get(id(inputs[0]), output)

    handles = [module.register_forward_hook(replace) for module in set(network.token_embeddings())]
    try:
        logits = forced_logits(network, src, torch.full((src.shape[0],), src.shape[1]), tgt_in)
    finally:
        for handle in handles:
            handle.remove()
    assert sorted(replaced) == sorted(given), "a family's network embeds the source and the target once each"
    return logits.float().log_softmax(-1)


def _gradients(network: Attributable, pair: Pair, outputs: Outputs, embedded: tuple[torch.Tensor, torch.Tensor],
               scales: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
    """∂f/∂e at the embeddings scaled by each of `scales` [k], summed over the k scales: [R, S, E]
    for the source, [R, T, E] for the target inputs; and f at each scale, [k·R]."""
    rows, k = len(outputs.positions), len(scales)
    scales = scales.to(embedded[0].device).view(k, 1, 1, 1)
    inputs = [(scales * e).expand(k, rows, *e.shape).reshape(k * rows, *e.shape).requires_grad_() for e in embedded]
    f = outputs.of(_log_probs(network, pair.src.repeat(k * rows, 1), pair.tgt_in.repeat(k * rows, 1), *inputs))
    grads = torch.autograd.grad(f.sum(), inputs)
    return [g.view(k, rows, *g.shape[1:]).sum(0) for g in grads], f.detach()


def gradient_x_input(network: Attributable, pair: Pair, outputs: Outputs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """grad: a_j = ∂f/∂e_j · e_j of each source piece [R, S] and target input [R, T], and f [R]."""
    embedded = _embedded(network, pair)
    grads, f = _gradients(network, pair, outputs, embedded, torch.ones(1))
    source, prefix = ((g * e).sum(-1) for g, e in zip(grads, embedded))
    return source, prefix, f


def integrated_gradients(network: Attributable, pair: Pair, outputs: Outputs, steps: int = IG_STEPS, progress: bool = False
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """ig: a_j of each source piece [R, S] and target input [R, T] in `steps` steps (the module's
    docstring), f [R] and f at the baseline [R]."""
    embedded = _embedded(network, pair)
    rows = len(outputs.positions)
    sums = [e.new_zeros(rows, *e.shape) for e in embedded]
    alphas = (torch.arange(steps) + 0.5) / steps
    with tqdm(total=steps, desc="integrated gradients", unit=" steps", disable=None if progress else True,
              leave=False) as bar:
        for chunk in alphas.split(max(1, ROWS // rows)):
            grads, _ = _gradients(network, pair, outputs, embedded, chunk)
            sums = [s + g for s, g in zip(sums, grads)]
            bar.update(len(chunk))
    _, ends = _gradients(network, pair, outputs, embedded, torch.tensor([1.0, 0.0]))  # the input, the baseline
    source, prefix = ((s / steps * e).sum(-1) for s, e in zip(sums, embedded))
    return source, prefix, ends[:rows], ends[rows:]


@torch.no_grad()
def occlusion(network: Model, pair: Pair, outputs: Outputs) -> tuple[torch.Tensor, torch.Tensor]:
    """occlusion: f [R] and f with each source word dropped, [R, W] (pair.without)."""
    rows = len(outputs.positions)
    sources, per_pass = [pair.src[0].tolist(), *pair.without], max(1, ROWS // rows)
    f = []
    for start in range(0, len(sources), per_pass):
        chunk = [ids for ids in sources[start: start + per_pass] for _ in range(rows)]  # each source's rows together
        logits = forced_logits(network, pad(chunk).to(pair.src.device), torch.tensor([len(ids) for ids in chunk]),
                               pair.tgt_in.repeat(len(chunk), 1))
        f.append(outputs.of(logits.float().log_softmax(-1)).view(-1, rows))
    every = torch.cat(f)                                                   # [1 + W, R]
    return every[0], every[1:].T


def attribute_steps(network: Attributable, pair: Pair, outputs: Outputs, method: str, vocab_itos: list[str],
                    ig_steps: int = IG_STEPS, layer: Optional[int] = None, head: Optional[int] = None,
                    progress: bool = False) -> list[AttributedStep]:
    """The attribution of each row of `outputs` by `method`, beside the attention."""
    rows, words = len(outputs.positions), len(pair.words)
    positions = outputs.positions.tolist()
    completeness: list[Optional[Completeness]] = [None] * rows
    shares: list[Optional[float]] = [None] * rows
    between: list[Optional[float]] = [None] * rows
    without: Optional[torch.Tensor] = None
    prefix: Optional[torch.Tensor] = None
    if method == "occlusion":
        f, without = occlusion(network, pair, outputs)
        source = (f[:, None] - without).cpu().numpy()                     # [R, W]
    else:
        if method == "grad":
            pieces, prefix, f = gradient_x_input(network, pair, outputs)
        else:
            pieces, prefix, f, baseline = integrated_gradients(network, pair, outputs, ig_steps, progress)
            totals, changes = (pieces.sum(-1) + prefix.sum(-1)).tolist(), (f - baseline).tolist()
            completeness = [Completeness(t, c, abs(t - c) <= COMPLETENESS * max(1.0, abs(c)))
                            for t, c in zip(totals, changes)]
        from_source, from_prefix = pieces.abs().sum(-1), prefix.abs().sum(-1)
        shares = (from_source / (from_source + from_prefix).clamp_min(1e-30)).tolist()
        source = to_words(pieces.cpu().numpy(), pair.owners, list(range(rows)), words, rows)  # [R, W]
        of_no_word = [j for j, owner in enumerate(pair.owners) if owner < 0]
        if of_no_word:                                                     # left out of the words, not of the total
            between = [round(float(a), 6) for a in pieces[:, of_no_word].sum(-1).tolist()]
    maps = {}
    if gives(network, AttentionMaps):
        with torch.no_grad():
            maps = cast(AttentionMaps, network).attention_maps(pair.src, torch.tensor([pair.src.shape[1]]), pair.tgt_in)
    attention = None
    if "cross" in maps:
        cross = chosen_map(maps["cross"], layer, head)[0, positions].float().cpu().numpy()   # [R, S]
        attention = to_words(cross, pair.owners, list(range(rows)), words, rows)
    contrasts = None if outputs.contrasts is None else outputs.contrasts.tolist()
    steps = []
    for r, (position, token, share) in enumerate(zip(positions, outputs.tokens.tolist(), shares)):
        steps.append(AttributedStep(
            position + 1, vocab_itos[token], None if contrasts is None else vocab_itos[contrasts[r]],
            round(float(f[r]), 6), _rounded(source[r]), between[r],
            None if attention is None else _rounded(attention[r]),
            None if prefix is None else _rounded(prefix[r, : position + 1].cpu().numpy()),
            None if share is None else round(share, 6), completeness[r],
            None if without is None else _rounded(without[r].cpu().numpy())))
    return steps


def _rounded(values: np.ndarray) -> list[float]:
    return [round(float(v), 6) for v in values]


# Gradients, whatever the caller runs under (a server's model thread, torch.inference_mode): the
# network's copy and every tensor fed to it are made in here.
@torch.inference_mode(False)
@torch.enable_grad()
def attribute(translator: Translator, sentence: str, method: str = "ig", step: Optional[int] = None,
              target: Optional[str] = None, contrast: Optional[str] = None, ig_steps: int = IG_STEPS,
              layer: Optional[int] = None, head: Optional[int] = None, progress: bool = False,
              afford: Optional[Callable[[Work], None]] = None, naming: Naming = FLAGS) -> Attribution:
    """The attribution of every step of the forced decoding of `sentence` (or of step `step` alone,
    from 1) over its source words, beside the attention: the decoding of the model's own greedy
    translation, or of `target`. `contrast`, a token of the target vocabulary, asks why the step
    wrote its token rather than this one (with `step`). `progress`: a progress bar for ig.
    `afford` sees the work before it runs, and may refuse it by raising. `naming`: how a refusal
    names the options (the CLI's flags, or the HTTP API's fields)."""
    _check_method(method, ig_steps)
    words = sentence.split()
    if not words:
        raise AttnmtError("nothing to attribute: the sentence is empty")
    if contrast is not None and step is None:
        raise AttnmtError(f"{naming('contrast')} needs {naming('step')}: it asks why one step wrote its token rather "
                          f"than another")
    vocab = translator.tokenization.tgt_vocab
    other = None if contrast is None else _target_token(translator, contrast, naming)
    if target is None:
        tokens = translator.translate([sentence], beam_size=1)[0].tokens
    else:
        tokens = translator.tgt_tokenizer.tokenize(target)
        if not tokens:
            raise AttnmtError(f"{naming('target')} is empty: give the translation to attribute, or leave it out to "
                              f"attribute the model's own")
    pair = make_pair(translator, words, vocab.encode(tokens), method == "occlusion", punctuation=True)
    if step is not None:
        check_step_number(step, len(pair.outputs), naming)
        if other == pair.outputs[step - 1]:
            raise AttnmtError(f"{naming('contrast')} {contrast}: step {step} writes {vocab.itos[other]!r} itself; contrast it "
                              f"with another token")
    device = translator.device
    positions = torch.arange(len(pair.outputs), device=device) if step is None else torch.tensor([step - 1], device=device)
    outputs = Outputs(positions, torch.tensor(pair.outputs, device=device)[positions],
                      None if other is None else torch.tensor([other], device=device))
    if afford is not None:
        passes = {"grad": 1, "ig": ig_steps + 2, "occlusion": 1 + len(pair.without)}[method]
        afford(Work(method, len(positions), passes, pair.src.shape[1]))
    steps = attribute_steps(reference_network(translator), pair, outputs, method, vocab.itos, ig_steps, layer, head,
                            progress)
    return Attribution(method, pair.words, tokens, vocab.sos, ig_steps if method == "ig" else None, layer, head, steps)


def explain_or_attribute(translator: TextTranslator, sentence: str, view: AttentionView = AttentionView(),
                         step: Optional[int] = None, method: Optional[str] = None, target: Optional[str] = None,
                         contrast: Optional[str] = None, ig_steps: Optional[int] = None, progress: bool = False,
                         afford: Optional[Callable[[Work], None]] = None,
                         naming: Naming = FLAGS) -> Union[Explanation, Attribution]:
    """What `attnmt explain` and POST /explain answer for one sentence: every number of each greedy
    decoding step for the attention `view` (explain.explain) or, with an attribution `method`, how
    much each source word decides each step's output beside its cross-attention (attribute: `target`,
    `contrast`, `ig_steps` (default IG_STEPS), `afford`); with `step` (from 1), that step alone.
    `naming`: how a refusal names the options, in the words of the front that asks (explain.Naming)."""
    if method is None:
        if (target, contrast, ig_steps) != (None, None, None):
            raise AttnmtError(f"{naming('target')}, {naming('contrast')} and {naming('ig_steps')} go with "
                              f"{naming('attribution')}")
        return explain(translator, sentence, view, step, naming)
    if ig_steps is not None and method != "ig":
        raise AttnmtError(f"{naming('ig_steps')} goes with {naming.given('attribution', 'ig')}: the other methods take "
                          f"no steps")
    if view.kind != "cross":
        raise AttnmtError(f"{naming('attribution')}: attribution is over the source words, beside the cross-attention: "
                          f"leave out {naming.given('attention', 'decoder')}")
    return attribute(opening_steps(translator), sentence, method, step, target, contrast,
                     IG_STEPS if ig_steps is None else ig_steps, view.layer, view.head, progress, afford, naming)


@torch.inference_mode(False)
@torch.enable_grad()
def word_attribution(translator: Translator, pairs: list[tuple[list[str], list[str]]], method: str = "grad",
                     ig_steps: int = IG_STEPS, progress: bool = False) -> list[np.ndarray]:
    """For each (source words, target words) pair, the attribution of each target word over the
    source words [len(target), len(source)] in the forced decoding of the pair: that of the steps
    writing a target word's pieces, averaged over them (as align.word_attention averages attention).
    `progress`: a progress bar over the pairs."""
    _check_method(method, ig_steps)
    network = reference_network(translator)
    results = []
    for source, target in tqdm(pairs, desc=method, unit=" pairs", disable=None if progress else True, leave=False):
        pieces, owners = translator.tgt_tokenizer.tokenize_words(target)
        if not source or not pieces:
            results.append(np.zeros((len(target), len(source)), dtype=np.float32))
            continue
        if method == "occlusion" and len(source) == 1:   # nothing left to run without it: all of it, as attention
            results.append(np.ones((len(target), 1), dtype=np.float32))
            continue
        ids = translator.tokenization.tgt_vocab.encode(pieces)
        pair = make_pair(translator, source, ids, method == "occlusion")
        outputs = Outputs(torch.arange(len(ids), device=translator.device), torch.tensor(ids, device=translator.device))
        steps = attribute_steps(network, pair, outputs, method, translator.tokenization.tgt_vocab.itos, ig_steps)
        by_piece = np.array([s.source for s in steps], dtype=np.float32)   # [pieces, source words]
        results.append(to_words(by_piece, list(range(len(source))), owners, len(source), len(target)))
    return results


def _check_method(method: str, ig_steps: int) -> None:
    if method not in METHODS:
        raise AttnmtError(f"attribution {method!r}: choose {', '.join(METHODS)}")
    if not 1 <= ig_steps <= 10000:
        raise AttnmtError(f"ig_steps {ig_steps}: allowed 1 to 10000")


def _target_token(translator: Translator, word: str, naming: Naming) -> int:
    """The id of `word` in the target vocabulary: of the one token the tokenizer makes of it (▁man
    of "man", the piece that starts a word), else of the token as it is (<eos>, or a piece as written)."""
    vocab = translator.tokenization.tgt_vocab
    pieces = translator.tgt_tokenizer.tokenize(word)
    if len(pieces) == 1 and pieces[0] in vocab.stoi:
        return vocab.stoi[pieces[0]]
    if word in vocab.stoi:
        return vocab.stoi[word]
    made = f" (the tokenizer makes it {' '.join(pieces)})" if pieces else ""
    raise AttnmtError(f"{naming('contrast')} {word!r}: the target vocabulary has no such token{made}; give one token "
                      f"the model can write ({naming.likeliest})")


def render(attribution: Attribution, step: Optional[int] = None) -> str:
    """As text: one line per step (the source word with most attention, the one with most
    attribution), or every number of step `step` (from 1)."""
    method = attribution.method
    described = {"grad": "gradient × input, ∂f/∂e_j · e_j",
                 "ig": f"integrated gradients from all-zero embeddings in {attribution.ig_steps} steps",
                 "occlusion": "occlusion, f − f with the word dropped (the sentence run again without it)"}[method]
    view = "".join(f", {name} {n}" for name, n in (("layer", attribution.layer), ("head", attribution.head)) if n)
    lines = [f"source:       {' '.join(attribution.source_words)}",
             f"translation:  {' '.join(attribution.target_tokens)}",
             f"attribution:  {described}, of f = log p(the step's token), in nats; per source word",
             f"attention:    the step's cross-attention on each source word, as attnmt align reads it{view}", ""]
    steps = attribution.steps
    if step is None:
        lines.append(f"step {'token':<14} {'most attention':<22} {'most attribution':<22} source share")
        for s in steps:
            attended = "none" if s.attention is None else _top(attribution.source_words, s.attention)
            share = "" if s.source_share is None else f"{s.source_share:.2f}"
            lines.append(f"{s.step:4d} {s.token:<14} {attended:<22} {_top(attribution.source_words, s.source):<22} {share}")
        lines += ["", "attnmt explain MODEL SENTENCE --attribution METHOD --step N shows every number of step N."]
        return "\n".join(lines)
    s = kept_step(steps, step)
    if s.contrast is None:
        lines.append(f"step {s.step}: the model writes {s.token!r}: f = log p = {s.output:.4f} (p {np.exp(s.output):.4f})")
    else:
        lines.append(f"step {s.step}: why {s.token!r} rather than {s.contrast!r}: "
                     f"f = log p({s.token!r}) − log p({s.contrast!r}) = {s.output:.4f}")
    between = "(between words)"           # the pieces of no word: a character model's spaces
    labels = attribution.source_words + ["word"] + ([between] if s.between_words is not None else [])
    width = max(len(label) for label in labels)
    dropped = "" if s.without is None else f"  {'f without it' if s.contrast else 'p without it':>12}"
    lines.append(f"  {'word':<{width}}  {'attention':>9}  {'attribution':>11}{dropped}")
    for j, word in enumerate(attribution.source_words):
        attention = "" if s.attention is None else f"{s.attention[j]:.4f}"
        without = "" if s.without is None else f"  {s.without[j] if s.contrast else np.exp(s.without[j]):12.4f}"
        lines.append(f"  {word:<{width}}  {attention:>9}  {s.source[j]:11.4f}{without}")
    if s.between_words is not None:
        lines.append(f"  {between:<{width}}  {'':>9}  {s.between_words:11.4f}")
    if s.attention is None:
        lines.append("  (this model has no attention)")
    if s.prefix is not None and s.source_share is not None:
        inputs = [attribution.start_token, *attribution.target_tokens][: len(s.prefix)]
        lines.append(f"  the source gives {s.source_share:.0%} of the attribution's magnitude, the translation so far "
                     f"{1 - s.source_share:.0%}: " + " | ".join(f"{t} {a:.4f}" for t, a in zip(inputs, s.prefix)))
    if s.completeness is not None:
        c = s.completeness
        verdict = ("within the tolerance" if c.holds else "outside the tolerance: more --ig-steps close it, unless f "
                   "jumps on the way (a local-p window)")
        parts = "source words, between words and prefix" if s.between_words is not None else "source and prefix"
        lines.append(f"  completeness: the attributions ({parts}) add up to {c.total:.4f}, "
                     f"f(input) − f(baseline) = {c.change:.4f}: {verdict} ({COMPLETENESS:.0%} of the change, at least "
                     f"{COMPLETENESS})")
    return "\n".join(lines)


def _top(words: list[str], values: list[float]) -> str:
    best = int(np.argmax(values))
    return f"{words[best]} {values[best]:.2f}"
