"""The Transformer under other toolkits' names: the tables the formats ask this family for
(formats/marian.py, formats/ctranslate2.py), so that only this folder knows its parameters' names and its
model keys. Each table pairs this network's names (network.py) with the other toolkit's.

- MARIAN: transformers' modeling_marian.py (Hugging Face Marian folders, OPUS-MT): its tensor names and
  MarianConfig's keys, both ways (import and export).
- CTRANSLATE2: CTranslate2's TransformerSpec, filled from the network (export only).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import torch

from ...config import ModelConfig
from .config import TransformerConfig
from .network import Transformer, sinusoids

# Marian's tensors inside a layer -> ours (MultiHeadAttention's projections, FeedForward's two Linear
# layers at [0] and [3], each sublayer's norm).
_LAYER_NAMES = {f"{marian}.{p}_proj": f"{ours}.{name}_proj" for marian, ours in
                (("self_attn", "self_attention"), ("encoder_attn", "cross_attention"))
                for p, name in (("q", "query"), ("k", "key"), ("v", "value"), ("out", "out"))}
_LAYER_NAMES.update({"self_attn_layer_norm": "self_attention_norm", "encoder_attn_layer_norm": "cross_attention_norm",
                     "final_layer_norm": "feed_forward_norm", "fc1": "feed_forward.0", "fc2": "feed_forward.3"})
_MARIAN_LAYER = re.compile(r"model\.(encoder|decoder)\.layers\.(\d+)\.(.+)\.(weight|bias)")
_OUR_LAYER = re.compile(r"(encoder|decoder)_layers\.(\d+)\.(.+)\.(weight|bias)")
# The vocabulary's tensors, Marian's name -> ours (final_logits_bias as a vector, not Marian's [1, V]).
_VOCABULARY_NAMES = {"model.encoder.embed_tokens.weight": "src_embedding.weight",
                     "model.decoder.embed_tokens.weight": "tgt_embedding.weight",
                     "lm_head.weight": "classifier.weight", "final_logits_bias": "classifier.bias"}
# MarianConfig's activation_function -> ours (silu: x·σ(x), Marian's "swish").
_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "silu", "silu": "silu"}
# What a Marian model is, as this family's keys: (key, Marian's value, why); another value has no Marian form.
_MARIAN_MODEL = (("norm", "post", "its layers normalize after each residual sum"),
                 ("positions", "sinusoidal", "its positions are fixed sinusoids"),
                 ("sinusoid_layout", "halves", "its sinusoids are all the sines, then all the cosines"),
                 ("source_eos", True, "MarianTokenizer ends every source with the end token"))


@dataclass(frozen=True)
class Inexpressible:
    """A model key whose value the other format has no form for: the key, its value, the value the
    format needs, and why."""

    key: str
    value: Any
    needed: Any
    why: str


class MarianLayout:
    """How a Hugging Face Marian model names this network's tensors and settings."""

    def ours(self, marian: str) -> Optional[str]:
        """Our parameter name of Marian's tensor `marian` (the vocabulary's, in the names of
        vocabulary_names, or a layer's); None where this network has no place for it."""
        if marian in _VOCABULARY_NAMES:
            return _VOCABULARY_NAMES[marian]
        match = _MARIAN_LAYER.fullmatch(marian)
        if not match or match[3] not in _LAYER_NAMES:
            return None
        return f"{match[1]}_layers.{match[2]}.{_LAYER_NAMES[match[3]]}.{match[4]}"

    def marian(self, ours: str) -> Optional[str]:
        """Marian's name of our parameter `ours`; None where a Marian model has no place for it."""
        vocabulary = {name: marian for marian, name in _VOCABULARY_NAMES.items()}
        if ours in vocabulary:
            return vocabulary[ours]
        layer_names = {name: marian for marian, name in _LAYER_NAMES.items()}
        match = _OUR_LAYER.fullmatch(ours)
        if not match or match[3] not in layer_names:
            return None
        return f"model.{match[1]}.layers.{match[2]}.{layer_names[match[3]]}.{match[4]}"

    def unreadable(self, config: dict[str, Any]) -> Optional[tuple[str, str]]:
        """A MarianConfig key (its defaults filled in) this network cannot represent, and why; None if none."""
        if config["activation_function"] not in _ACTIVATIONS:
            return "activation_function", "the feed-forward's activation is relu, gelu or swish"
        for encoder_key, decoder_key in (("encoder_attention_heads", "decoder_attention_heads"),
                                         ("encoder_ffn_dim", "decoder_ffn_dim")):
            if config[encoder_key] != config[decoder_key]:
                return decoder_key, f"the decoder's must equal the encoder's {encoder_key} {config[encoder_key]}"
        return None

    def model_section(self, c: dict[str, Any]) -> dict[str, Any]:
        """The model section of a MarianConfig's network (`unreadable` found nothing in it)."""
        return {"arch": "transformer", "emb_dim": c["d_model"], "enc_layers": c["encoder_layers"],
                "dec_layers": c["decoder_layers"], "heads": c["encoder_attention_heads"], "ff_dim": c["encoder_ffn_dim"],
                "activation": _ACTIVATIONS[c["activation_function"]], "dropout": c["dropout"],
                "attn_dropout": c["attention_dropout"], "act_dropout": c["activation_dropout"],
                "max_positions": c["max_position_embeddings"], "tie_embeddings": c["tie_word_embeddings"],
                "share_embeddings": c["share_encoder_decoder_embeddings"],
                **{key: value for key, value, _ in _MARIAN_MODEL}}

    def inexpressible(self, model: ModelConfig) -> Optional[Inexpressible]:
        """The first of `model`'s keys whose value a Marian model cannot have; None if it has a Marian form."""
        for key, needed, why in _MARIAN_MODEL:
            if getattr(model, key) != needed:
                return Inexpressible(key, getattr(model, key), needed, why)
        return None

    def marian_config(self, model: ModelConfig, positions: int) -> dict[str, Any]:
        """MarianConfig's keys of the network `model` (which `inexpressible` let through), with room for at
        least `positions` positions."""
        assert isinstance(model, TransformerConfig), model.arch
        activation = {ours: marian for marian, ours in _ACTIVATIONS.items() if marian != "silu"}[model.activation]
        return {"d_model": model.emb_dim, "encoder_layers": model.enc_layers, "decoder_layers": model.dec_layers,
                "encoder_attention_heads": model.heads, "decoder_attention_heads": model.heads,
                "encoder_ffn_dim": model.ff_dim, "decoder_ffn_dim": model.ff_dim, "activation_function": activation,
                "dropout": model.dropout, "attention_dropout": model.attn_dropout,
                "activation_dropout": model.act_dropout, "max_position_embeddings": max(model.max_positions, positions),
                "share_encoder_decoder_embeddings": model.share_embeddings, "tie_word_embeddings": model.tie_embeddings}


MARIAN = MarianLayout()


class CTranslate2Layout:
    """This network as CTranslate2's TransformerSpec (its specification API, the optional ctranslate2
    package's, imported when asked)."""

    def spec(self, network: Any, max_positions: int) -> Any:
        """CTranslate2's TransformerSpec of `network`: its settings, and each weight in the variable that
        plays its part (the vocabularies are the caller's); `max_positions` sinusoidal positions at least."""
        from ctranslate2.specs import common_spec, transformer_spec

        assert isinstance(network, Transformer), type(network)
        config = network.config
        pre = config.norm == "pre"
        spec = transformer_spec.TransformerSpec.from_config(
            (config.enc_layers, config.dec_layers), config.heads, pre_norm=pre,
            activation={"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU,
                        "silu": common_spec.Activation.SWISH}[config.activation],
            alignment_layer=-1, alignment_heads=config.heads)
        weights = {name: tensor.detach().float().numpy() for name, tensor in network.state_dict().items()}
        if config.positions == "learned":
            positions = weights["positions.weight"]
        else:
            count = max(max_positions, config.max_positions)
            positions = sinusoids(torch.arange(count).unsqueeze(0), config.emb_dim, config.sinusoid_layout)[0].numpy()
        for side, stack in (("encoder", spec.encoder), ("decoder", spec.decoder)):
            stack.scale_embeddings = True                                  # attnmt scales embeddings by √d too
            stack.position_encodings.encodings = positions
            if pre:                                                        # the stack's final LayerNorm
                _layer_norm(stack.layer_norm, weights, f"{side}_norm")
        spec.encoder.embeddings[0].weight = weights["src_embedding.weight"]
        spec.decoder.embeddings.weight = weights["tgt_embedding.weight"]
        _linear(spec.decoder.projection, weights, "classifier")
        for i, layer in enumerate(spec.encoder.layer):
            scope = f"encoder_layers.{i}"
            _attention(layer.self_attention, weights, f"{scope}.self_attention", fused_keys=True)
            _layer_norm(layer.self_attention.layer_norm, weights, f"{scope}.self_attention_norm")
            _feed_forward(layer.ffn, weights, scope)
        for i, layer in enumerate(spec.decoder.layer):
            scope = f"decoder_layers.{i}"
            _attention(layer.self_attention, weights, f"{scope}.self_attention", fused_keys=True)
            _layer_norm(layer.self_attention.layer_norm, weights, f"{scope}.self_attention_norm")
            _attention(layer.attention, weights, f"{scope}.cross_attention", fused_keys=False)
            _layer_norm(layer.attention.layer_norm, weights, f"{scope}.cross_attention_norm")
            _feed_forward(layer.ffn, weights, scope)
        spec.config.layer_norm_epsilon = network.decoder_stack()[0].self_attention_norm.eps
        return spec


CTRANSLATE2 = CTranslate2Layout()


def _linear(spec: Any, weights: dict, name: str) -> None:
    spec.weight = weights[f"{name}.weight"]
    if f"{name}.bias" in weights:
        spec.bias = weights[f"{name}.bias"]


def _layer_norm(spec: Any, weights: dict, name: str) -> None:
    spec.gamma, spec.beta = weights[f"{name}.weight"], weights[f"{name}.bias"]


def _feed_forward(spec: Any, weights: dict, scope: str) -> None:
    _layer_norm(spec.layer_norm, weights, f"{scope}.feed_forward_norm")
    _linear(spec.linear_0, weights, f"{scope}.feed_forward.0")       # W_1
    _linear(spec.linear_1, weights, f"{scope}.feed_forward.3")       # W_2 (after the activation and dropout)


def _attention(spec: Any, weights: dict, name: str, fused_keys: bool) -> None:
    """Self-attention: one product for queries, keys and values; cross-attention: the queries, then
    keys and values in one product (they read the encoder's output); then the output projection."""
    projections = {part: (weights[f"{name}.{part}_proj.weight"], weights[f"{name}.{part}_proj.bias"])
                   for part in ("query", "key", "value")}
    groups = [("query", "key", "value")] if fused_keys else [("query",), ("key", "value")]
    for linear, parts in zip(spec.linear, groups):
        linear.weight = np.concatenate([projections[p][0] for p in parts])
        linear.bias = np.concatenate([projections[p][1] for p in parts])
    _linear(spec.linear[-1], weights, f"{name}.out_proj")
