"""The RNN family's network: encoder, bridge, attention and decoder, built from an RNNConfig."""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from ...errors import AttnmtError
from ...fast.layers import use_fast_layers
from ...seam import AttentionView, Probe
from ...vocab import PAD_ID
from .attention import AdditiveAttention, Attention, AttentionProbe, make_attention
from .config import RNNConfig
from .decoder import Decoder, RNNDecoderState, RNNMemory
from .encoder import Encoder, EncoderOutput, RNNState
from .fast_attention import SigmoidAdditiveAttention
from .fast_recurrence import FusedDecoder, GRULayerEncoder


class RNNEncoderDecoder(nn.Module):
    """An encoder-decoder RNN with attention (Bahdanau et al. 2015; Luong et al. 2015): seam.Model."""

    def __init__(self, config: RNNConfig, src_vocab_size: int, tgt_vocab_size: int, fast: bool = True):
        super().__init__()
        self.config = config
        # The fast paths, chosen here (fast: the classes that replace the reference ones, same weights),
        # each where its code runs: fast_recurrence.py's encoder layers (GRUs) and decoder loop
        # (FusedDecoder.loops), fast_attention.py's additive score, and fast/layers.py's dropout and
        # output product.
        encoder = GRULayerEncoder if fast and config.rnn == "gru" else Encoder
        self.encoder = encoder(src_vocab_size, config.emb_dim, config.enc_hidden, config.enc_layers,
                               config.bidirectional, config.rnn, config.dropout)
        attention, context_dim = make_attention(config.attention, config.dec_hidden, self.encoder.output_size,
                                                config.attn_dim, config.local_score, config.local_window,
                                                SigmoidAdditiveAttention if fast else AdditiveAttention)
        decoder = FusedDecoder if fast and FusedDecoder.loops(config, attention) else Decoder
        self.decoder = decoder(tgt_vocab_size, config.emb_dim, config.dec_hidden, config.dec_layers,
                               config.rnn, attention, context_dim, config.decoder,
                               config.input_feeding, config.dropout, config.tie_embeddings)
        self.bridge = (nn.Linear(self.encoder.output_size, config.dec_hidden)
                       if config.bridge == "linear" else None)
        if config.share_embeddings:
            self.encoder.embedding.weight = self.decoder.embedding.weight
        if config.init_uniform > 0:
            for parameter in self.parameters():
                nn.init.uniform_(parameter, -config.init_uniform, config.init_uniform)
            with torch.no_grad():  # padding embeddings stay zero, as nn.Embedding makes them
                self.encoder.embedding.weight[PAD_ID].zero_()
                self.decoder.embedding.weight[PAD_ID].zero_()
        if fast:
            use_fast_layers(self)

    # What every family gives (seam.Model).
    def encode(self, src: torch.Tensor, src_lengths: torch.Tensor) -> tuple[RNNMemory, RNNDecoderState]:
        """Run the encoder once; return what the decoder attends to and its first state."""
        encoded = self.encoder(src, src_lengths)
        keys = self.decoder.attention.project_keys(encoded.outputs)          # [B, S, A]
        memory = RNNMemory(keys, encoded.outputs, encoded.mask)
        return memory, self.decoder.initial_state(self._bridge(encoded), src.shape[0])

    def step(self, prev_tokens: torch.Tensor, state: RNNDecoderState, memory: RNNMemory
             ) -> tuple[torch.Tensor, RNNDecoderState, Optional[torch.Tensor]]:
        """One decoding step (T > 1 only when the decoder is `parallel`)."""
        features, state, weights = self.decoder.step_features(prev_tokens, state, memory)
        return self.output_layer(features), state, weights

    def features(self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor
                 ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """Features [B, T, O] and attention weights [B, T, S]; in training, with model.teacher_forcing
        below 1, scheduled sampling (Decoder.features)."""
        memory, state = self.encode(src, src_lengths)
        return self.decoder.features(tgt_in, state, memory, self.config.teacher_forcing if self.training else 1.0)

    def output_layer(self, features: torch.Tensor) -> torch.Tensor:
        return self.decoder.output_layer(features)

    def describe(self) -> dict[str, int | str | bool]:
        c = self.config
        local = ({"local_window": c.local_window, "local_score": c.local_score}
                 if c.attention in ("local_m", "local_p") else {})
        return {"summary": f"{c.rnn.upper()} encoder-decoder, {c.attention} attention, {c.decoder} decoder",
                "rnn": c.rnn, "decoder": c.decoder, "attention": c.attention, **local, "emb_dim": c.emb_dim,
                "enc_hidden": c.enc_hidden, "bidirectional": c.bidirectional, "enc_layers": c.enc_layers,
                "dec_hidden": c.dec_hidden, "dec_layers": c.dec_layers, "input_feeding": c.input_feeding}

    def _bridge(self, encoded: EncoderOutput) -> RNNState:
        """The decoder's initial hidden state from the encoder's final top-layer state."""
        layers = self.config.dec_layers

        def convert(final: torch.Tensor) -> torch.Tensor:                  # [enc_layers, B, D]
            top = final[-1]                                                 # [B, D]
            if self.config.bridge == "zero":
                top = top.new_zeros(top.shape[0], self.config.dec_hidden)
            elif self.bridge is not None:
                top = torch.tanh(self.bridge(top))                          # [B, H]
            return top.unsqueeze(0).repeat(layers, 1, 1).contiguous()      # [dec_layers, B, H]

        return tuple(map(convert, encoded.final))

    # Capabilities, each asked by the code that uses it (seam.py).
    def map_shapes(self) -> dict[str, tuple[int, int]]:
        """translate.AttentionMaps: one map, one layer, one head; none without attention."""
        return {"cross": (1, 1)} if self.decoder.attention.returns_weights else {}

    def attention_maps(self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor
                       ) -> dict[str, torch.Tensor]:
        """The attention of the teacher-forced pass over tgt_in [B, T]: cross [B, 1, 1, T, S] (one
        layer, one head); none without attention."""
        _, weights = self.features(src, src_lengths, tgt_in)
        return {} if weights is None else {"cross": weights[:, None, None]}

    def token_embeddings(self) -> tuple[nn.Embedding, nn.Embedding]:
        """aligner.TokenEmbeddings."""
        return self.encoder.embedding, self.decoder.embedding

    def int8_layers(self) -> list[tuple[nn.Module, torch.dtype]]:
        """fast.int8.Int8Layers: the layers whose products run at every decoding step, each with the
        dtype of its output in int8 decoding: the decoder's RNN, the attention's query projection, the
        combine layer and the classifier (float32 logits)."""
        decoder, attention = self.decoder, self.decoder.attention
        query = [(attention.query_proj, torch.bfloat16)] if isinstance(attention, AdditiveAttention) else []
        return [(decoder.rnn, torch.bfloat16), *query, (decoder.combine, torch.bfloat16),
                (decoder.classifier, torch.float32)]

    def fit_probe(self, view: AttentionView) -> tuple[Probe, AttentionView]:
        """explain.Explainable: this network (a reference copy made for the purpose) with its attention
        recording through a Probe."""
        if view.kind != "cross" or view.layer is not None or view.head is not None:
            raise AttnmtError("an RNN model has one attention, of the output over the source: layers, heads and "
                              "self-attention are for Transformer models")
        attention = self.decoder.attention
        if not attention.returns_weights:
            raise AttnmtError("this model has no attention (model.attention none): there is nothing to explain")
        assert isinstance(attention, Attention), "probed once"
        probe = Probe()
        self.decoder.attention = AttentionProbe(attention, probe)
        return probe, view

    def score_function(self, view: AttentionView) -> str:
        """explain.Explainable: the score in one line, for learners."""
        query = ("q = s_{i-1}, the decoder's previous state" if self.config.decoder == "bahdanau"
                 else "q = h_t, the decoder's new state")
        return (f"score(q, h_j) = {self.decoder.attention.formula}  ({self.config.attention}; {query}; "
                f"h_j the encoder's output at source position j)")
