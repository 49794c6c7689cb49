"""The Transformer family: attention by hand, masks, incremental decoding with caches equal to the
teacher-forced forward, the seam (search, model files, serving), and learning."""

from __future__ import annotations

import math

import pytest
import torch
from test_model import one_thread, tiny_corpus  # noqa: F401 (one_thread: an autouse fixture)
from torch import nn
from torch.testing import assert_close

from attnmt import Translator
from attnmt.batch import collate, pad
from attnmt.config import Config, DataConfig, TrainConfig, validate
from attnmt.configfile import config_from_dict
from attnmt.errors import AttnmtError
from attnmt.families import build_model
from attnmt.families.transformer.cache import TransformerState
from attnmt.families.transformer.config import TransformerConfig
from attnmt.families.transformer.fast import InPlaceState
from attnmt.families.transformer.network import DecoderLayer, EncoderLayer, MultiHeadAttention, Transformer, sinusoids
from attnmt.fast import fast_paths_in
from attnmt.seam import forced_logits
from attnmt.search import greedy
from attnmt.training.step import make_optimizer, sequence_loss
from attnmt.vocab import EOS_ID, SOS_ID

VOCAB = 12


def make_transformer(seed: int = 0, fast: bool = True, **kwargs) -> Transformer:
    """A small Transformer in eval mode, built with its fast paths or of the reference modules alone."""
    torch.manual_seed(seed)
    values = {"arch": "transformer", "emb_dim": 16, "heads": 2, "ff_dim": 32, "enc_layers": 2, "dec_layers": 2,
              "dropout": 0.0, **kwargs}
    config = TransformerConfig(**values)
    validate(Config(data=DataConfig(path="unused"), model=config))
    model = build_model(config, VOCAB, VOCAB, fast_paths=fast).eval()
    assert bool(fast_paths_in(model)) is fast
    return model


def test_config_refusals_name_the_keys():
    with pytest.raises(AttnmtError, match=r"model.emb_dim \(30\) must be a multiple of model.heads \(4\)"):
        validate(Config(data=DataConfig(path="x"), model=TransformerConfig(emb_dim=30, heads=4)))
    # Teacher forcing below 1 (scheduled sampling) is the RNN's: a Transformer trains on the gold prefix,
    # and refuses the key, in its place (model) or where earlier configs kept it (train).
    for where in ("model", "train"):
        values = {"data": {"path": "x"}, "model": {"arch": "transformer"}}
        values.setdefault(where, {})["teacher_forcing"] = 0.5
        with pytest.raises(AttnmtError, match=r"model.teacher_forcing is a key of model.arch rnn"):
            config_from_dict(values)
    # An earlier config's train.teacher_forcing 1.0, what a Transformer always trained with, still reads.
    config = config_from_dict({"data": {"path": "x"}, "model": {"arch": "transformer"}, "train": {"teacher_forcing": 1.0}})
    assert config.model.arch == "transformer" and not hasattr(config.model, "teacher_forcing")


def test_fairseqs_initialisation_scales_the_attention_projections_and_zeroes_the_other_biases():
    xavier, fairseq = make_transformer(), make_transformer(init="fairseq")
    bound = math.sqrt(6 / (16 + 16))                                        # Xavier's, for 16 -> 16
    for model, gain in ((xavier, 1.0), (fairseq, 2 ** -0.5)):
        attention = model.decoder_stack()[1].cross_attention
        assert isinstance(attention, MultiHeadAttention)
        for projection in (attention.query_proj, attention.key_proj, attention.value_proj):
            assert bound * gain * 0.8 < projection.weight.abs().max() <= bound * gain
    biases = [*(layer.self_attention.out_proj.bias for layer in fairseq.encoder_layers),
              *(layer.feed_forward[i].bias for layer in fairseq.decoder_stack() for i in (0, 3)), fairseq.classifier.bias]
    assert all((bias == 0).all() for bias in biases)
    assert (xavier.classifier.bias != 0).all()                              # PyTorch's, as before
    assert (fairseq.encoder_layers[0].self_attention_norm.weight == 1).all()        # LayerNorms start as the identity
    assert_close(fairseq.tgt_embedding.weight.std(), xavier.tgt_embedding.weight.std(), atol=0.02, rtol=0)
    with pytest.raises(AttnmtError, match=r"model.init fairseq and model.init_uniform 0.1 each say how the weights start"):
        validate(Config(data=DataConfig(path="x"), model=TransformerConfig(init="fairseq", init_uniform=0.1)))


def test_attention_by_hand():
    """One head, identity projections: softmax(q kᵀ / √d) v, pads at zero weight."""
    attention = MultiHeadAttention(2, 1, 0.0)
    with torch.no_grad():
        for proj in (attention.query_proj, attention.key_proj, attention.value_proj, attention.out_proj):
            proj.weight.copy_(torch.eye(2))
            proj.bias.zero_()
    query = torch.tensor([[[1.0, 0.0]]])                                   # [1, 1, 2]
    keys = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]]])             # [1, 3, 2]
    allowed = torch.tensor([[[True, True, False]]])
    out, weights = attention(query, *attention.keys_values(keys), allowed)
    scores = [1 / math.sqrt(2), 0.0]
    expected = [math.exp(s) / sum(math.exp(t) for t in scores) for s in scores] + [0.0]
    assert_close(weights[0, 0, 0], torch.tensor(expected))
    assert_close(out[0, 0], torch.tensor([expected[0], expected[1]]))


def test_sinusoids_are_the_papers():
    pe = sinusoids(torch.tensor([[0, 3]]), 6)[0]
    for p, row in zip([0, 3], pe):
        for i in range(3):
            assert row[2 * i].item() == pytest.approx(math.sin(p / 10000 ** (2 * i / 6)), abs=1e-6)
            assert row[2 * i + 1].item() == pytest.approx(math.cos(p / 10000 ** (2 * i / 6)), abs=1e-6)


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_the_layers_compute_what_torchs_transformer_layers_compute(norm):
    """An encoder and a decoder layer, given the weights of torch's nn.TransformerEncoderLayer and
    nn.TransformerDecoderLayer (norm_first for pre-norm, LayerNorm after each residual sum for
    post-norm), give their outputs: the residuals and norms are where the paper and fairseq put them."""
    torch.manual_seed(0)
    config = TransformerConfig(emb_dim=16, heads=2, ff_dim=32, dropout=0.0, attn_dropout=0.0, act_dropout=0.0, norm=norm)
    encoder, decoder = EncoderLayer(config), DecoderLayer(config)
    shape = {"d_model": 16, "nhead": 2, "dim_feedforward": 32, "dropout": 0.0, "batch_first": True, "norm_first": norm == "pre"}
    their_encoder, their_decoder = nn.TransformerEncoderLayer(**shape), nn.TransformerDecoderLayer(**shape)

    def copy(theirs: nn.Module, ours: nn.Module) -> None:
        if isinstance(theirs, nn.MultiheadAttention):
            projections = (ours.query_proj, ours.key_proj, ours.value_proj)
            theirs.in_proj_weight.copy_(torch.cat([p.weight for p in projections]))
            theirs.in_proj_bias.copy_(torch.cat([p.bias for p in projections]))
            ours = ours.out_proj
            theirs = theirs.out_proj
        if isinstance(ours, nn.LayerNorm):   # not the identity they start as
            ours.weight.normal_()
            ours.bias.normal_()
        theirs.weight.copy_(ours.weight)
        theirs.bias.copy_(ours.bias)

    with torch.no_grad():
        for theirs, ours in [("self_attn", encoder.self_attention), ("linear1", encoder.feed_forward[0]),
                             ("linear2", encoder.feed_forward[3]), ("norm1", encoder.self_attention_norm),
                             ("norm2", encoder.feed_forward_norm)]:
            copy(getattr(their_encoder, theirs), ours)
        for theirs, ours in [("self_attn", decoder.self_attention), ("multihead_attn", decoder.cross_attention),
                             ("linear1", decoder.feed_forward[0]), ("linear2", decoder.feed_forward[3]),
                             ("norm1", decoder.self_attention_norm), ("norm2", decoder.cross_attention_norm),
                             ("norm3", decoder.feed_forward_norm)]:
            copy(getattr(their_decoder, theirs), ours)
    x, y = torch.randn(2, 5, 16), torch.randn(2, 4, 16)
    source_allowed = (torch.arange(5) < torch.tensor([[5], [3]])).unsqueeze(1)       # [B, 1, S]
    causal = (torch.arange(4) <= torch.arange(4).unsqueeze(1)).expand(2, 4, 4)        # [B, T, T]
    encoded, _ = encoder(x, source_allowed)
    assert_close(encoded, their_encoder(x, src_key_padding_mask=~source_allowed[:, 0]), atol=1e-5, rtol=0)
    decoded, _, _ = decoder(y, causal, *decoder.cross_attention.keys_values(encoded), source_allowed)
    future = nn.Transformer.generate_square_subsequent_mask(4)
    assert_close(decoded, their_decoder(y, encoded, tgt_mask=future, memory_key_padding_mask=~source_allowed[:, 0]),
                 atol=1e-5, rtol=0)


@pytest.mark.parametrize("norm,positions", [("pre", "sinusoidal"), ("post", "learned")])
def test_encoder_ignores_padding_and_decoder_never_sees_the_future(norm, positions):
    model = make_transformer(norm=norm, positions=positions)
    short, longer = [5, 6, 7], [8, 9, 10, 11, 4, 5]
    alone, mask, _ = model.encode_layers(torch.tensor([short]), torch.tensor([3]))
    batched, _, weights = model.encode_layers(pad([short, longer]), torch.tensor([3, 6]))
    assert_close(batched[0, :3], alone[0], atol=1e-5, rtol=0)
    assert all((w[0, :, :, 3:] == 0).all() for w in weights)                 # pads get no weight
    src, lengths = pad([short, longer]), torch.tensor([3, 6])
    tgt = torch.tensor([[SOS_ID, 5, 6, 7, 8], [SOS_ID, 9, 10, 11, 4]])
    logits = forced_logits(model, src, lengths, tgt)
    changed = tgt.clone()
    changed[:, 3:] = 11                                                      # another future
    other = forced_logits(model, src, lengths, changed)
    assert_close(logits[:, :3], other[:, :3], atol=1e-5, rtol=0)
    assert not torch.allclose(logits[:, 3:], other[:, 3:])


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("kwargs", [{}, {"norm": "post", "positions": "learned", "activation": "gelu"},
                                    {"tie_embeddings": True}])
def test_incremental_decoding_equals_the_teacher_forced_forward(kwargs, fast):
    """Step by step with each layer's cache (the fast path's and the reference's), rows at different
    positions, the logits of the whole forward."""
    model = make_transformer(fast=fast, **kwargs)
    src, lengths = pad([[5, 6, 7, 8], [9, 10]]), torch.tensor([4, 2])
    tgt = torch.tensor([[SOS_ID, 5, 6, 7, 8, 9], [SOS_ID, 10, 11, 4, 5, 6]])
    with torch.no_grad():
        features, full_weights = model.features(src, lengths, tgt)
        full = model.output_layer(features)
        memory, state = model.encode(src, lengths)
        steps = []
        for t in range(tgt.shape[1]):
            logits, state, weights = model.step(tgt[:, t : t + 1], state, memory)
            assert_close(weights[:, 0], full_weights[:, t], atol=1e-5, rtol=0)
            steps.append(logits)
        assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)
        assert state.steps.tolist() == [6, 6]
        # Row 1 restarts from a fresh state while row 0 goes on: each as if alone.
        _, fresh = model.encode(src[1:, :2], lengths[1:])
        state.put(torch.tensor([1]), fresh)
        logits, state, _ = model.step(torch.tensor([[7], [SOS_ID]]), state, memory)
        alone = forced_logits(model, src[1:, :2], lengths[1:], torch.tensor([[SOS_ID]]))
        assert_close(logits[1, 0], alone[0, 0], atol=1e-5, rtol=0)
        assert state.steps.tolist() == [7, 1]


@pytest.mark.parametrize("fast,capacities", [(True, [1, 2, 4, 4, 8, 8, 8, 8, 16]), (False, list(range(1, 10)))])
def test_state_caches_grow_by_doubling_or_as_needed(fast, capacities):
    """The fast path's caches grow by doubling and take each step in place; the reference's grow to
    exactly the positions decoded, a new tensor each step."""
    model = make_transformer(fast=fast)
    memory, state = model.encode(torch.tensor([[5, 6]]), torch.tensor([2]))
    grown, written_in_place = [], []
    for _ in range(9):
        before = state.caches[0]
        _, state, _ = model.step(torch.tensor([[5]]), state, memory)
        grown.append(state.caches[0].shape[2])                               # [B, h, C, d_k]
        written_in_place.append(state.caches[0] is before)
    assert grown == capacities
    assert written_in_place == [fast and a == b for a, b in zip([0, *capacities], capacities)]
    assert type(state) is (InPlaceState if fast else TransformerState) and len(state.caches) == 2 * 2


def test_tied_embeddings_share_one_matrix():
    model = make_transformer(tie_embeddings=True)
    assert model.classifier.weight is model.tgt_embedding.weight


def test_overfits_a_tiny_corpus():
    model = make_transformer(1, emb_dim=32, heads=4, ff_dim=64).train()
    examples = tiny_corpus(3)
    batch = collate(examples, list(range(len(examples))))
    optimizer = make_optimizer(model, TrainConfig(lr=3e-3))
    for _ in range(300):
        optimizer.zero_grad()
        logits = forced_logits(model, batch.src, batch.src_lengths, batch.tgt_in)
        loss = sequence_loss(logits, batch.tgt_out)
        loss.backward()
        optimizer.step()
    model.eval()
    hypotheses = greedy(model, batch.src, batch.src_lengths, torch.full((len(examples),), 12))
    assert [h.ids for h in hypotheses] == [target for _, target in examples]


def test_trains_saves_loads_and_translates(transformer_dates_model):
    translator = Translator.load(transformer_dates_model, "cpu")
    assert translator.model.config.arch == "transformer"
    sentences = ["March 3, 2021", "", "12/24/1999"]
    greedy_out = translator.translate(sentences)
    assert greedy_out[1].text == ""
    for t in (greedy_out[0], greedy_out[2]):
        assert t.attention.shape == (len(t.tokens), len(t.source_tokens))
        assert_close(torch.tensor(t.attention).sum(-1), torch.ones(len(t.tokens)), atol=1e-4, rtol=0)
    nbest = translator.translate_nbest(sentences, n_best=2, beam_size=3)
    assert [len(n) for n in nbest] == [2, 1, 2]
    again = Translator.load(transformer_dates_model, "cpu")
    assert [t.text for t in again.translate(sentences)] == [t.text for t in greedy_out]


def test_serving_reports_the_family(transformer_dates_model):
    from fastapi.testclient import TestClient

    from attnmt.serve import create_app

    with TestClient(create_app(Translator.load(transformer_dates_model, "cpu"))) as client:
        info = client.get("/model").json()
        assert info["arch"] == "transformer" and info["architecture"]["summary"] == "Transformer 2+2 layers, d 32, 4 heads"
        assert info["architecture"]["d_model"] == 32 and info["architecture"]["heads"] == 4
        result = client.post("/translate", json={"text": "May 5, 2001", "attention": True}).json()["results"][0]
        assert len(result["attention"]) == len(result["tokens"])
        assert all(len(row) == len(result["source_tokens"]) for row in result["attention"])
        assert "maps" not in result
        body = client.post("/translate", json={"texts": ["May 5, 2001", ""], "maps": True}).json()
        maps, empty = body["results"][0]["maps"], body["results"][1]["maps"]
        n_out, n_src = len(body["results"][0]["tokens"]), len(body["results"][0]["source_tokens"])
        assert torch.tensor(maps["cross"]).shape == (2, 4, n_out, n_src)
        assert torch.tensor(maps["encoder"]).shape == (2, 4, n_src, n_src)
        assert torch.tensor(maps["decoder"]).shape == (2, 4, n_out, n_out)
        assert info["maps"] == {name: list(torch.tensor(m).shape[:2]) for name, m in maps.items()}  # layers, heads
        assert info["engine"] == "attnmt" and info["explains"] is True
        assert empty == {}


def test_eos_ends_decoding():
    model = make_transformer(3)
    with torch.no_grad():
        model.classifier.bias[EOS_ID] += 100.0
    hypotheses = greedy(model, torch.tensor([[5, 6]]), torch.tensor([2]), torch.tensor([9]))
    assert hypotheses[0].ids == []


# ---------------------------------------------------------------- every attention map

def test_attention_maps_of_a_translation(transformer_dates_model):
    translator = Translator.load(transformer_dates_model, "cpu")
    result = translator.translate(["12/24/1999"])[0]
    maps = translator.attention_maps(result)
    n_out, n_src = len(result.tokens), len(result.source_tokens)
    assert maps["cross"].shape == (2, 4, n_out, n_src)
    assert maps["encoder"].shape == (2, 4, n_src, n_src)
    assert maps["decoder"].shape == (2, 4, n_out, n_out)
    for weights in maps.values():
        assert_close(torch.tensor(weights).sum(-1), torch.ones(weights.shape[:-1]), atol=1e-4, rtol=0)
    causal = torch.tensor(maps["decoder"])
    assert (causal.triu(1) == 0).all()                                   # no position reads a later one
    # The heatmap's default matrix: the last layer's cross-attention, averaged over heads.
    assert_close(torch.tensor(maps["cross"][-1].mean(0)), torch.tensor(result.attention), atol=1e-4, rtol=0)


def test_an_rnn_model_has_one_cross_map(dates_model):
    translator = Translator.load(dates_model, "cpu")
    result = translator.translate(["12/24/1999"])[0]
    maps = translator.attention_maps(result)
    assert list(maps) == ["cross"] and maps["cross"].shape == (1, 1, *result.attention.shape)
    assert_close(torch.tensor(maps["cross"][0, 0]), torch.tensor(result.attention), atol=1e-4, rtol=0)
    with pytest.raises(AttnmtError, match="no attention to show"):
        translator.attention_maps(translator.translate([""])[0])


@pytest.mark.parametrize("flags", [[], ["--attention", "encoder", "--layer", "1", "--head", "2"],
                                   ["--attention", "decoder", "--grid"], ["--grid"]])
def test_plot_draws_any_map(transformer_dates_model, tmp_path, flags, capsys):
    from attnmt import cli

    out = tmp_path / "map.png"
    assert cli.main(["plot", str(transformer_dates_model), "May 5, 2001", "--out", str(out), *flags]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("flags,refusal", [
    (["--layer", "3"], "layer 3: this model's cross attention has layers 1 to 2"),
    (["--head", "5"], "head 5: this model's cross attention has heads 1 to 4")])  # --head x: test_door's walk
def test_plot_refuses_a_map_the_model_lacks(transformer_dates_model, tmp_path, flags, refusal, capsys):
    from attnmt import cli

    out = tmp_path / "map.png"
    assert cli.main(["plot", str(transformer_dates_model), "May 5, 2001", "--out", str(out), *flags]) == 2
    assert capsys.readouterr().err.strip() == f"attnmt: error: {refusal}"
    assert not out.exists()


def test_plot_of_an_rnn_model_has_no_self_attention(dates_model, tmp_path, capsys):
    from attnmt import cli

    assert cli.main(["plot", str(dates_model), "May 5, 2001", "--out", str(tmp_path / "x.png"),
                     "--attention", "encoder"]) == 2
    assert "attention encoder: this model has no such attention; it has cross" in capsys.readouterr().err


@pytest.mark.parametrize("arch", ["transformer", "rnn"])
def test_a_joint_vocabulary_ties_all_three_matrices(tmp_path, arch):
    from conftest import tiny_dates_config

    from attnmt.configfile import config_from_dict
    from attnmt.training.train import train

    sizes = {"heads": 4, "ff_dim": 64} if arch == "transformer" else {}
    values = tiny_dates_config(tmp_path, arch=arch, emb_dim=32, tie_embeddings=True, share_embeddings=True, **sizes)
    values["data"]["num_pairs"] = 300
    values["train"]["epochs"] = 1
    values["vocab"] = {"joint": True}
    result = train(config_from_dict(values), log=lambda _: None)
    translator = Translator.load(result.model_path, "cpu")
    assert translator.tokenization.src_vocab.itos == translator.tokenization.tgt_vocab.itos
    model = translator.model
    source, target = ((model.src_embedding, model.tgt_embedding) if arch == "transformer"
                      else (model.encoder.embedding, model.decoder.embedding))
    classifier = model.classifier if arch == "transformer" else model.decoder.classifier
    assert source.weight is target.weight is classifier.weight
    assert translator.translate(["May 5, 2001"])[0].tokens
    values["vocab"] = {"joint": False}
    with pytest.raises(AttnmtError, match="model.share_embeddings needs vocab.joint: true"):
        validate(config_from_dict(values))
