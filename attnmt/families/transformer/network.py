"""The Transformer (Vaswani et al. 2017): a model built from attention alone, model.arch transformer.

Attention(Q, K, V) = softmax(Q Kᵀ / √d_k) V, computed in h heads side by side:
    MultiHead(Q, K, V) = [head_1; ..; head_h] W_O,  head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)
Self-attention takes Q, K and V from one sequence, cross-attention Q from the target and K, V
from the encoder's output. Each layer adds what a block computes to its input (a residual):
    encoder layer:  x = x + SelfAttention(x);  x = x + FeedForward(x)
    decoder layer:  y = y + CausalSelfAttention(y);  y = y + CrossAttention(y, x);  y = y + FeedForward(y)
with FeedForward(x) = W_2 act(W_1 x + b_1) + b_2. Pre-norm (the default) normalises each block's
input, LayerNorm inside the residual, and the stack's output once more; post-norm, the paper's,
normalises after each residual sum; each layer writes both out. Embeddings are scaled by √d and
positions added (sinusoids of the paper, or learned). Decoding runs one position at a time: each layer caches the keys and
values of the positions so far (cache.py), so a step computes only the new position; training
computes every position at once and keeps no cache.
"""

from __future__ import annotations

import math
from typing import Optional, cast

import torch
from torch import nn

from ...errors import AttnmtError
from ...fast.layers import use_fast_layers
from ...seam import AttentionView, Probe, Rows
from ...vocab import PAD_ID
from .cache import DecoderLayers, LayerCache, TransformerState
from .config import TransformerConfig
from .fast import InPlaceDecoderLayers


class MultiHeadAttention(nn.Module):
    """Scaled dot-product attention in `heads` heads of d / heads dimensions each."""

    def __init__(self, dim: int, heads: int, dropout: float):
        super().__init__()
        self.heads = heads
        self.query_proj = nn.Linear(dim, dim)   # W^Q of all heads side by side
        self.key_proj = nn.Linear(dim, dim)     # W^K
        self.value_proj = nn.Linear(dim, dim)   # W^V
        self.out_proj = nn.Linear(dim, dim)     # W_O
        self.dropout = nn.Dropout(dropout)      # on the weights, as the paper's "attention dropout"

    def split(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, dim = x.shape                                        # [B, L, D]
        return x.view(batch, length, self.heads, dim // self.heads).transpose(1, 2)  # [B, h, L, d_k]

    def keys_values(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys and values of x [B, L, D], each [B, h, L, d_k]: contiguous, so that the products
        of every decoding step read a head's keys in place instead of gathering them anew."""
        return self.split(self.key_proj(x)).contiguous(), self.split(self.value_proj(x)).contiguous()

    def forward(self, query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, allowed: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """query [B, T, D] (not yet projected); keys and values [B, h, S, d_k] from keys_values;
        allowed [B, T or 1, S], True where a query may look.
        Returns the output [B, T, D] and the weights [B, h, T, S] (before dropout)."""
        q = self.split(self.query_proj(query))                              # [B, h, T, d_k]
        scores = q @ keys.transpose(2, 3) / math.sqrt(q.shape[-1])          # [B, h, T, S]
        scores = scores.masked_fill(~allowed.unsqueeze(1), float("-inf"))   # pads, the future: weight 0
        weights = torch.softmax(scores, dim=-1)
        heads = self.dropout(weights) @ values                              # [B, h, T, d_k]
        batch, _, length, _ = heads.shape
        return self.out_proj(heads.transpose(1, 2).reshape(batch, length, -1)), weights  # [B, T, D]


class HeadsProbe(nn.Module):
    """A MultiHeadAttention as attnmt explain runs it: the same weights, computed by `probe`, which
    records them if `record` and makes them uniform while `probe.uniform` is set if `over_source`."""

    def __init__(self, attention: MultiHeadAttention, probe: Probe, record: bool, over_source: bool):
        super().__init__()
        self.attention, self.probe, self.record, self.over_source = attention, probe, record, over_source
        self.keys_values = attention.keys_values                           # as the layers use it

    def forward(self, query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, allowed: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        attention = self.attention
        q = attention.split(attention.query_proj(query))                   # [B, h, T, d_k]
        scores = q @ keys.transpose(2, 3) / math.sqrt(q.shape[-1])          # [B, h, T, S]
        weights = self.probe.weigh(scores, allowed.unsqueeze(1), values, self.record, self.over_source)
        heads = weights @ values                                            # [B, h, T, d_k]
        batch, _, length, _ = heads.shape
        return attention.out_proj(heads.transpose(1, 2).reshape(batch, length, -1)), weights


ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "silu": nn.SiLU}   # silu: x·σ(x), Marian's "swish"


class FeedForward(nn.Sequential):
    """W_2 act(W_1 x + b_1) + b_2, applied at each position alike."""

    def __init__(self, dim: int, ff_dim: int, activation: str, dropout: float):
        super().__init__(nn.Linear(dim, ff_dim), ACTIVATIONS[activation](), nn.Dropout(dropout), nn.Linear(ff_dim, dim))


# The names earlier versions gave the layers' LayerNorms (each inside a Residual block), for reading
# their model files and checkpoints: old name -> today's, within a layer.
_OLD_NORM_NAMES = {"attend.norm": "self_attention_norm", "attend_self.norm": "self_attention_norm",
                   "attend_source.norm": "cross_attention_norm", "transform.norm": "feed_forward_norm"}


def _rename_old_norms(module: nn.Module, state_dict: dict, prefix: str, *args) -> None:
    """A load_state_dict pre-hook: a file written before the layers were written out names its norms
    as _OLD_NORM_NAMES says; they are read under today's names."""
    for old, new in _OLD_NORM_NAMES.items():
        for tensor in ("weight", "bias"):
            if f"{prefix}{old}.{tensor}" in state_dict:
                state_dict[f"{prefix}{new}.{tensor}"] = state_dict.pop(f"{prefix}{old}.{tensor}")


class EncoderLayer(nn.Module):
    """Self-attention, then the feed-forward block, each added to its input (a residual) and normalised:
    pre-norm  x = x + Dropout(Sublayer(LN(x)))   (the stack's output normalised once more);
    post-norm x = LN(x + Dropout(Sublayer(x)))   (the paper's)."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        dim = config.emb_dim
        self.self_attention = MultiHeadAttention(dim, config.heads, config.attn_dropout)
        self.feed_forward = FeedForward(dim, config.ff_dim, config.activation, config.act_dropout)
        self.self_attention_norm, self.feed_forward_norm = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.dropout = nn.Dropout(config.dropout)
        self.pre_norm = config.norm == "pre"
        self.register_load_state_dict_pre_hook(_rename_old_norms)

    def attend(self, x: torch.Tensor, allowed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.self_attention(x, *self.self_attention.keys_values(x), allowed)

    def forward(self, x: torch.Tensor, allowed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [B, S, D], allowed [B, 1, S]: the new x and the self-attention weights [B, h, S, S]."""
        if self.pre_norm:
            out, weights = self.attend(self.self_attention_norm(x), allowed)
            x = x + self.dropout(out)
            x = x + self.dropout(self.feed_forward(self.feed_forward_norm(x)))
        else:
            out, weights = self.attend(x, allowed)
            x = self.self_attention_norm(x + self.dropout(out))
            x = self.feed_forward_norm(x + self.dropout(self.feed_forward(x)))
        return x, weights


class DecoderLayer(nn.Module):
    """Causal self-attention, cross-attention over the encoder's output, then the feed-forward block,
    each a residual normalised as in EncoderLayer (pre- or post-norm)."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        dim = config.emb_dim
        # HeadsProbes in the copy attnmt explain probes (Transformer.fit_probe)
        self.self_attention: MultiHeadAttention | HeadsProbe = MultiHeadAttention(dim, config.heads, config.attn_dropout)
        self.cross_attention: MultiHeadAttention | HeadsProbe = MultiHeadAttention(dim, config.heads, config.attn_dropout)
        self.feed_forward = FeedForward(dim, config.ff_dim, config.activation, config.act_dropout)
        self.self_attention_norm, self.cross_attention_norm, self.feed_forward_norm = (nn.LayerNorm(dim) for _ in range(3))
        self.dropout = nn.Dropout(config.dropout)
        self.pre_norm = config.norm == "pre"
        self.register_load_state_dict_pre_hook(_rename_old_norms)

    def attend_self(self, y: torch.Tensor, causal: torch.Tensor, cache: Optional[LayerCache]
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Self-attention over the positions so far: y's own, and those a decoding `cache` holds (which
        receives y's keys and values)."""
        keys, values = self.self_attention.keys_values(y)
        if cache is not None:
            keys, values = cache.write(keys, values)
        return self.self_attention(y, keys, values, causal)

    def forward(self, y: torch.Tensor, causal: torch.Tensor, cross_keys: torch.Tensor, cross_values: torch.Tensor,
                source_allowed: torch.Tensor, cache: Optional[LayerCache] = None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """y [B, T, D] at the new positions, attending over the positions so far as `causal` [B, T, C]
        allows: the new ones alone (C = T), or, given a decoding `cache`, those it holds too.
        Cross-attention reads the encoder's keys and values [B, h, S, d_k] where source_allowed
        [B, 1, S]. Returns the new y and the self- and cross-attention weights [B, h, T, C] and [B, h, T, S]."""
        if self.pre_norm:
            out, self_weights = self.attend_self(self.self_attention_norm(y), causal, cache)
            y = y + self.dropout(out)
            out, cross_weights = self.cross_attention(self.cross_attention_norm(y), cross_keys, cross_values, source_allowed)
            y = y + self.dropout(out)
            y = y + self.dropout(self.feed_forward(self.feed_forward_norm(y)))
        else:
            out, self_weights = self.attend_self(y, causal, cache)
            y = self.self_attention_norm(y + self.dropout(out))
            out, cross_weights = self.cross_attention(y, cross_keys, cross_values, source_allowed)
            y = self.cross_attention_norm(y + self.dropout(out))
            y = self.feed_forward_norm(y + self.dropout(self.feed_forward(y)))
        return y, self_weights, cross_weights


class TransformerMemory(Rows):
    """The source as the decoder reads it: the mask [B, S], then each decoder layer's
    cross-attention keys and values [B, h, S, d_k], projected once per sentence."""

    def __init__(self, mask: torch.Tensor, cross: list[tuple[torch.Tensor, torch.Tensor]]):
        self.tensors = {"mask": mask}
        for layer, (keys, values) in enumerate(cross, 1):
            self.tensors.update({f"keys{layer}": keys, f"values{layer}": values})
        self.dims = {name: (0, 1 if name == "mask" else 2) for name in self.tensors}

    @property
    def mask(self) -> torch.Tensor:
        return self.tensors["mask"]

    def cross(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer `layer`'s (from 0) keys and values."""
        return self.tensors[f"keys{layer + 1}"], self.tensors[f"values{layer + 1}"]


def sinusoids(positions: torch.Tensor, dim: int, layout: str = "interleaved") -> torch.Tensor:
    """The paper's position encoding: PE(p, 2i) = sin(p / 10000^(2i/d)), PE(p, 2i+1) = cos(..), its
    dimensions `interleaved` so, or in `halves`: all the sines, then all the cosines (Marian's).
    positions [B, T] -> [B, T, dim]."""
    rates = torch.exp(torch.arange(0, dim, 2, device=positions.device) * (-math.log(10000.0) / dim))  # [dim/2]
    angles = positions.unsqueeze(-1).float() * rates                         # [B, T, dim/2]
    if layout == "halves":
        return torch.cat([angles.sin(), angles.cos()[..., : dim // 2]], dim=-1)  # [B, T, dim]
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(2)[..., :dim]  # sin, cos interleaved


class Transformer(nn.Module):
    """Encoder and decoder stacks, the embeddings and the output layer: seam.Model."""

    def __init__(self, config: TransformerConfig, src_vocab_size: int, tgt_vocab_size: int, fast: bool = True):
        super().__init__()
        self.config = config
        dim = config.emb_dim
        self.src_embedding = nn.Embedding(src_vocab_size, dim, padding_idx=PAD_ID)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, dim, padding_idx=PAD_ID)
        self.positions = nn.Embedding(config.max_positions, dim) if config.positions == "learned" else None
        self.dropout = nn.Dropout(config.dropout)
        self.encoder_layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.enc_layers))
        # The fast paths, chosen here: decoding caches written in place (fast.py), and fast/layers.py's
        # dropout and output product.
        decoder_layers = InPlaceDecoderLayers if fast else DecoderLayers
        self.decoder_layers = decoder_layers(DecoderLayer(config) for _ in range(config.dec_layers))
        pre = config.norm == "pre"
        self.encoder_norm = nn.LayerNorm(dim) if pre else nn.Identity()   # pre-norm: the stack's output
        self.decoder_norm = nn.LayerNorm(dim) if pre else nn.Identity()
        self.classifier = nn.Linear(dim, tgt_vocab_size)
        self._initialise()
        if config.share_embeddings:
            self.src_embedding.weight = self.tgt_embedding.weight
        if config.tie_embeddings:
            self.classifier.weight = self.tgt_embedding.weight
        if fast:
            use_fast_layers(self)

    def _initialise(self) -> None:
        for name, parameter in self.named_parameters():
            if self.config.init_uniform > 0:
                nn.init.uniform_(parameter, -self.config.init_uniform, self.config.init_uniform)
            elif "embedding" in name or name.startswith("positions"):
                nn.init.normal_(parameter, std=self.config.emb_dim ** -0.5)
            elif parameter.dim() > 1:
                nn.init.xavier_uniform_(parameter)
        if self.config.init == "fairseq":
            # fairseq's (and the anchor of configs/multi30k_en_de_transformer.yaml's): the query, key and
            # value projections at 1/√2 of Xavier's bound, the other layers' biases zero; post-norm layers
            # start much faster from it (docs/recipes.md).
            for module in self.modules():
                if isinstance(module, MultiHeadAttention):
                    for projection in (module.query_proj, module.key_proj, module.value_proj):
                        nn.init.xavier_uniform_(projection.weight, gain=2 ** -0.5)
                    nn.init.zeros_(module.out_proj.bias)
                elif isinstance(module, FeedForward):
                    for layer in module:
                        if isinstance(layer, nn.Linear):
                            nn.init.zeros_(layer.bias)
            nn.init.zeros_(self.classifier.bias)
        with torch.no_grad():  # padding embeddings stay zero
            self.src_embedding.weight[PAD_ID].zero_()
            self.tgt_embedding.weight[PAD_ID].zero_()

    # What every family gives (seam.Model).
    def encode(self, src: torch.Tensor, src_lengths: torch.Tensor) -> tuple[TransformerMemory, TransformerState]:
        encoded, mask, _ = self.encode_layers(src, src_lengths)
        return self.memory(encoded, mask), self.decoder_layers.empty_state(src.shape[0], self.config.heads, encoded)

    def step(self, prev_tokens: torch.Tensor, state: TransformerState, memory: TransformerMemory
             ) -> tuple[torch.Tensor, TransformerState, torch.Tensor]:
        """prev_tokens [B, T] at positions steps..steps+T-1 -> logits [B, T, V], the new state and the
        attention weights [B, T, S] that heatmaps show: the last layer's cross-attention, mean over heads."""
        state = state.make_room(prev_tokens.shape[1])
        positions = state.steps.unsqueeze(1) + torch.arange(prev_tokens.shape[1], device=prev_tokens.device)  # [B, T]
        caches = state.layer_caches(positions)
        # Every layer's cache has the same capacity C (T when it starts empty): one mask for all.
        capacity = caches[0].keys.shape[2] or positions.shape[1]
        causal = torch.arange(capacity, device=positions.device) <= positions.unsqueeze(-1)  # [B, T, C]
        y, _, cross = self.decode_layers(prev_tokens, positions, causal, memory, caches)
        new_state = state.like([state.steps + prev_tokens.shape[1],
                                *(t for cache in caches for t in (cache.keys, cache.values))])
        return self.classifier(y), new_state, cross[-1].mean(1)

    def features(self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """The decoder's output [B, T, D] for the whole target `<sos> y1 .. yn` [B, T], every position
        at once, each attending to those before it; the weights [B, T, S] as `step` gives them."""
        y, _, _, cross = self.teacher_forced(src, src_lengths, tgt_in)
        return y, cross[-1].mean(1)

    def output_layer(self, features: torch.Tensor) -> torch.Tensor:
        return self.classifier(features)

    def describe(self) -> dict[str, int | str | bool]:
        c = self.config
        return {"summary": f"Transformer {c.enc_layers}+{c.dec_layers} layers, d {c.emb_dim}, {c.heads} heads",
                "d_model": c.emb_dim, "heads": c.heads, "ff_dim": c.ff_dim, "enc_layers": c.enc_layers,
                "dec_layers": c.dec_layers, "norm": c.norm, "positions": c.positions, "activation": c.activation}

    # The pieces of both.
    def embed(self, embedding: nn.Embedding, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """√d-scaled token embeddings plus position encodings, [B, T, D]."""
        x = embedding(tokens) * math.sqrt(self.config.emb_dim)
        if self.positions is not None:
            return self.dropout(x + self.positions(positions.clamp(max=self.config.max_positions - 1)))
        return self.dropout(x + sinusoids(positions, self.config.emb_dim, self.config.sinusoid_layout).to(x.dtype))

    def encode_layers(self, src: torch.Tensor, src_lengths: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """The encoder's output [B, S, D], the source mask [B, S] and each layer's self-attention [B, h, S, S]."""
        positions = torch.arange(src.shape[1], device=src.device).expand(src.shape[0], -1)  # [B, S]
        mask = positions < src_lengths.to(src.device).unsqueeze(1)                         # [B, S]
        x = self.embed(self.src_embedding, src, positions)
        all_weights = []
        for layer in self.encoder_layers:
            x, weights = layer(x, mask.unsqueeze(1))
            all_weights.append(weights)
        return self.encoder_norm(x), mask, all_weights

    def decoder_stack(self) -> list[DecoderLayer]:
        """The decoder layers, typed (an nn.ModuleList yields them as plain nn.Modules)."""
        return cast(list[DecoderLayer], list(self.decoder_layers))

    def memory(self, encoded: torch.Tensor, mask: torch.Tensor) -> TransformerMemory:
        """The mask and each decoder layer's cross-attention keys and values of the encoder's output."""
        return TransformerMemory(mask, [layer.cross_attention.keys_values(encoded) for layer in self.decoder_stack()])

    def decode_layers(self, prev_tokens: torch.Tensor, positions: torch.Tensor, causal: torch.Tensor,
                      memory: TransformerMemory, caches: Optional[list[LayerCache]] = None
                      ) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
        """The decoder's output [B, T, D] for the tokens [B, T] at `positions` [B, T], attending as
        `causal` [B, T, C] allows (over the decoding `caches` of each layer, if given), and each layer's
        self- and cross-attention weights ([B, h, T, C] and [B, h, T, S])."""
        y = self.embed(self.tgt_embedding, prev_tokens, positions)
        source_allowed = memory.mask.unsqueeze(1)                                   # [B, 1, S]
        self_weights, cross_weights = [], []
        for i, layer in enumerate(self.decoder_stack()):
            y, s, c = layer(y, causal, *memory.cross(i), source_allowed, None if caches is None else caches[i])
            self_weights.append(s)
            cross_weights.append(c)
        return self.decoder_norm(y), self_weights, cross_weights

    def teacher_forced(self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor
                       ) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
        """The encoder, then decode_layers over the whole target tgt_in [B, T] at once, no cache (each
        position attends to those before it): the decoder's output and each layer's encoder
        self-attention, decoder self-attention and cross-attention weights."""
        encoded, mask, encoder_weights = self.encode_layers(src, src_lengths)
        positions = torch.arange(tgt_in.shape[1], device=tgt_in.device).expand(tgt_in.shape[0], -1)  # [B, T]
        causal = positions[0] <= positions.unsqueeze(-1)                            # [B, T, T]
        y, self_weights, cross_weights = self.decode_layers(tgt_in, positions, causal, self.memory(encoded, mask))
        return y, encoder_weights, self_weights, cross_weights

    # Capabilities, each asked by the code that uses it (seam.py).
    def map_shapes(self) -> dict[str, tuple[int, int]]:
        """translate.AttentionMaps."""
        c = self.config
        return {"cross": (c.dec_layers, c.heads), "encoder": (c.enc_layers, c.heads), "decoder": (c.dec_layers, c.heads)}

    def attention_maps(self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor
                       ) -> dict[str, torch.Tensor]:
        """Every attention map of the teacher-forced pass over tgt_in [B, T], each [B, layers, heads,
        queries, keys]: cross [.., T, S], encoder self-attention [.., S, S], decoder self-attention [.., T, T]."""
        _, encoder_weights, decoder_weights, cross_weights = self.teacher_forced(src, src_lengths, tgt_in)
        return {"cross": torch.stack(cross_weights, 1), "encoder": torch.stack(encoder_weights, 1),
                "decoder": torch.stack(decoder_weights, 1)}

    def token_embeddings(self) -> tuple[nn.Embedding, nn.Embedding]:
        """aligner.TokenEmbeddings."""
        return self.src_embedding, self.tgt_embedding

    def int8_layers(self) -> list[tuple[nn.Module, torch.dtype]]:
        """fast.int8.Int8Layers: every nn.Linear, i.e. every matrix product but the embeddings': each
        layer's attention projections and feed-forward pair (bfloat16 out), and the classifier
        (float32 logits)."""
        return [(module, torch.float32 if module is self.classifier else torch.bfloat16)
                for module in self.modules() if isinstance(module, nn.Linear)]

    def fit_probe(self, view: AttentionView) -> tuple[Probe, AttentionView]:
        """explain.Explainable: this network (a reference copy made for the purpose) with every layer's
        cross-attention turning uniform on request and the view's layer and kind recording, through a Probe."""
        layers = len(self.decoder_layers)
        if view.kind not in ("cross", "decoder"):
            raise AttnmtError(f"attention {view.kind}: a decoding step has cross and decoder self-attention; the "
                              f"encoder's self-attention is drawn by attnmt plot --attention encoder")
        view.check(self.map_shapes())
        chosen = (view.layer or layers) - 1
        probe = Probe()
        for i, layer in enumerate(self.decoder_stack()):
            cross, own = layer.cross_attention, layer.self_attention
            assert isinstance(cross, MultiHeadAttention) and isinstance(own, MultiHeadAttention), "probed once"
            layer.cross_attention = HeadsProbe(cross, probe, view.kind == "cross" and i == chosen, True)
            if view.kind == "decoder" and i == chosen:
                layer.self_attention = HeadsProbe(own, probe, True, False)
        return probe, AttentionView(view.kind, chosen + 1, view.head or 1)

    def score_function(self, view: AttentionView) -> str:
        """explain.Explainable: the score in one line, for learners."""
        d_k = self.config.emb_dim // self.config.heads
        keys = ("k_j the key of source position j" if view.kind == "cross"
                else "k_j the key of output position j so far (<sos> first)")
        return f"score(q, k_j) = q · k_j / √{d_k}  (one head: q the query of this output position, {keys})"
