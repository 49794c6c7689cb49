"""`attnmt export MODEL --to ctranslate2 DIR`: a Transformer model as a CTranslate2 model.

CTranslate2 (OpenNMT's inference engine) decodes Transformers fast on CPUs and GPUs, in int8 too.
The model is described through CTranslate2's own specification API (`TransformerSpec`): each
attnmt weight goes to the variable that plays its part, and CTranslate2 checks and saves them.
CTranslate2 has no RNN encoder-decoder, so only model.arch transformer exports. Whether the optional
`ctranslate2` package is there, ctranslate2_engine.py's `ctranslate2_package` says; its specification API is imported
here alone.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

from ..choices import CTRANSLATE2_QUANTIZATIONS
from ..errors import AttnmtError
from ..families.transformer.network import Transformer, sinusoids
from ..files import atomic_folder, check_folder_free
from ..modelfile import CTRANSLATE2_ENGINE_FILE
from ..translate import Translator
from .ctranslate2_engine import ctranslate2_package


def export_ctranslate2(model_path: str | Path, out_dir: str | Path, quantization: Optional[str] = None,
                       overwrite: bool = False, max_positions: int = 1024) -> Path:
    """Write the Transformer at `model_path` as a CTranslate2 model directory. Its alignment (the
    attention CTranslate2 returns) is the mean of the last layer's heads, as attnmt's heatmaps show;
    `max_positions` sinusoidal positions are written (CTranslate2 reads no further)."""
    ctranslate2 = ctranslate2_package()
    translator = Translator.load(model_path, device="cpu", precision="fp32")
    network = translator.model
    if not isinstance(network, Transformer):
        raise AttnmtError(f"{model_path}: CTranslate2 has no RNN encoder-decoder; only Transformer models "
                          f"(model.arch transformer) export to it")
    check_folder_free(out_dir, overwrite)
    if quantization is not None and quantization not in CTRANSLATE2_QUANTIZATIONS:
        raise AttnmtError(f"quantization {quantization!r}: expected one of {', '.join(CTRANSLATE2_QUANTIZATIONS)}")
    spec = transformer_spec(network, max_positions)
    target = translator.tokenization.tgt_vocab
    spec.config.unk_token, spec.config.bos_token, spec.config.eos_token = (
        target.itos[target.unk_id], target.itos[target.sos_id], target.eos)
    spec.config.decoder_start_token = target.itos[target.sos_id]
    spec.register_source_vocabulary(translator.tokenization.src_vocab.to_list())
    spec.register_target_vocabulary(target.to_list())
    spec.validate()
    spec.optimize(quantization=quantization)
    with atomic_folder(out_dir, overwrite) as partial:
        spec.save(str(partial))
        write_engine_file(partial, translator)
    assert ctranslate2.contains_model(str(out_dir))
    return Path(out_dir)


def transformer_spec(network: Transformer, max_positions: int) -> Any:
    """CTranslate2's TransformerSpec of `network`: its settings, and each weight in the variable that
    plays its part (the vocabularies are the caller's)."""
    from ctranslate2.specs import common_spec, transformer_spec

    config = network.config
    pre = config.norm == "pre"
    spec = transformer_spec.TransformerSpec.from_config(
        (config.enc_layers, config.dec_layers), config.heads, pre_norm=pre,
        activation={"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU,
                    "silu": common_spec.Activation.SWISH}[config.activation],
        alignment_layer=-1, alignment_heads=config.heads)
    # The weights by their attnmt names (transformer.py's layout: query_proj, key_proj, value_proj,
    # out_proj of each attention; feed_forward.0 and .3; each sublayer's norm).
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


def write_engine_file(out_dir: Path, translator: Translator) -> None:
    """What attnmt needs besides CTranslate2's model to translate text with it (`ctranslate2_engine.py`): the
    config (decoding settings, languages), both tokenizers, and what a server reports of the model."""
    description = translator.description.metadata()
    info = translator.engine_info()
    engine = {"kind": "attnmt-ctranslate2", "config": description["config"],
              "src_tokenizer": description["src_tokenizer"], "tgt_tokenizer": description["tgt_tokenizer"],
              "architecture": info.architecture, "src_vocab_size": info.src_vocab_size,
              "tgt_vocab_size": info.tgt_vocab_size, "source_end": translator.source_end,
              "start_token": translator.start_token}
    (out_dir / CTRANSLATE2_ENGINE_FILE).write_text(json.dumps(engine), encoding="utf-8")


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

