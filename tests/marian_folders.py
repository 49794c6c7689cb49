"""Hugging Face Marian model folders made up for the tests, without transformers: config.json,
tokenizer_config.json, source.spm and target.spm learnt from the dates corpus, vocab.json in Marian's
order (</s> at 0, <unk> at 1, <pad> last, as opus-mt-en-mg has them) and random weights under
transformers' names (modeling_marian.py), so that reading a folder is tested on every machine."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any, Optional

import sentencepiece
import torch
from safetensors.torch import save_file

from attnmt.corpus.dates import generate_dates

# A MarianConfig as opus-mt-en-mg's config.json writes it, shrunk.
TINY_CONFIG: dict[str, Any] = {
    "_name_or_path": "tiny-marian-dates", "activation_function": "swish", "architectures": ["MarianMTModel"],
    "model_type": "marian", "d_model": 16, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
    "decoder_attention_heads": 4, "encoder_ffn_dim": 32, "decoder_ffn_dim": 32, "dropout": 0.1,
    "attention_dropout": 0.0, "activation_dropout": 0.0, "max_position_embeddings": 128, "scale_embedding": True,
    "static_position_embeddings": True, "normalize_before": False, "add_final_layer_norm": False,
    "normalize_embedding": False, "bos_token_id": 0, "eos_token_id": 0, "max_length": 40, "num_beams": 3,
    "is_encoder_decoder": True}


def _sentencepiece(texts: list[str], size: int) -> bytes:
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_writer=model, vocab_size=size,
                                             model_type="unigram", character_coverage=1.0, num_threads=1,
                                             minloglevel=2, hard_vocab_limit=False)
    return model.getvalue()


def _pieces(model: bytes) -> list[str]:
    processor = sentencepiece.SentencePieceProcessor(model_proto=model)
    return [processor.id_to_piece(i) for i in range(processor.get_piece_size())
            if not (processor.is_unknown(i) or processor.is_control(i))]


def marian_vocabulary(*models: bytes) -> list[str]:
    """Marian's vocabulary of these sentencepiece models' pieces: </s>, <unk>, the pieces, <pad> last."""
    tokens = ["</s>", "<unk>"]
    for model in models:
        tokens += [piece for piece in _pieces(model) if piece not in tokens]
    return tokens + ["<pad>"]


def marian_weights(config: dict[str, Any], src_size: int, tgt_size: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random tensors of a MarianMTModel's shapes, by transformers' names (model.shared when shared)."""
    generator = torch.Generator().manual_seed(seed)
    d, ffn = config["d_model"], config["encoder_ffn_dim"]

    def draw(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator) * 0.3

    weights = {"final_logits_bias": draw(1, tgt_size)}
    if config.get("share_encoder_decoder_embeddings", True):
        weights["model.shared.weight"] = draw(src_size, d)
    else:
        weights["model.encoder.embed_tokens.weight"] = draw(src_size, d)
        weights["model.decoder.embed_tokens.weight"] = draw(tgt_size, d)
    for side in ("encoder", "decoder"):
        for layer in range(config[f"{side}_layers"]):
            prefix = f"model.{side}.layers.{layer}."
            attentions = ["self_attn"] + (["encoder_attn"] if side == "decoder" else [])
            for attention in attentions:
                for projection in ("q_proj", "k_proj", "v_proj", "out_proj"):
                    weights[f"{prefix}{attention}.{projection}.weight"] = draw(d, d)
                    weights[f"{prefix}{attention}.{projection}.bias"] = draw(d)
                weights[f"{prefix}{attention}_layer_norm.weight"] = 1 + draw(d)
                weights[f"{prefix}{attention}_layer_norm.bias"] = draw(d)
            weights.update({f"{prefix}fc1.weight": draw(ffn, d), f"{prefix}fc1.bias": draw(ffn),
                            f"{prefix}fc2.weight": draw(d, ffn), f"{prefix}fc2.bias": draw(d),
                            f"{prefix}final_layer_norm.weight": 1 + draw(d), f"{prefix}final_layer_norm.bias": draw(d)})
    return weights


def write_marian_folder(folder: Path, separate_vocabs: bool = False, config: Optional[dict[str, Any]] = None,
                        weights: bool = True) -> Path:
    """A Marian folder of a tiny random model reading written dates (source) into ISO dates (target);
    `separate_vocabs`: each side its own vocabulary and embeddings (target_vocab.json)."""
    folder.mkdir(parents=True, exist_ok=True)
    pairs = generate_dates(400, seed=5)
    source_model = _sentencepiece([s for s, _ in pairs], 120)
    target_model = _sentencepiece([t for _, t in pairs], 40)
    (folder / "source.spm").write_bytes(source_model)
    (folder / "target.spm").write_bytes(target_model)
    source = target = marian_vocabulary(source_model, target_model)
    if separate_vocabs:
        # Of one size, so that <pad>, last, is at config.json's one pad_token_id in both.
        source, target = marian_vocabulary(source_model), marian_vocabulary(target_model)
        size = max(len(source), len(target))
        source, target = (v[:-1] + [f"<filler{i}>" for i in range(size - len(v))] + v[-1:] for v in (source, target))
    values = {**TINY_CONFIG, "vocab_size": len(source), "pad_token_id": len(source) - 1,
              "decoder_start_token_id": len(source) - 1, "bad_words_ids": [[len(source) - 1]],
              "share_encoder_decoder_embeddings": not separate_vocabs, "decoder_vocab_size": len(target),
              **(config or {})}
    (folder / "config.json").write_text(json.dumps(values, indent=2), encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps({"source_lang": "de", "target_lang": "en",
                                                              "separate_vocabs": separate_vocabs}), encoding="utf-8")
    (folder / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(source)}), encoding="utf-8")
    if separate_vocabs:
        (folder / "target_vocab.json").write_text(json.dumps({t: i for i, t in enumerate(target)}), encoding="utf-8")
    if weights:
        save_file(marian_weights(values, len(source), len(target)), str(folder / "model.safetensors"),
                  metadata={"format": "pt"})
    return folder
