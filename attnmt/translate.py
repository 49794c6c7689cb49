"""The Translator: a trained model with its tokenizers and vocabularies, text in, text out."""

from __future__ import annotations

import abc
import copy
import itertools
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator, Optional, Protocol, cast

import numpy as np
import torch

from .batch import pad
from .choices import MAP_AXES
from .config import Config, override_decode_precision, source_languages
from .errors import AttnmtError, first_line
from .families import build_holding, build_model
from .fast import fast_paths_in
from .fast.compiled import compiled_step
from .fast.int8 import int8_decoding_copy
from .modelfile import ModelDescription, describe, load_file, network_weights, read_model, save_model
from .precision import has_lstm, precision_note, resolve_device
from .precision import resolve as resolve_precision
from .seam import AttentionView, Model, gives, require
from .search import Hypothesis, SearchSettings, Step, Symbols, beam_search, greedy, top_k
from .tokenize import Tokenizer
from .vocab import SOS, Tokenization

if TYPE_CHECKING:
    from matplotlib.figure import Figure

CHUNK = 64  # batches of sentences read, handed to one search call and yielded at a time


class AttentionMaps(Protocol):
    """What heatmaps, alignments and the explorer ask of a family's network (seam.py: a capability,
    not every family's): every attention map of a teacher-forced pass, and their shapes."""

    def attention_maps(self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor
                       ) -> dict[str, torch.Tensor]:
        """Every attention map of the teacher-forced pass, name -> [B, layers, heads, queries, keys]:
        "cross" (target over source), and "encoder" / "decoder" self-attention where the family has them."""
        ...

    def map_shapes(self) -> dict[str, tuple[int, int]]:
        """The maps attention_maps gives, name -> (layers, heads); empty for a model without attention."""
        ...


def map_shapes(model: Model) -> dict[str, tuple[int, int]]:
    """The attention maps `model` gives, name -> (layers, heads); none for a family without AttentionMaps."""
    return cast(AttentionMaps, model).map_shapes() if gives(model, AttentionMaps) else {}


def check_n_best(n_best: int, beam_size: int, names: tuple[str, str] = ("n_best", "beam_size")) -> None:
    """Refuse more translations per sentence than the beam keeps: 1 ≤ n_best ≤ beam_size. `names` are
    the two as the caller's user writes them (the CLI's --n-best and --beam, a request's n_best and beam)."""
    wanted, beam = names
    if n_best < 1:
        raise AttnmtError(f"{wanted}: {n_best}; ask for 1 or more")
    if n_best > beam_size:
        raise AttnmtError(f"{wanted}: {n_best} is more than the beam ({beam_size}); ask for {beam} {n_best} or more")


@dataclass
class Translation:
    text: str                       # detokenized output
    tokens: list[str]               # output tokens, without EOS
    source_tokens: list[str]        # the tokens the model read
    attention: Optional[np.ndarray]  # [len(tokens), len(source_tokens)]; None for attention `none`
    log_prob: float                 # log-probability the model gives this output (EOS included)
    # A text's translation: its sentences' (documents.text joins them); a sentence's: empty.
    parts: list["Translation"] = field(default_factory=list, repr=False)

    @property
    def confidence(self) -> float:
        """How sure the model is of this translation, in (0, 1]: the geometric mean of the probabilities it
        gave the tokens it wrote, the end of sentence included, exp(log_prob / (tokens + 1)); a text's, over
        all its sentences' tokens. 1.0 for an empty text, where the model wrote nothing."""
        written = sum(len(sentence.tokens) + 1 for sentence in self.parts or [self] if sentence.tokens)
        return math.exp(self.log_prob / written) if written else 1.0

    def __repr__(self) -> str:
        shape = "none" if self.attention is None else "x".join(map(str, self.attention.shape))
        return (f"Translation({self.text!r}, {len(self.tokens)} tokens from {len(self.source_tokens)}, "
                f"log_prob={self.log_prob:.4f}, confidence={self.confidence:.3f}, attention {shape})")

    def _repr_png_(self) -> Optional[bytes]:
        """Jupyter's picture of the translation: its attention heatmap (TextTranslator.figure draws
        any layer, head or kind)."""
        if self.attention is None or not self.tokens or not self.source_tokens:
            return None
        from .plot import attention_figure, png_bytes

        return png_bytes(attention_figure(self.attention, self.source_tokens, self.tokens, title=self.text))


class TextTranslator(abc.ABC):
    """Sentences in, translations out: what every decoding engine shares (tokenizing, empty
    sentences, streaming in chunks, the n-best checks). An engine (attnmt's own `Translator`, or
    ct2.CTranslate2Translator for an exported model) sets `config` and the tokenizers, and runs
    the search of tokenized sentences in `_search`."""

    config: Config
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    explains: bool = False   # analysis/explain.py can open each decoding step (attnmt's own engine)
    source_end: Optional[str] = None   # the token every source ends with, if the model reads one (model.source_eos)
    start_token: str = SOS             # the token the decoder starts from: the first key of its self-attention

    def alignment_method(self) -> Optional[str]:
        """The attention alignment this engine gives: "argmax" (attention's), or None where it cannot (an
        engine without the model's weights); align.alignment_method adds the aligner a model file may hold."""
        return None

    def tokenize_source(self, text: str) -> list[str]:
        """The tokens the model reads of `text`: at most decode.max_src_len, then its end token if it
        reads one (none for an empty text, which is not translated)."""
        tokens = self.src_tokenizer.tokenize(text)[: self.config.decode.max_src_len]
        return tokens + [self.source_end] if tokens and self.source_end else tokens

    def fits(self, text: str) -> bool:
        """Whether the model reads all of `text`: at most decode.max_src_len tokens (documents.text cuts a
        longer sentence at a clause end rather than let tokenize_source drop its end)."""
        return len(self.src_tokenizer.tokenize(text)) <= self.config.decode.max_src_len

    def source_languages(self) -> list[str]:
        """The languages the model reads, as its config declares them."""
        return source_languages(self.config.data)

    def source_word_tokens(self, words: list[str], limit: Optional[int] = None) -> tuple[list[str], list[int]]:
        """The tokens the model reads of a sentence given as words (at most `limit`, then its end token
        if it reads one), and for each the index of its word (-1: none, as that end token)."""
        tokens, owners = self.src_tokenizer.tokenize_words(words)
        tokens, owners = tokens[:limit], owners[:limit]
        if tokens and self.source_end:
            return tokens + [self.source_end], owners + [-1]
        return tokens, owners

    def max_output_tokens(self, source_length: int) -> int:
        """The most tokens a translation of `source_length` tokens may have, every engine's and
        analysis/explain.py's one rule: decode.max_len_ratio x source_length + decode.max_len_extra.

        The end of sentence is not counted: the rule bounds what the reader gets, and an output cut
        at the limit has no <eos> to count (greedy and beam search then force one, so their limit
        in decoding steps is one more; CTranslate2 and explain stop there).
        """
        decode = self.config.decode
        return int(source_length * decode.max_len_ratio) + decode.max_len_extra

    def settings(self, beam_size: Optional[int] = None, alpha: Optional[float] = None, n_best: int = 1,
                 batch_size: Optional[int] = None, names: tuple[str, str] = ("n_best", "beam_size")) -> SearchSettings:
        """How a call searches: the config's decode settings where the caller says nothing (the one place
        every front's defaults are chosen), n_best checked against the beam (check_n_best, its mistakes
        named by `names`, as the caller's user writes them)."""
        decode = self.config.decode
        beam_size = decode.beam_size if beam_size is None else beam_size
        if beam_size < 1:
            raise AttnmtError(f"{names[1]}: {beam_size}; ask for 1 (greedy decoding) or more")
        check_n_best(n_best, beam_size, names)
        return SearchSettings(beam_size, decode.alpha if alpha is None else alpha, n_best, decode.beam_scoring,
                              batch_size or decode.batch_size)

    def translate(self, texts: list[str], beam_size: Optional[int] = None, alpha: Optional[float] = None,
                  batch_size: Optional[int] = None) -> list[Translation]:
        """Translate sentences: greedy, or beam search when beam_size > 1 (default: the config's)."""
        return [nbest[0] for nbest in self.translate_nbest(texts, 1, beam_size, alpha, batch_size)]

    def translate_nbest(self, texts: list[str], n_best: int = 1, beam_size: Optional[int] = None,
                        alpha: Optional[float] = None, batch_size: Optional[int] = None) -> list[list[Translation]]:
        """The n_best translations of each sentence, best first, in the order of `texts` (see translate_stream)."""
        return [nbest for chunk in self.translate_stream(texts, n_best, beam_size, alpha, batch_size) for nbest in chunk]

    def translate_stream(self, texts: Iterable[str], n_best: int = 1, beam_size: Optional[int] = None,
                         alpha: Optional[float] = None,
                         batch_size: Optional[int] = None) -> Iterator[list[list[Translation]]]:
        """Translate sentences as they come (see stream), searched as `settings` says of these arguments."""
        return self.stream(texts, self.settings(beam_size, alpha, n_best, batch_size))

    def stream(self, texts: Iterable[str], settings: SearchSettings) -> Iterator[list[list[Translation]]]:
        """Translate sentences as they come, searched as `settings` says: pulls CHUNK batches' worth of
        `texts` at a time and yields their n_best lists (best first), in the order of `texts`, before it
        pulls more.

        Memory does not grow with the input, which may be a lazy iterator (a file's lines).
        Sentences are decoded longest first within their chunk, at most batch_size at a time; an
        empty sentence gets one empty translation. Mistakes in the arguments raise at the call.
        """
        if isinstance(texts, str):
            raise TypeError("translate() takes a list of sentences; wrap a single one: translate([text])")
        return self._stream(iter(texts), settings)

    def _stream(self, texts: Iterator[str], settings: SearchSettings) -> Iterator[list[list[Translation]]]:
        while chunk := list(itertools.islice(texts, CHUNK * (settings.batch_size or 1))):
            yield self._translate_chunk(chunk, settings)

    def _translate_chunk(self, texts: list[str], settings: SearchSettings) -> list[list[Translation]]:
        """The n_best lists of `texts`, decoded by one search call."""
        sources = [self.tokenize_source(t) for t in texts]
        results: list[list[Translation]] = [[] for _ in texts]
        for i, tokens in enumerate(sources):
            if not tokens:  # nothing to translate: say nothing, do not make the model guess
                results[i] = [Translation("", [], [], np.zeros((0, 0), dtype=np.float32), 0.0)]
        ids = [i for i, tokens in enumerate(sources) if tokens]
        if ids:
            for i, nbest in zip(ids, self._search([sources[i] for i in ids], settings)):
                results[i] = nbest
        return results

    @abc.abstractmethod
    def _search(self, sources: list[list[str]], settings: SearchSettings) -> list[list[Translation]]:
        """The n_best translations of each tokenized (non-empty) source, in their order."""

    @abc.abstractmethod
    def precision_note(self) -> Optional[str]:
        """One line on the precision chosen (for `auto`) or a warning, or None."""

    @abc.abstractmethod
    def attention_maps(self, translation: Translation) -> dict[str, np.ndarray]:
        """Every attention map the engine can give for one translation, name -> [layers, heads,
        queries, keys] (Translator.attention_maps says which)."""

    @abc.abstractmethod
    def engine_info(self) -> EngineInfo:
        """What decodes here, as a server reports it (/model)."""

    def figure(self, translation: Translation, attention: str = "cross", layer: Optional[int] = None,
               head: Optional[int] = None, grid: bool = False, title: Optional[str] = None) -> Figure:
        """A matplotlib Figure of one translation's attention, as `attnmt plot` draws it: the map
        `attention` (cross, or a Transformer's encoder or decoder self-attention) of layer `layer` (from 1;
        None: the last) averaged over the heads, or head `head` alone; with `grid`, every layer and head.
        `title`: the figure's (None: the translation's text)."""
        from .plot import attention_figure, attention_grid_figure

        maps = self.attention_maps(translation)
        if attention not in maps:
            raise AttnmtError(f"attention {attention}: this model has no such attention; it has {', '.join(maps)}")
        AttentionView(attention, layer, head).check({name: m.shape[:2] for name, m in maps.items()})
        chosen = maps[attention]                                            # [layers, heads, queries, keys]
        keys = translation.source_tokens if attention != "decoder" else [self.start_token, *translation.tokens[:-1]]
        queries = translation.tokens if attention != "encoder" else translation.source_tokens
        title = translation.text if title is None else title
        if grid:
            return attention_grid_figure(chosen, keys, queries, title=f"{attention} attention: {title}",
                                         axes=MAP_AXES[attention])
        maps_of_layer = chosen[(layer or chosen.shape[0]) - 1]              # [heads, queries, keys]
        weights = maps_of_layer.mean(0) if head is None else maps_of_layer[head - 1]
        return attention_figure(weights, keys, queries, title=title, axes=MAP_AXES[attention])


@dataclass
class EngineInfo:
    engine: str                                  # attnmt or ctranslate2
    architecture: dict[str, int | str | bool]    # the family's sizes and kinds (Model.describe)
    src_vocab_size: int
    tgt_vocab_size: int
    precision: str                               # fp32, bf16 or int8: decode.precision with auto resolved
    maps: dict[str, tuple[int, int]]             # the maps attention_maps gives, name -> (layers, heads)


class Translator(TextTranslator):
    """attnmt's own engine: a trained model with its tokenizers and vocabularies."""

    explains = True

    def __init__(self, model: Model, config: Config, tokenization: Tokenization, compile: bool = False):
        self.model = model
        # Decode with the step compiled for this CPU (compiled.py). Like the device, a choice of
        # the machine that decodes, not stored in model files.
        self.compile = compile
        self.config = config
        self.tokenization = tokenization
        # The tokenizers every engine has (TextTranslator); the vocabularies are this engine's own.
        self.src_tokenizer, self.tgt_tokenizer = tokenization.src_tokenizer, tokenization.tgt_tokenizer
        self._decoding_copy: Optional[tuple[tuple, Model, Optional[Step]]] = None
        # The file it was loaded from (load), where analysis/align.py reads what else the file holds (its word aligner).
        self.path: Optional[Path] = None
        self.source_end = tokenization.src_vocab.eos if config.model.source_eos else None
        self.start_token = tokenization.tgt_vocab.sos
        self.symbols()   # a token decode.never_generate names is refused here, at load

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def alignment_method(self) -> Optional[str]:
        return "argmax" if "cross" in map_shapes(self.model) else None

    @property
    def description(self) -> ModelDescription:
        return ModelDescription(self.config, self.tokenization)

    def save(self, path: str | Path, training: Optional[dict] = None) -> None:
        """Write the model as one self-contained file (atomically), with how it was trained if given.
        Without an aligner: training calls this, and an aligner reads the weights it was trained on."""
        save_model(path, self.description, self.model.state_dict(), training)

    @classmethod
    def load(cls, path: str | Path, device: str = "auto", precision: Optional[str] = None,
             compile: bool = False, fast_paths: Optional[bool] = None) -> "Translator":
        """Load a model file (or a training checkpoint) written by `save`; `precision` (fp32, bf16,
        int8 or auto) and `fast_paths` override the decode.precision and decode.fast_paths it was
        saved with; `compile`: decode with the step compiled for this CPU (fast/compiled.py)."""
        tensors, meta = load_file(path)
        description, weights = describe(path, meta), network_weights(tensors)
        config = description.config
        if fast_paths is not None:
            config.decode.fast_paths = fast_paths
        text = description.tokenization
        try:
            model = build_holding(config.model, len(text.src_vocab), len(text.tgt_vocab), weights,
                                  config.decode.fast_paths)
        except RuntimeError as err:
            raise AttnmtError(f"{path}: weights do not match the model described in the file ({first_line(err)})") from None
        override_decode_precision(config, precision)
        model.to(resolve_device(device)).eval()
        translator = cls(model, config, text, compile)
        translator.path = Path(path)
        if compile:  # compile (or load) the step now, not in the first request of a server
            translator._decoding()
        return translator

    def symbols(self) -> Symbols:
        """The target vocabulary's start and end tokens, and decode.never_generate's tokens as ids."""
        vocab, never = self.tokenization.tgt_vocab, self.config.decode.never_generate
        unknown = [token for token in never if token not in vocab.stoi]
        if unknown:
            raise AttnmtError(f"decode.never_generate: {', '.join(map(repr, unknown))} not in the target vocabulary")
        if vocab.eos in never:
            raise AttnmtError(f"decode.never_generate: {vocab.eos!r} is the end token: an output could never end")
        return Symbols(vocab.sos_id, vocab.eos_id, tuple(vocab.stoi[token] for token in never))

    @property
    def precision(self) -> str:
        """The precision decoding runs in here: decode.precision, with `auto` resolved for the device."""
        return resolve_precision(self.config.decode.precision, self.device)

    def precision_note(self) -> Optional[str]:
        """One line on the precision chosen (for `auto`) or a warning (bf16 without native bf16), or None."""
        return precision_note({"decode.precision": self.config.decode.precision}, self.device, has_lstm(self.model.modules()))

    def _search(self, sources: list[list[str]], settings: SearchSettings) -> list[list[Translation]]:
        # Longest first: sentences of similar length share the batch (few pads), and the last steps,
        # where the batch empties, are those of the shortest sentences.
        ids = sorted(range(len(sources)), key=lambda i: -len(sources[i]))
        self.model.eval()
        model, step = self._decoding()
        src = pad([self.tokenization.src_vocab.encode(sources[i]) for i in ids]).to(self.device)  # [len(ids), longest source]
        lengths = torch.tensor([len(sources[i]) for i in ids])
        # In decoding steps: the tokens and the <eos> the searches force at the limit.
        max_lengths = torch.tensor([self.max_output_tokens(n) + 1 for n in lengths.tolist()])
        settings = replace(settings, symbols=self.symbols(), top_k=top_k(self.config.decode.fast_paths), step=step)
        if settings.beam_size == 1:
            nbests = [[h] for h in greedy(model, src, lengths, max_lengths, settings)]
        else:
            nbests = beam_search(model, src, lengths, max_lengths, settings)
        results: list[list[Translation]] = [[] for _ in sources]
        for i, hypotheses in zip(ids, nbests):
            results[i] = [self._translation(sources[i], h) for h in hypotheses]
        return results

    def _decoding(self) -> tuple[Model, Optional[Step]]:
        """The model in the decoding precision and, with `compile`, its compiled decoding step
        (fast/compiled.py; None: the searches run the model's own).

        For bf16 the model is a bfloat16 copy (casting once beats autocast's cast of every weight
        at every step), for int8 that copy with every product of a decoding step in int8
        (fast/int8.py), for fp32 the model itself.
        """
        precision = self.precision
        if not self.config.decode.fast_paths and (precision == "int8" or self.compile):
            raise AttnmtError("int8 and --compile are fast paths: leave them off to decode with the reference "
                              "modules (--reference, decode.fast_paths false)")
        # An in-place change of a weight through autograd's ops (load_state_dict, a plain optimizer
        # step) bumps its version counter, so the copy is made again when the weights have changed;
        # fused optimizers do not bump it: training validates through a new Translator each time.
        key = (precision, self.compile, tuple(p._version for p in self.model.parameters()))
        if self._decoding_copy is None or self._decoding_copy[0] != key:
            model = self.model
            if precision == "int8":
                model = int8_decoding_copy(self.model)
            elif precision == "bf16":
                model = copy.deepcopy(self.model).to(torch.bfloat16).eval()
            step = compiled_step(model) if self.compile else None
            self._decoding_copy = (key, model, step)
        return self._decoding_copy[1:]

    @torch.inference_mode()
    def attention_maps(self, translation: Translation) -> dict[str, np.ndarray]:
        """Every attention map of the model for one translation, recomputed by one teacher-forced
        pass over its output, name -> [layers, heads, queries, keys]:
            cross    [.., len(tokens), len(source_tokens)]: output over source
            encoder  [.., len(source_tokens), len(source_tokens)]: source over source (Transformer)
            decoder  [.., len(tokens), len(tokens)]: output over the output so far (Transformer);
                     row i, which produced tokens[i], read <sos>, tokens[0], .., tokens[i-1]
        `translation.attention`, the matrix heatmaps show by default, is the last layer's cross
        attention averaged over its heads (for an RNN model, its one map).
        """
        if not translation.tokens or not translation.source_tokens:
            raise AttnmtError("no attention to show: the sentence or its translation is empty")
        model, _ = self._decoding()
        model.eval()
        src = torch.tensor([self.tokenization.src_vocab.encode(translation.source_tokens)], device=self.device)
        output = self.tokenization.tgt_vocab.encode(translation.tokens)
        start = self.tokenization.tgt_vocab.sos_id
        tgt_in = torch.tensor([[start] + output[:-1]], device=self.device)     # the inputs that produced `output`
        mapped: AttentionMaps = require(model, AttentionMaps, "attention maps")
        maps = mapped.attention_maps(src, torch.tensor([src.shape[1]]), tgt_in)
        return {name: weights[0].float().cpu().numpy() for name, weights in maps.items()}

    def engine_info(self) -> EngineInfo:
        text = self.tokenization
        return EngineInfo("attnmt", self.model.describe(), len(text.src_vocab), len(text.tgt_vocab), self.precision,
                          map_shapes(self.model))

    def _translation(self, source_tokens: list[str], hypothesis: Hypothesis) -> Translation:
        tokens = self.tokenization.tgt_vocab.decode(hypothesis.ids)
        attention = None
        if hypothesis.attention is not None:
            attention = hypothesis.attention[:, : len(source_tokens)].float().cpu().numpy()
        return Translation(self.tgt_tokenizer.detokenize(tokens), tokens, source_tokens, attention,
                           hypothesis.log_prob)


def model_info(path: str | Path) -> dict:
    """What a model file holds (`attnmt info`): family and sizes, parameters, languages,
    tokenizer, vocabularies, how it was trained (older files do not say) or where it was imported
    from, format, its aligner if any."""
    description, _, meta = read_model(path)
    config, text = description.config, description.tokenization
    network = build_model(config.model, len(text.src_vocab), len(text.tgt_vocab), config.decode.fast_paths).eval()
    tokenizer = {k: v for k, v in text.src_tokenizer.to_dict().items() if k not in ("model", "decoder")}
    if config.tokenizer.level in ("bpe", "unigram"):
        tokenizer.update(vocab_size=config.tokenizer.vocab_size, joint=config.tokenizer.joint)
    return {"file": str(path), "format_version": meta["format_version"], "weights_sha256": meta["sha256"],
            "arch": config.model.arch, "architecture": network.describe(), "fast_paths": fast_paths_in(network),
            "parameters": sum(p.numel() for p in network.parameters()),
            "src_lang": config.data.src_lang, "source_languages": source_languages(config.data),
            "tgt_lang": config.data.tgt_lang, "tokenizer": tokenizer,
            "src_vocab_size": len(text.src_vocab), "tgt_vocab_size": len(text.tgt_vocab),
            "training": meta.get("training"), "origin": meta.get("origin"), "averaged": meta.get("averaged"),
            "aligner": meta.get("aligner")}
