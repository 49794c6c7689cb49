"""A third model family, written here only, plugs in through the seam (attnmt/families/seam.py) and the
registry (families.register) alone: it trains, saves, loads, translates, searches and serves without a
line of attnmt changed. The toy is the smallest network with attention: each target position's
previous token attends over the source embeddings (a bigram model with a look at the source)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pytest
import torch
from conftest import tiny_dates_config
from torch import nn

from attnmt.config import MODEL_CONFIGS, Config, ModelConfig, config_from_dict, ranged
from attnmt.errors import AttnmtError
from attnmt.families import Family, register, unregister
from attnmt.families.seam import AttentionView, Probe, SourceMemory
from attnmt.train import train
from attnmt.translate import Translator
from attnmt.vocab import PAD_ID


@dataclass
class ToyConfig(ModelConfig):
    """The toy family's keys: one of its own, checked by the family."""

    arch: str = "toy"
    # How sharply the previous token's query attends (a multiplier of its scores).
    sharpness: float = ranged(1.0, "(0, 100]")

    def check(self, config: Config) -> None:
        super().check(config)
        if self.enc_layers != 1 or self.dec_layers != 1:
            raise AttnmtError("model.arch toy has no layers to stack: leave model.enc_layers and dec_layers at 1")


class ToyMemory(SourceMemory):
    """The source mask [B, S] and its embeddings [B, S, D]."""


class ToyState:
    """How many target positions each row has decoded, [B]; the toy needs nothing else."""

    def __init__(self, steps: torch.Tensor):
        self.steps = steps

    def tensors(self) -> list[torch.Tensor]:
        return [self.steps]

    def like(self, tensors: list[torch.Tensor]) -> "ToyState":
        return ToyState(tensors[0])

    def dims(self) -> list[tuple[int, Optional[int]]]:
        return [(0, None)]

    def select(self, index: torch.Tensor) -> "ToyState":
        return ToyState(self.steps.index_select(0, index))

    def reorder(self, index: torch.Tensor) -> "ToyState":
        return self.select(index)

    def put(self, index: torch.Tensor, source: "ToyState") -> None:
        self.steps.index_copy_(0, index, source.steps)

    def make_room(self, positions: int) -> "ToyState":
        return self


class ToyNetwork(nn.Module):
    returns_attention = True
    fast_classes: dict[type, type] = {}

    def __init__(self, config: ToyConfig, src_vocab_size: int, tgt_vocab_size: int):
        super().__init__()
        self.config = config
        self.src_embedding = nn.Embedding(src_vocab_size, config.emb_dim, padding_idx=PAD_ID)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, config.emb_dim, padding_idx=PAD_ID)
        self.classifier = nn.Linear(2 * config.emb_dim, tgt_vocab_size)

    def describe(self) -> dict[str, int | str | bool]:
        return {"summary": f"toy: previous token attends over the source, d {self.config.emb_dim}",
                "emb_dim": self.config.emb_dim}

    def map_shapes(self) -> dict[str, tuple[int, int]]:
        return {"cross": (1, 1)}

    def int8_layers(self) -> list[tuple[nn.Module, torch.dtype]]:
        return []

    def token_embeddings(self) -> tuple[nn.Embedding, nn.Embedding]:
        return self.src_embedding, self.tgt_embedding

    def encode(self, src: torch.Tensor, src_lengths: torch.Tensor) -> tuple[ToyMemory, ToyState]:
        return (ToyMemory(src != PAD_ID, self.src_embedding(src)),
                ToyState(torch.zeros(src.shape[0], dtype=torch.long, device=src.device)))

    def step(self, prev_tokens: torch.Tensor, state: ToyState, memory: ToyMemory
             ) -> tuple[torch.Tensor, ToyState, torch.Tensor]:
        mask, keys = memory
        query = self.tgt_embedding(prev_tokens)                                        # [B, T, D]
        scores = self.config.sharpness * query @ keys.transpose(1, 2)                   # [B, T, S]
        weights = scores.masked_fill(~mask.unsqueeze(1), float("-inf")).softmax(-1)
        features = torch.cat([query, weights @ keys], -1)                               # [B, T, 2D]
        return self.classifier(features), ToyState(state.steps + prev_tokens.shape[1]), weights

    def forward(self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor,
                teacher_forcing: float = 1.0, classify_at: Optional[torch.Tensor] = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        memory, state = self.encode(src, src_lengths)
        logits, _, weights = self.step(tgt_in, state, memory)   # each position reads its own previous token
        return (logits if classify_at is None else logits[classify_at]), weights

    def attention_maps(self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor
                       ) -> dict[str, torch.Tensor]:
        return {"cross": self(src, src_lengths, tgt_in)[1][:, None, None]}

    def probed(self, view: AttentionView) -> tuple["ToyNetwork", Probe, AttentionView]:
        raise AttnmtError("the toy family cannot be explained step by step")

    def score_function(self, view: AttentionView) -> str:
        return "score(q, h_j) = sharpness · q·h_j"


@pytest.fixture
def toy_family():
    register("toy", Family(ToyConfig, ToyNetwork))  # type: ignore[arg-type]
    yield
    unregister("toy")


def toy_config(tmp_path, **model) -> Config:
    values = tiny_dates_config(tmp_path, arch="toy", emb_dim=24, **model)
    values["data"]["num_pairs"] = 600
    return config_from_dict(values)


def test_a_third_family_trains_translates_and_searches_through_the_seam(toy_family, tmp_path):
    result = train(toy_config(tmp_path / "run", sharpness=2.0), log=lambda _: None)
    translator = Translator.load(result.model_path, device="cpu")
    assert type(translator.model) is ToyNetwork and translator.config.model == ToyConfig(emb_dim=24, dropout=0.0,
                                                                                         sharpness=2.0)
    sentences = ["May 5, 2001", "12/25/2031", "3. Oktober 1990"]
    greedy = translator.translate(sentences)
    assert [t.text for t in translator.translate(sentences, beam_size=1)] == [t.text for t in greedy]
    beams = translator.translate(sentences, beam_size=3)
    for best, first in zip(beams, greedy, strict=True):
        assert best.log_prob >= first.log_prob - 1e-5           # beam search finds at least greedy's score
        assert best.attention.shape == (len(best.tokens), len(best.source_tokens))
        np.testing.assert_allclose(best.attention.sum(-1), 1, atol=1e-5)
    # It learned: the validation loss per target token (best_metric is its negative) is well below a uniform
    # guess's (2.15 against 2.71 nats when written).
    assert -result.best_metric < 0.85 * math.log(len(translator.tokenization.tgt_vocab))


def test_a_third_family_serves_and_describes_itself(toy_family, tmp_path):
    from fastapi.testclient import TestClient

    from attnmt.serve import create_app

    translator = Translator.load(train(toy_config(tmp_path / "run"), log=lambda _: None).model_path, device="cpu")
    with TestClient(create_app(translator)) as client:
        info = client.get("/model").json()
        assert info["arch"] == "toy" and info["maps"] == {"cross": [1, 1]}
        assert info["architecture"] == {"summary": "toy: previous token attends over the source, d 24", "emb_dim": 24}
        answer = client.post("/translate", json={"text": "May 5, 2001", "beam": 2, "attention": True}).json()["results"][0]
        expected = translator.translate(["May 5, 2001"], beam_size=2)[0]
        assert answer["translation"] == expected.text and len(answer["attention"]) == len(expected.tokens)
        refusal = client.post("/explain", json={"text": "May 5, 2001"})
        assert refusal.status_code == 422 and refusal.json() == {"error": "the toy family cannot be explained step by step"}


def test_the_familys_own_checks_and_keys(toy_family, tmp_path):
    with pytest.raises(AttnmtError, match="model.sharpness: 0.0 is out of range; allowed: \\(0, 100\\]"):
        toy_config(tmp_path, sharpness=0.0)
    with pytest.raises(AttnmtError, match="model.arch toy has no layers to stack"):
        toy_config(tmp_path, enc_layers=2)
    with pytest.raises(AttnmtError, match="model.heads is a key of model.arch transformer, not of this config's toy"):
        toy_config(tmp_path, heads=2)


def test_a_model_file_of_an_unknown_family_is_refused_in_one_line(toy_family, tmp_path):
    path = train(toy_config(tmp_path / "run"), log=lambda _: None).model_path
    unregister("toy")
    try:
        with pytest.raises(AttnmtError, match="model.arch: 'toy' is not one of rnn, transformer"):
            Translator.load(path, device="cpu")
    finally:
        register("toy", Family(ToyConfig, ToyNetwork))  # type: ignore[arg-type]


def test_register_refuses_an_arch_taken(toy_family):
    for arch in ("toy", "rnn"):
        with pytest.raises(ValueError, match=f"model.arch '{arch}' is registered already"):
            register(arch, Family(ToyConfig, ToyNetwork))  # type: ignore[arg-type]
    assert MODEL_CONFIGS["rnn"] is not ToyConfig                        # nothing was replaced
