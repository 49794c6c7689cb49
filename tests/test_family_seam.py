"""A third model family, written here only, plugs in through the seam (attnmt/seam.py) and the
registry (families.register) alone: it trains, saves, loads, translates, searches and serves without a
line of attnmt changed. The toy is the smallest network with attention: each target position's
previous token attends over the source embeddings (a bigram model with a look at the source)."""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from conftest import tiny_dates_config
from torch import nn

from attnmt.config import Config, ModelConfig, ranged
from attnmt.configfile import config_from_dict, model_config_class
from attnmt.errors import AttnmtError
from attnmt.families import Family, register, unregister
from attnmt.seam import Rows
from attnmt.training.train import train
from attnmt.translate import Translator
from attnmt.vocab import PAD_ID


@dataclass
class ToyConfig(ModelConfig):
    """The toy family's keys: one of its own, checked by the family."""

    arch: str = "toy"
    sharpness: float = ranged(1.0, "(0, 100]")   # how sharply the previous token's query attends

    def check(self, config: Config) -> None:
        super().check(config)
        if self.enc_layers != 1 or self.dec_layers != 1:
            raise AttnmtError("model.arch toy has no layers to stack: leave model.enc_layers and dec_layers at 1")


class ToyRows(Rows):
    def __init__(self, **tensors: torch.Tensor):   # memory: mask [B, S], keys [B, S, D]; state: steps [B]
        self.tensors, self.dims = tensors, {name: (0, None if name == "steps" else 1) for name in tensors}


class ToyNetwork(nn.Module):
    def __init__(self, config: ToyConfig, src_vocab_size: int, tgt_vocab_size: int, fast: bool = True):
        super().__init__()
        self.config = config
        self.src_embedding = nn.Embedding(src_vocab_size, config.emb_dim, padding_idx=PAD_ID)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, config.emb_dim, padding_idx=PAD_ID)
        self.classifier = nn.Linear(2 * config.emb_dim, tgt_vocab_size)

    def encode(self, src: torch.Tensor, src_lengths: torch.Tensor) -> tuple[ToyRows, ToyRows]:
        steps = torch.zeros(src.shape[0], dtype=torch.long, device=src.device)
        return ToyRows(mask=src != PAD_ID, keys=self.src_embedding(src)), ToyRows(steps=steps)

    def attend(self, tokens: torch.Tensor, memory: ToyRows) -> tuple[torch.Tensor, torch.Tensor]:
        query, (mask, keys) = self.tgt_embedding(tokens), memory                        # [B, T, D]
        scores = self.config.sharpness * query @ keys.transpose(1, 2)                    # [B, T, S]
        weights = scores.masked_fill(~mask.unsqueeze(1), -math.inf).softmax(-1)
        return torch.cat([query, weights @ keys], -1), weights                          # [B, T, 2D]

    def features(self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.attend(tgt_in, self.encode(src, src_lengths)[0])                     # each reads its previous token

    def step(self, prev_tokens: torch.Tensor, state: ToyRows, memory: ToyRows
             ) -> tuple[torch.Tensor, ToyRows, torch.Tensor]:
        features, weights = self.attend(prev_tokens, memory)
        return self.output_layer(features), ToyRows(steps=state.tensors["steps"] + prev_tokens.shape[1]), weights

    def output_layer(self, features: torch.Tensor) -> torch.Tensor:
        return self.classifier(features)

    def describe(self) -> dict[str, int | str | bool]:
        return {"summary": f"toy: previous token attends over the source, d {self.config.emb_dim}",
                "emb_dim": self.config.emb_dim}


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
        assert info["arch"] == "toy" and info["maps"] == {}                   # no attention maps: a capability it lacks
        assert info["architecture"] == {"summary": "toy: previous token attends over the source, d 24", "emb_dim": 24}
        answer = client.post("/translate", json={"text": "May 5, 2001", "beam": 2, "attention": True}).json()["results"][0]
        expected = translator.translate(["May 5, 2001"], beam_size=2)[0]
        assert answer["translation"] == expected.text and len(answer["attention"]) == len(expected.tokens)
        refusal = client.post("/explain", json={"text": "May 5, 2001"})
        assert refusal.status_code == 422 and refusal.json() == {
            "error": "attnmt explain: model.arch toy does not give it (its network has no fit_probe, score_function)"}


def test_the_toy_family_is_a_config_its_rows_and_a_small_network():
    """What a family must write is short: the seam asks for five things (seam.Model) and nothing else."""
    written = [line for part in (ToyConfig, ToyRows, ToyNetwork) for line in inspect.getsource(part).splitlines()
               if line.strip()]
    assert len(written) <= 40, len(written)


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
    assert model_config_class("rnn") is not ToyConfig                        # nothing was replaced
