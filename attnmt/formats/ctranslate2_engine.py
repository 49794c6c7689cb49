"""CTranslate2 as the decoding engine of a Transformer written by `attnmt export --to ctranslate2`:
the same sentences in and `Translation`s out as attnmt's own `Translator` (both are
`TextTranslator`s), with the attention CTranslate2 returns, the mean of the last layer's heads,
which is the map attnmt's heatmaps show. The optional `ctranslate2` package is imported here
(`ctranslate2_package`, which ctranslate2.py asks too) and its specification API in ctranslate2.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

from ..config import Config, override_decode_precision
from ..configfile import saved_config
from ..errors import AttnmtError, first_line
from ..modelfile import CTRANSLATE2_ENGINE_FILE
from ..precision import precision_note, resolve_device
from ..precision import resolve as resolve_precision
from ..search import SearchSettings
from ..tokenize import Tokenizer, tokenizers_from_dicts
from ..translate import EngineInfo, TextTranslator, Translation
from ..vocab import SOS

# attnmt's decode.precision as CTranslate2's compute type (int8: int8 products, float32 elsewhere).
COMPUTE_TYPES = {"fp32": "float32", "bf16": "bfloat16", "int8": "int8_float32"}


def ctranslate2_package() -> Any:
    """The optional ctranslate2 package, or one line saying how to install it."""
    try:
        import ctranslate2
    except ImportError:
        raise AttnmtError("CTranslate2 (export, --engine ctranslate2) needs the ctranslate2 package: "
                          "pip install ctranslate2") from None
    return ctranslate2


def is_ctranslate2_model(path: str | Path) -> bool:
    """A directory `attnmt export --to ctranslate2` wrote."""
    return (Path(path) / CTRANSLATE2_ENGINE_FILE).is_file()


class CTranslate2Translator(TextTranslator):
    """An exported Transformer, decoded by CTranslate2. Its searches differ from attnmt's in one
    documented way: beam search's length normalisation (`alpha`) divides a score by length^alpha,
    where attnmt uses GNMT's ((5 + length) / 6)^alpha; with alpha 0 (the default) both rank alike."""

    def __init__(self, engine: Any, config: Config, src_tokenizer: Tokenizer, tgt_tokenizer: Tokenizer,
                 device: torch.device, architecture: dict[str, int | str | bool], vocab_sizes: tuple[int, int],
                 source_end: Optional[str] = None, start_token: str = SOS) -> None:
        self.engine, self.config = engine, config
        self.src_tokenizer, self.tgt_tokenizer = src_tokenizer, tgt_tokenizer
        self._device = device
        self.architecture, self.vocab_sizes = architecture, vocab_sizes
        self.source_end, self.start_token = source_end, start_token

    @classmethod
    def load(cls, path: str | Path, device: str = "auto", precision: Optional[str] = None) -> "CTranslate2Translator":
        """Load an exported directory on `device`; `precision` (fp32, bf16, int8 or auto) overrides
        the decode.precision the model was trained with."""
        path = Path(path)
        engine_file = path / CTRANSLATE2_ENGINE_FILE
        if not engine_file.is_file():
            raise AttnmtError(f"{path}: not a model that attnmt export --to ctranslate2 wrote (no {engine_file.name})")
        try:
            saved = json.loads(engine_file.read_text(encoding="utf-8"))
            config = saved_config(saved["config"])
            src_tokenizer, tgt_tokenizer = tokenizers_from_dicts(saved["src_tokenizer"], saved["tgt_tokenizer"])
            architecture, vocab_sizes = dict(saved["architecture"]), (int(saved["src_vocab_size"]),
                                                                     int(saved["tgt_vocab_size"]))
            source_end = saved.get("source_end")   # engines exported before model.source_eos: none
            start_token = saved.get("start_token", SOS)
        except (OSError, ValueError, KeyError, TypeError, AttnmtError) as err:
            raise AttnmtError(f"{engine_file}: unreadable ({first_line(err)}); export the model again") from None
        override_decode_precision(config, precision)
        where = resolve_device(device)
        compute_type = COMPUTE_TYPES[resolve_precision(config.decode.precision, where)]
        try:
            # As many threads as torch decodes with (CTranslate2's own default is 4, whatever the CPU).
            engine = ctranslate2_package().Translator(str(path), device=where.type, device_index=where.index or 0,
                                                      compute_type=compute_type, intra_threads=torch.get_num_threads())
        except (RuntimeError, ValueError) as err:
            raise AttnmtError(f"{path}: CTranslate2 cannot load it in {compute_type} on {where}: "
                              f"{first_line(err)}") from None
        return cls(engine, config, src_tokenizer, tgt_tokenizer, where, architecture, vocab_sizes, source_end,
                   start_token)

    def precision_note(self) -> Optional[str]:
        return precision_note({"decode.precision": self.config.decode.precision}, self._device)

    def engine_info(self) -> EngineInfo:
        return EngineInfo("ctranslate2", self.architecture, *self.vocab_sizes,
                          resolve_precision(self.config.decode.precision, self._device), {"cross": (1, 1)})

    def _search(self, sources: list[list[str]], settings: SearchSettings) -> list[list[Translation]]:
        beam_size, batch_size = settings.beam_size, settings.batch_size
        # CTranslate2 takes one length limit per call, attnmt one per sentence (by its source
        # length): one call with the longest limit, each output then cut to its own. For greedy
        # search that is exactly attnmt's rule; a beam's hypotheses can only be cut after the search.
        # CTranslate2's max_decoding_length counts the tokens it returns, <eos> left out, as the rule does.
        limits = [self.max_output_tokens(len(tokens)) for tokens in sources]
        outputs = self.engine.translate_batch(
            sources, max_batch_size=batch_size, beam_size=beam_size, num_hypotheses=settings.n_best,
            length_penalty=settings.alpha,
            return_attention=True, max_input_length=0, max_decoding_length=max(limits),
            suppress_sequences=[[token] for token in self.config.decode.never_generate] or None)
        found = [(i, tokens[: limits[i]], attention) for i, output in enumerate(outputs)
                 for tokens, attention in zip(output.hypotheses, output.attention)]
        if beam_size > 1 and found:
            # The attention CTranslate2 4.x returns from a beam search over several sentences can
            # belong to another hypothesis (tests/test_export.py); a pass forced through each output
            # (target_prefix) gives each its own, as greedy search does.
            forced = self.engine.translate_batch(
                [sources[i] for i, _, _ in found], target_prefix=[tokens for _, tokens, _ in found], beam_size=1,
                return_attention=True, max_input_length=0, max_batch_size=batch_size, min_decoding_length=0,
                max_decoding_length=max(len(tokens) for _, tokens, _ in found) + 1)
            found = [(i, tokens, output.attention[0]) for (i, tokens, _), output in zip(found, forced)]
        # CTranslate2's scores leave out the end of sentence (and are length-normalised with alpha):
        # the model's log-probability of each output, <eos> included as attnmt counts it, is scored.
        scored = self.engine.score_batch([sources[i] for i, _, _ in found], [tokens for _, tokens, _ in found],
                                         max_batch_size=batch_size)
        results: list[list[Translation]] = [[] for _ in sources]
        for (i, tokens, attention), score in zip(found, scored):
            results[i].append(self._translation(sources[i], tokens, attention, float(sum(score.log_probs))))
        return results

    def _translation(self, source_tokens: list[str], tokens: list[str], attention: list[list[float]],
                     log_prob: float) -> Translation:
        weights = np.array(attention, dtype=np.float32).reshape(-1, len(source_tokens))[: len(tokens)]
        return Translation(self.tgt_tokenizer.detokenize(tokens), tokens, source_tokens, weights, log_prob)

    def attention_maps(self, translation: Translation) -> dict[str, np.ndarray]:
        """CTranslate2 returns one map: the cross attention of the last layer, averaged over its
        heads, as one layer of one head (attnmt's own engine gives every layer and head)."""
        if not translation.tokens or not translation.source_tokens:
            raise AttnmtError("no attention to show: the sentence or its translation is empty")
        assert translation.attention is not None, "CTranslate2's translations carry their attention"
        return {"cross": translation.attention[None, None]}
