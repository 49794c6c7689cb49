"""Every fast path (attnmt/fast, and each family's) against the reference module it replaces: the same
outputs and gradients (float64 where the arithmetic is exact to rounding), where the network
chooses them (its constructor's `fast`), and that fast_paths_in names those whose code runs."""

from __future__ import annotations

import copy
import inspect
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from conftest import tiny_dates_config
from test_model import VOCAB, count_rnn_calls, make_config, make_model, one_thread  # noqa: F401 (autouse fixture)
from test_search import TRANSFORMER, random_batch, random_model
from torch import nn
from torch.testing import assert_close

from attnmt import Translator
from attnmt.batch import collate, pad
from attnmt.configfile import config_from_dict, load_config
from attnmt.errors import AttnmtError
from attnmt.families import build_model, reference_copy
from attnmt.families.rnn import fast_attention, fast_recurrence
from attnmt.families.rnn.attention import AdditiveAttention
from attnmt.families.rnn.decoder import Decoder
from attnmt.families.rnn.encoder import Encoder
from attnmt.families.rnn.fast_attention import SigmoidAdditiveAttention, SigmoidScore
from attnmt.families.rnn.fast_recurrence import FusedDecoder, GRULayer, GRULayerEncoder
from attnmt.families.rnn.network import RNNEncoderDecoder
from attnmt.families.transformer.cache import DecoderLayers, TransformerState
from attnmt.families.transformer.config import TransformerConfig
from attnmt.families.transformer.fast import InPlaceDecoderLayers, InPlaceState
from attnmt.families.transformer.network import Transformer
from attnmt.fast import fast_paths_in
from attnmt.fast.layers import OUTPUT_BLOCK, BlockedLinear, RandDropout, use_fast_layers
from attnmt.precision import autocast
from attnmt.search import SearchSettings, beam_search, block_top_k, greedy, reference_top_k, top_k
from attnmt.training.step import TeacherForced, sequence_loss
from attnmt.training.train import train
from attnmt.translate import model_info
from attnmt.vocab import EOS_ID

# Every fast class, each naming the reference class it replaces.
FAST_CLASSES = [SigmoidAdditiveAttention, FusedDecoder, GRULayerEncoder, InPlaceDecoderLayers, RandDropout, BlockedLinear]
CUDA = pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(),
                                                                         reason="no CUDA GPU that torch can use")])


def fast_classes(model: nn.Module) -> set[str]:
    """The names of the fast classes among the modules of `model`, found without fast_paths_in."""
    return {type(m).__name__ for m in model.modules() if type(m) in FAST_CLASSES}


def vocab_sizes(model: nn.Module) -> tuple[int, int]:
    source, target = model.token_embeddings()
    return source.num_embeddings, target.num_embeddings


def reference_of(model: nn.Module) -> nn.Module:
    """The network of the reference modules alone with the weights of `model` (built with its fast
    paths), in its dtype and training mode."""
    reference = build_model(model.config, *vocab_sizes(model), fast_paths=False).to(next(model.parameters()).dtype)
    reference.load_state_dict(model.state_dict())                       # in the model's dtype: exact
    return reference.train(model.training)


# ---------------------------------------------------------------- where the fast paths are chosen

@pytest.mark.parametrize("network", [build_model, RNNEncoderDecoder])
def test_the_network_is_built_with_its_fast_paths_or_the_reference(network):
    config = make_config(order="luong", input_feeding=True, dropout=0.1)
    torch.manual_seed(0)
    fast = network(config, VOCAB, VOCAB)                                  # fast paths unless told otherwise
    assert fast_classes(fast) == {"SigmoidAdditiveAttention", "FusedDecoder", "GRULayerEncoder", "RandDropout", "BlockedLinear"}
    # Named where they run: training on a CPU (the output product is too narrow for blocks)...
    assert fast_paths_in(fast) == ["GRULayerEncoder for Encoder", "RandDropout for Dropout", "FusedDecoder for Decoder",
                                   "SigmoidAdditiveAttention for AdditiveAttention"]
    assert fast_paths_in(copy.deepcopy(fast).eval()) == ["SigmoidAdditiveAttention for AdditiveAttention"]  # decoding
    on_a_gpu = copy.deepcopy(fast).to("meta")                             # a device other than the CPU, for the names
    assert fast_paths_in(on_a_gpu) == ["FusedDecoder for Decoder", "SigmoidAdditiveAttention for AdditiveAttention"]
    torch.manual_seed(0)
    reference = network(config, VOCAB, VOCAB, False)
    assert fast_classes(reference) == set() and fast_paths_in(reference) == []
    assert type(reference.decoder) is Decoder and type(reference.encoder) is Encoder
    assert type(reference.decoder.attention) is AdditiveAttention
    assert all(type(m) is nn.Dropout for m in reference.modules() if isinstance(m, nn.Dropout))
    assert all(type(m) is nn.Linear for m in reference.modules() if isinstance(m, nn.Linear))
    # The same weights under the same names: each loads the other's, and the same seed draws the same.
    assert fast.state_dict().keys() == reference.state_dict().keys()
    assert all(torch.equal(v, reference.state_dict()[k]) for k, v in fast.state_dict().items())
    with torch.no_grad():
        for p in fast.parameters():
            p.add_(1.0)
    reference.load_state_dict(fast.state_dict())
    assert all(torch.equal(v, reference.state_dict()[k]) for k, v in fast.state_dict().items())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reference_copy_is_the_reference_with_the_same_weights(dtype):
    model = make_model(order="luong", input_feeding=True, dropout=0.1).to(dtype).train()
    before = torch.get_rng_state()
    copied = reference_copy(model, VOCAB, VOCAB)
    assert torch.equal(torch.get_rng_state(), before)                    # the caller's draws are left alone
    assert fast_paths_in(copied) == [] and fast_classes(model) and not copied.training and model.training
    assert all(p.dtype == dtype for p in copied.parameters())
    assert all(torch.equal(v, copied.state_dict()[k]) for k, v in model.state_dict().items())
    assert all(a is not b for a, b in zip(model.parameters(), copied.parameters()))


def test_reference_copy_keeps_float64_weights_exactly():
    model = make_model(order="luong", input_feeding=True).double()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(1e-12)                                        # off float32's grid
    copied = reference_copy(model, VOCAB, VOCAB)
    assert all(torch.equal(v, copied.state_dict()[k]) for k, v in model.state_dict().items())


def test_every_fast_class_extends_its_reference_without_new_state():
    for fast in FAST_CLASSES:
        assert fast.replaces is not fast and issubclass(fast, fast.replaces), fast.__name__
        assert not set(vars(fast)) & {"__init__", "_parameters", "_buffers"}, fast.__name__
        assert inspect.isfunction(vars(fast).get("runs")), f"{fast.__name__} says where it runs (fast_paths_in)"
    # Every fast class that a network of either family is built with is one of these (and so tested here).
    seen = {type(m) for model in (make_model(order="luong", input_feeding=True), random_model(**TRANSFORMER))
            for m in model.modules() if hasattr(type(m), "replaces")}
    assert seen == set(FAST_CLASSES)


def test_use_fast_layers_changes_exactly_the_plain_dropouts_and_linears():
    class OwnLinear(nn.Linear):
        pass

    torch.manual_seed(0)
    network = nn.Sequential(nn.Linear(3, 4), nn.Dropout(0.1), nn.Sequential(nn.Linear(4, 2), OwnLinear(2, 2)),
                            nn.LSTM(2, 2), nn.Embedding(5, 2))
    weights = {k: v.clone() for k, v in network.state_dict().items()}
    assert use_fast_layers(network) is network
    assert [type(m) for m in network.modules()][1:] == [BlockedLinear, RandDropout, nn.Sequential, BlockedLinear,
                                                         OwnLinear, nn.LSTM, nn.Embedding]
    assert weights.keys() == network.state_dict().keys()
    assert all(torch.equal(weights[k], v) for k, v in network.state_dict().items())


def spy_on_fast_code(monkeypatch) -> Counter:
    """Counts, by fast class, the calls in which its own code ran: those of each method it overrides
    (its `replaces` class's) that did not hand the call on to the overridden one. A fast path falls
    back by calling the method it overrides and nothing else, so the calls of the override, less
    those of the overridden method on its instances, are those that ran the fast code."""
    ran: Counter = Counter()

    def counting(function, name: str, sign: int, on: type = object):
        def counted(*args, **kwargs):
            if isinstance(args[0], on):
                ran[name] += sign
            return function(*args, **kwargs)
        return counted

    for cls in FAST_CLASSES:
        for name, method in vars(cls).items():
            if inspect.isfunction(method) and hasattr(cls.replaces, name):
                monkeypatch.setattr(cls, name, counting(method, cls.__name__, +1, cls))
                monkeypatch.setattr(cls.replaces, name, counting(getattr(cls.replaces, name), cls.__name__, -1, cls))
    # The sigmoid form of additive scores is fast_attention.py's, which the fused decoder loop computes too.
    for module in (fast_attention, fast_recurrence):
        monkeypatch.setattr(module, "sigmoid_hidden", counting(module.sigmoid_hidden, "SigmoidAdditiveAttention", +1))
    return ran


def reached(ran: Counter) -> set[str]:
    return {name for name, calls in ran.items() if calls > 0}


@pytest.mark.parametrize("device", ["cpu", CUDA])
@pytest.mark.parametrize("rnn,order,feeding,attention,teacher_forcing", [
    ("gru", "bahdanau", False, "bahdanau", 1.0),    # Bahdanau's order: step by step, no fused loop
    ("gru", "luong", False, "general", 1.0),        # the default recipe's: the whole target at once
    ("gru", "luong", True, "bahdanau", 1.0),        # input-fed GRU: the fused loop
    ("gru", "luong", True, "dot", 1.0),
    ("gru", "luong", True, "bahdanau", 0.5),        # scheduled sampling: step by step
    ("gru", "luong", True, "local_m", 1.0),         # a score the fused loop does not know
    ("lstm", "luong", True, "concat", 1.0)])        # LSTMs: nn.LSTM in encoder and decoder
def test_the_named_fast_paths_are_those_whose_code_runs(monkeypatch, device, rnn, order, feeding, attention,
                                                        teacher_forcing):
    """What the training log and `attnmt info` print (fast_paths_in) against the fast code a training
    step and a decoding reach, for every kind of RNN decoder: named exactly when reached."""
    config = make_config(rnn=rnn, order=order, input_feeding=feeding, attention=attention, dropout=0.2,
                         teacher_forcing=teacher_forcing)
    torch.manual_seed(0)
    model = build_model(config, VOCAB, OUTPUT_BLOCK + 100).to(device).train()   # wide enough for blocks
    batch = collate([([5, 6, 7, 8, 9], [9, 10, 11]), ([4, 5], [6, 7, 8, 9, 10, 11])], [0, 1])
    src, tgt_in, tgt_out, at = (t.to(device) for t in (batch.src, batch.tgt_in, batch.tgt_out, batch.target_mask))
    ran = spy_on_fast_code(monkeypatch)
    named = {name.split(" for ")[0] for name in fast_paths_in(model)}
    sequence_loss(TeacherForced(model)(src, batch.src_lengths, tgt_in, at), tgt_out[at]).backward()
    assert named == reached(ran)
    ran.clear()
    named = {name.split(" for ")[0] for name in fast_paths_in(model.eval())}
    with torch.no_grad():
        greedy(model, src, batch.src_lengths, torch.tensor([6, 6]))
    assert named == reached(ran)


def test_the_default_recipe_trains_without_the_fused_loop():
    """configs/multi30k_de_en.yaml: Luong's order without input feeding runs the decoder over the whole
    target at once, so the network is built with Decoder, and the encoder's GRU layers are the fast ones."""
    recipe = load_config(Path(__file__).resolve().parents[1] / "configs" / "multi30k_de_en.yaml")
    model = build_model(recipe.model, 50, 50)
    assert type(model.decoder) is Decoder and type(model.encoder) is GRULayerEncoder
    assert "FusedDecoder for Decoder" not in fast_paths_in(model)
    assert "GRULayerEncoder for Encoder" in fast_paths_in(model)


@pytest.mark.parametrize("rnn,order,feeding,attention,layers", [
    ("gru", "bahdanau", False, "bahdanau", 1), ("gru", "luong", True, "bahdanau", 1),
    ("gru", "luong", True, "concat", 1), ("gru", "luong", True, "dot", 1), ("gru", "luong", False, "general", 2),
    ("lstm", "luong", True, "bahdanau", 2), ("gru", "bahdanau", False, "none", 2),
    ("gru", "luong", True, "local_p", 1)])
def test_fast_model_trains_and_decodes_like_the_reference(rnn, order, feeding, attention, layers):
    """A whole model's loss, every gradient and its greedy outputs, through the fast paths and the
    reference modules, in float64."""
    torch.manual_seed(0)
    config = make_config(rnn=rnn, order=order, input_feeding=feeding, attention=attention,
                         enc_layers=layers, dec_layers=1 if feeding and rnn == "gru" else layers)
    assert_trains_and_decodes_alike(build_model(config, VOCAB, VOCAB).double().train())


def assert_trains_and_decodes_alike(model: nn.Module) -> None:
    """A float64 model's loss, every gradient and its greedy outputs, through its family's fast paths
    and through the reference modules with the same weights; the loss as training computes it."""
    batch = collate([([5, 6, 7, 8, 9], [9, 10, 11]), ([4, 5], [6, 7, 8, 9, 10, 11]), ([7, 8, 9], [4, 5])], [0, 1, 2])
    at = batch.target_mask
    results = []
    for network in (model, reference_of(model)):
        assert bool(fast_classes(network)) is (network is model)
        network.zero_grad()
        logits = TeacherForced(network)(batch.src, batch.src_lengths, batch.tgt_in, at)
        loss = sequence_loss(logits, batch.tgt_out[at])
        loss.backward()
        grads = {name: p.grad.clone() for name, p in network.named_parameters()}
        network.eval()
        outputs = [h.ids for h in greedy(network, batch.src, batch.src_lengths, torch.tensor([8, 8, 8]))]
        network.train()
        results.append((loss.detach(), grads, outputs))
    (loss, grads, outputs), (ref_loss, ref_grads, ref_outputs) = results
    assert_close(loss, ref_loss, atol=1e-12, rtol=1e-12)
    assert grads.keys() == ref_grads.keys()
    for name in ref_grads:
        assert_close(grads[name], ref_grads[name], atol=1e-12, rtol=1e-9, msg=name)
    assert outputs == ref_outputs


# ---------------------------------------------------------------- additive attention in the sigmoid form

@pytest.mark.parametrize("T", [1, 3])
def test_sigmoid_score_gradients(T):
    """The hand-written backward, against finite differences and against the tanh form."""
    torch.manual_seed(5)
    q = torch.randn(2, T, 5, dtype=torch.float64, requires_grad=True)
    keys = torch.randn(2, 4, 5, dtype=torch.float64, requires_grad=True)
    v = torch.randn(5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(SigmoidScore.apply, (q, keys, v))
    # 2 vᵀ σ(2q + 2k) = vᵀ tanh(q + k) + Σv (a shift the softmax does not see).
    upstream = torch.randn(2, T, 4, dtype=torch.float64)
    scores = SigmoidScore.apply(q, keys, v)
    tanh_form = torch.tanh(q.unsqueeze(2) + keys.unsqueeze(1)) @ v + v.sum()
    assert_close(scores, tanh_form)
    grads = torch.autograd.grad((scores * upstream).sum(), (q, keys, v))
    for ours, reference in zip(grads, torch.autograd.grad((tanh_form * upstream).sum(), (q, keys, v)), strict=True):
        assert_close(ours, reference)


@pytest.mark.parametrize("bias", [False, True])
def test_sigmoid_additive_attention_equals_the_tanh_form(bias):
    torch.manual_seed(1)
    fast = SigmoidAdditiveAttention(6, 5, 7, bias).double()
    reference = AdditiveAttention(6, 5, 7, bias).double()
    reference.load_state_dict(fast.state_dict())
    query = torch.randn(2, 3, 6, dtype=torch.float64, requires_grad=True)
    memory = torch.randn(2, 4, 5, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[True] * 4, [True, True, False, False]])
    results = []
    for attention in (fast, reference):
        context, weights = attention(query, attention.project_keys(memory), memory, mask)
        probe = torch.linspace(-1, 1, weights.numel(), dtype=torch.float64).view_as(weights)
        grads = torch.autograd.grad(context.sum() + (weights * probe).sum(), [query, memory, *attention.parameters()])
        results.append((context, weights, grads))
    (context, weights, grads), (ref_context, ref_weights, ref_grads) = results
    assert_close(context, ref_context)
    assert_close(weights, ref_weights)
    for ours, theirs in zip(grads, ref_grads, strict=True):
        assert_close(ours, theirs)


# ---------------------------------------------------------------- the encoder's GRU layers

def gru_encoders(layers: int, bidirectional: bool, emb: int = 8, hidden: int = 6, dropout: float = 0.0
                 ) -> tuple[GRULayerEncoder, Encoder]:
    """A GRULayerEncoder and the reference Encoder with its weights."""
    fast = GRULayerEncoder(VOCAB, emb, hidden, layers, bidirectional, "gru", dropout)
    reference = Encoder(VOCAB, emb, hidden, layers, bidirectional, "gru", dropout)
    reference.load_state_dict(fast.state_dict())
    return fast, reference


def encoder_runs(encoders: tuple[Encoder, Encoder], precision: str = "fp32"):
    """Outputs, final states and every gradient from GRULayer and from nn.GRU on the packed batch."""
    src = pad([[5, 6, 7], [8, 9, 10, 11, 4, 5, 6], [7], [4, 5, 6, 7, 8, 9, 10], [11, 10, 9, 8, 7]])
    lengths = torch.tensor([3, 7, 1, 7, 5])                      # unsorted, a one-token sentence
    results = []
    for encoder in encoders:
        with autocast(precision, torch.device("cpu")):
            outputs, (final,) = encoder.run_rnn(encoder.embedding(src), lengths)
        outputs, final = outputs.double(), final.double()
        probes = [torch.linspace(-1, 1, x.numel(), dtype=torch.float64).view_as(x) for x in (outputs, final)]
        ((outputs * probes[0]).sum() + (final * probes[1]).sum()).backward()
        results.append((outputs.detach(), final.detach(), {n: p.grad.clone() for n, p in encoder.named_parameters()}))
    return results


@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_gru_layer_encoder_equals_packed_gru(layers, bidirectional):
    """GRULayer's forward and backward against autograd through nn.GRU, in float64."""
    torch.manual_seed(0)
    encoder, reference = (e.double() for e in gru_encoders(layers, bidirectional))
    (outputs, final, grads), (ref_outputs, ref_final, ref_grads) = encoder_runs((encoder, reference))
    assert_close(outputs, ref_outputs, atol=1e-12, rtol=1e-10)
    assert_close(final, ref_final, atol=1e-12, rtol=1e-10)
    assert set(grads) == {name for name, _ in encoder.named_parameters()} == set(ref_grads)
    for name in ref_grads:
        assert_close(grads[name], ref_grads[name], atol=1e-12, rtol=1e-9, msg=name)
    # Training on a CPU goes through GRULayer, decoding through nn.GRU.
    calls = []
    encoder.rnn.register_forward_hook(lambda *_: calls.append(1))
    encoder(pad([[5, 6], [7]]), torch.tensor([2, 1]))
    assert calls == []
    with torch.no_grad():
        encoder(pad([[5, 6], [7]]), torch.tensor([2, 1]))
    assert calls == [1]


def test_gru_layer_encoder_in_bfloat16_stays_close():
    """Under bf16 autocast GRULayer's products round, its states and gates stay float32."""
    torch.manual_seed(0)
    (outputs, final, grads), (ref_outputs, ref_final, ref_grads) = encoder_runs(gru_encoders(2, True, 32, 48), "bf16")
    assert_close(outputs, ref_outputs, atol=0.01, rtol=0)                 # 0.003 measured
    assert_close(final, ref_final, atol=0.01, rtol=0)
    for name in ref_grads:                                                 # 0.009 at most, measured
        assert float((grads[name] - ref_grads[name]).norm() / ref_grads[name].norm()) < 0.03, name


@pytest.mark.parametrize("layers", [1, 2])
def test_gru_layer_encoder_ignores_padding(layers):
    torch.manual_seed(0)
    encoder, _ = gru_encoders(layers, True, dropout=0.3)
    encoder.eval()
    short, longer = [5, 6, 7], [8, 9, 10, 11, 4, 5, 6]
    calls = []
    encoder.rnn.register_forward_hook(lambda *_: calls.append(1))
    alone = encoder(torch.tensor([short]), torch.tensor([3]))
    batched = encoder(pad([short, longer]), torch.tensor([3, 7]))
    assert calls == []                                                    # GRULayer's, not nn.GRU's
    assert_close(batched.outputs[0, :3], alone.outputs[0], atol=1e-6, rtol=0)
    assert (batched.outputs[0, 3:] == 0).all()
    assert_close(batched.final[0][:, :1], alone.final[0], atol=1e-6, rtol=0)


# ---------------------------------------------------------------- the fused input-feeding loop

@pytest.mark.parametrize("rnn,order,feeding,dec_layers,attention,fused", [
    ("gru", "luong", True, 1, "bahdanau", True), ("gru", "luong", True, 1, "dot", True),
    ("gru", "luong", True, 1, "none", False), ("gru", "luong", True, 2, "bahdanau", False),
    ("lstm", "luong", True, 1, "bahdanau", False), ("gru", "luong", False, 1, "bahdanau", False),
    ("gru", "bahdanau", False, 1, "bahdanau", False), ("gru", "luong", True, 1, "local_m", False),
    ("gru", "luong", True, 1, "general", True), ("gru", "luong", True, 1, "concat", True)])
def test_the_network_builds_the_fused_decoder_where_its_loop_runs(rnn, order, feeding, dec_layers, attention,
                                                                   fused):
    model = make_model(rnn=rnn, order=order, input_feeding=feeding, dec_layers=dec_layers, attention=attention)
    assert type(model.decoder) is (FusedDecoder if fused else Decoder)
    assert type(model.encoder) is (GRULayerEncoder if rnn == "gru" else Encoder)


def fused_and_reference(model: RNNEncoderDecoder, dtype=torch.float64, precision="fp32", read_weights=True):
    """Logits, weights and every parameter's gradient, from the fused loop (`model`, built with its
    fast paths) and from the reference model with its weights.

    With read_weights the loss reads the attention weights too, so their gradient path is checked
    as well; without, their gradient is None (as in training).
    """
    model = model.to(dtype).train()
    batch = collate([([5, 6, 7, 8, 9], [9, 10, 11]), ([4, 5], [6, 7, 8, 9, 10, 11]), ([7, 8, 9], [4, 5])], [0, 1, 2])
    results = []
    for network in (model, reference_of(model)):
        network.zero_grad()
        with autocast(precision, torch.device("cpu")):
            memory, state = network.encode(batch.src, batch.src_lengths)
            calls = count_rnn_calls(network.decoder)
            features, weights = network.decoder.features(batch.tgt_in, state, memory)
            logits = network.output_layer(features)
            assert (calls == []) is (network is model)              # fused: nn.GRU is not called at all
        probe = torch.linspace(-1, 1, weights.numel(), dtype=dtype).view_as(weights)
        loss = sequence_loss(logits.to(dtype), batch.tgt_out)
        if read_weights:
            loss = loss + (weights.to(dtype) * probe).sum()
        loss.backward()
        grads = {name: p.grad.clone() for name, p in network.named_parameters() if p.grad is not None}
        results.append((logits.detach().to(dtype), weights.detach().to(dtype), grads))
    return results


@pytest.mark.parametrize("attention,tie,read_weights", [
    ("bahdanau", False, True), ("concat", False, True), ("dot", False, True), ("general", False, True),
    ("bahdanau", True, True), ("bahdanau", False, False), ("dot", False, False)])
def test_fused_loop_equals_the_reference(attention, tie, read_weights):
    """Forward and backward of InputFedGRUAttention against autograd through the reference decoder, in float64."""
    torch.manual_seed(0)
    config = replace(make_config(order="luong", attention=attention, input_feeding=True, emb=32 if tie else 16),
                     tie_embeddings=tie)
    model = RNNEncoderDecoder(config, VOCAB, VOCAB)
    (logits, weights, grads), (ref_logits, ref_weights, ref_grads) = fused_and_reference(model, read_weights=read_weights)
    assert_close(logits, ref_logits, atol=1e-12, rtol=1e-10)
    assert_close(weights, ref_weights, atol=1e-12, rtol=1e-10)
    assert set(grads) == set(ref_grads) == {name for name, p in model.named_parameters()}
    for name in ref_grads:
        assert_close(grads[name], ref_grads[name], atol=1e-12, rtol=1e-9, msg=name)


@pytest.mark.parametrize("attention", ["bahdanau", "general"])
def test_fused_loop_in_bfloat16_is_as_close_as_the_reference(attention):
    """Under bf16 autocast both loops round; the fused one must stay as close to float32 as autograd's."""
    torch.manual_seed(0)
    model = make_model(order="luong", attention=attention, input_feeding=True, emb=32, dec_hidden=64)
    (_, _, exact), _ = fused_and_reference(model, torch.float32)
    (logits, _, fused), (ref_logits, _, plain) = fused_and_reference(model, torch.float32, "bf16")
    assert_close(logits, ref_logits, atol=0.05, rtol=0.05)

    def error(grads):
        return max(float((grads[n] - exact[n]).norm() / exact[n].norm()) for n in exact)

    assert error(fused) < 0.2
    assert error(fused) <= 1.5 * error(plain)


def test_fused_decoder_steps_aside_for_scheduled_sampling():
    """With teacher forcing below 1 each step's input depends on the last step's output: the network
    trains such a model with the reference Decoder, and a FusedDecoder asked for it gives way to the
    reference loop, which draws the same coin flips."""
    assert type(make_model(order="luong", input_feeding=True, teacher_forcing=0.5).decoder) is Decoder
    torch.manual_seed(0)
    model = make_model(order="luong", attention="bahdanau", input_feeding=True).double().train()
    assert type(model.decoder) is FusedDecoder
    batch = collate([([5, 6, 7, 8, 9], [9, 10, 11, 4, 5]), ([4, 5], [6, 7, 8, 9, 10, 11])], [0, 1])
    results = []
    for network in (model, reference_of(model)):
        calls = count_rnn_calls(network.decoder)
        torch.manual_seed(3)
        memory, state = network.encode(batch.src, batch.src_lengths)
        features, weights = network.decoder.features(batch.tgt_in, state, memory, teacher_forcing=0.5)
        assert calls == [1] * batch.tgt_in.shape[1]
        results.append((features.detach(), weights.detach()))
    for ours, theirs in zip(*results, strict=True):
        assert_close(ours, theirs, atol=1e-12, rtol=1e-10)


# ---------------------------------------------------------------- dropout

@pytest.mark.parametrize("cls", [RandDropout, nn.Dropout])
@pytest.mark.parametrize("p", [0.25, 0.1])
def test_dropout_zeroes_a_fraction_p_and_rescales_the_rest(cls, p):
    dropout = cls(p)
    x = torch.full((333, 601), 3.0, requires_grad=True)  # 200,133 values: not a multiple of 4
    assert dropout.eval()(x) is x
    torch.manual_seed(0)
    y = dropout.train()(x)
    dropped = y == 0
    assert abs(float(dropped.float().mean()) - p) < 0.005
    kept = y[~dropped]
    assert torch.all(kept == kept[0])                                   # one scale for every kept value
    assert_close(kept[0], torch.tensor(3 / (1 - p)), rtol=2e-5, atol=0)  # p to within 2^-17
    y.sum().backward()
    assert_close(x.grad, (~dropped).float() * kept[0] / 3)
    torch.manual_seed(0)
    assert torch.equal(dropout(x), y)                     # the seed decides the mask


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("p", [1 / 65536, 0.1, 1 - 1 / 65536])
def test_rand_dropout_keeps_exactly_the_values_whose_16_bits_reach_the_threshold(dtype, p):
    # The mask is built by clamped int16 arithmetic: it must be the comparison it stands for, to
    # the last of the 65,536 values (an off-by-one would move p by 2^-16, which no rate shows).
    x = torch.randn(1000, 1001).to(dtype)     # each of the 65,536 values of 16 bits some 15 times
    torch.manual_seed(3)
    y = RandDropout(p).train()(x)
    torch.manual_seed(3)
    words = torch.empty((x.numel() + 3) // 4, dtype=torch.int64).random_(-(1 << 63), None)
    bits = words.view(torch.int16)[: x.numel()].view(x.shape).int()
    dropped = round(p * 65536)
    keep = bits >= dropped - 32768
    assert y.dtype == dtype
    assert torch.equal(y == 0, ~keep | (x == 0))
    assert torch.equal(y, (x.float() * keep * (65536 / (65536 - dropped))).to(dtype))


def test_rand_dropout_keeps_each_value_independently_of_its_neighbours():
    # Four values share each 64-bit draw: their masks must still be independent.
    torch.manual_seed(1)
    keep = RandDropout(0.5).train()(torch.ones(400_000)).view(-1, 4) != 0      # [draws, 4]
    for i in range(4):
        assert abs(float(keep[:, i].float().mean()) - 0.5) < 0.005
        for j in range(i + 1, 4):
            assert abs(float((keep[:, i] & keep[:, j]).float().mean()) - 0.25) < 0.005


# ---------------------------------------------------------------- the output layer in blocks

@pytest.mark.parametrize("outputs", [OUTPUT_BLOCK + 1, 3 * OUTPUT_BLOCK, 5898])
@pytest.mark.parametrize("bias", [True, False])
def test_blocked_linear_computes_what_linear_does(outputs, bias):
    torch.manual_seed(0)
    reference = nn.Linear(96, outputs, bias=bias)
    blocked = copy.deepcopy(reference).eval()
    blocked.__class__ = BlockedLinear
    x = torch.randn(7, 3, 96)                                          # [B, T, in]: any leading shape
    assert blocked.runs(x.device)                                      # decoding: in blocks
    with torch.no_grad():
        expected, got = reference(x), blocked(x)
    assert got.shape == expected.shape == (7, 3, outputs)
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-5)   # each output the same dot product
    # Under autograd, in training mode (scheduled sampling's choices) and in bfloat16 it is nn.Linear
    # itself, bit for bit.
    assert torch.equal(blocked(x), reference(x))
    with torch.no_grad():
        assert torch.equal(blocked.train()(x), reference(x))
        assert torch.equal(blocked.bfloat16()(x.bfloat16()), reference.bfloat16()(x.bfloat16()))


# ---------------------------------------------------------------- the Transformer's decoding caches

@pytest.mark.parametrize("network", [build_model, Transformer])
def test_the_transformers_fast_path_is_its_decoding_state(network):
    """The network's constructor picks the class of the decoder's layers, which make the state: in-place
    caches grown by doubling (fast.py) or the reference's (cache.py); the weights are the same."""
    config = TransformerConfig(**TRANSFORMER, emb_dim=16, dropout=0.1)
    torch.manual_seed(0)
    fast = network(config, 30, 12)
    assert fast_classes(fast) == {"InPlaceDecoderLayers", "RandDropout", "BlockedLinear"}
    # Named where they run: the dropout masks in training on a CPU, the cache in decoding (the output
    # product is too narrow for blocks).
    assert fast_paths_in(fast) == ["RandDropout for Dropout"]
    assert fast_paths_in(fast.eval()) == ["InPlaceDecoderLayers for DecoderLayers"]
    _, state = fast.encode(torch.tensor([[5, 6]]), torch.tensor([2]))
    assert type(state) is InPlaceState
    torch.manual_seed(0)
    reference = network(config, 30, 12, False)
    assert fast_classes(reference) == set() and fast_paths_in(reference) == []
    assert type(reference.decoder_layers) is DecoderLayers
    _, state = reference.encode(torch.tensor([[5, 6]]), torch.tensor([2]))
    assert type(state) is TransformerState
    assert fast.state_dict().keys() == reference.state_dict().keys()
    assert all(torch.equal(v, reference.state_dict()[k]) for k, v in fast.state_dict().items())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kind", [TRANSFORMER, {**TRANSFORMER, "norm": "post", "positions": "learned", "dec_layers": 3}])
def test_transformer_decodes_like_the_reference(dtype, kind):
    """Greedy and beam search through the in-place caches and through the reference's, 40 sentences of
    mixed lengths 5 at a time (ended ones refilled, rows at different positions): the same tokens,
    log-probabilities and attention."""
    model = random_model(7, **kind).to(dtype)
    src, lengths, max_lengths = random_batch(7, batch=40)
    results = []
    for network in (model, reference_of(model)):
        results.append([[h] for h in greedy(network, src, lengths, max_lengths, SearchSettings(batch_size=5))]
                       + beam_search(network, src, lengths, max_lengths,
                                     SearchSettings(beam_size=3, alpha=0.6, n_best=3, batch_size=5)))
    assert len({len(hyps[0].ids) for hyps in results[1]}) >= 4                 # outputs of many lengths
    for ours, theirs in zip(*results, strict=True):
        assert [h.ids for h in ours] == [h.ids for h in theirs]
        for a, b in zip(ours, theirs):
            assert a.log_prob == pytest.approx(b.log_prob, abs=1e-5)
            assert_close(a.attention, b.attention, atol=1e-5, rtol=0)


@pytest.mark.parametrize("index", [[2, 2, 0, 3], [0, 1, 2, 3], [3, 3, 3, 3], [1, 0, 3, 2]])
def test_in_place_reorder_is_select(index):
    """Beam search's reorder, in place (only the rows that take another's place, only the positions
    decoded so far), gives each row what select gives it at every position it has decoded, with rows
    at different steps and a row's content going to several rows; the caches stay the same tensors."""
    torch.manual_seed(0)
    steps = torch.tensor([3, 1, 2, 4])
    caches = [torch.randn(4, 2, 6, 3) for _ in range(4)]                 # 2 layers' keys and values, room for 6
    rows = torch.tensor(index)
    expected = TransformerState(steps, caches).select(rows)
    reordered = InPlaceState(steps.clone(), [c.clone() for c in caches])
    tensors = reordered.caches
    reordered = reordered.reorder(rows)
    assert type(reordered) is InPlaceState
    assert torch.equal(reordered.steps, expected.steps)
    for ours, theirs, same in zip(reordered.caches, expected.caches, tensors, strict=True):
        assert ours is same
        for row, decoded in enumerate(expected.steps.tolist()):
            assert torch.equal(ours[row, :, :decoded], theirs[row, :, :decoded])


def test_transformer_trains_and_decodes_like_the_reference():
    """The caches serve decoding only: training computes the same loss and gradients."""
    assert_trains_and_decodes_alike(random_model(**TRANSFORMER).double().train())


# ---------------------------------------------------------------- top-k through block maxima

@pytest.mark.parametrize("n,k", [(5898, 1), (5 * 5898, 10), (64 * 40, 3), (64 * 40 + 1, 10), (100, 2)])
def test_top_k_through_block_maxima_equals_topk(n, k):
    g = torch.Generator().manual_seed(n + k)
    x = torch.randn(7, n, generator=g) * 3
    x[1] = float("-inf")                             # a row with nothing finite
    x[2, :-3] = float("-inf")                        # only the last, short block is finite
    x[3] = (x[3] / 2).round()                        # ties
    x[4, -1] = 100.0                                 # the maximum in the short last block
    values, positions = block_top_k(x, k)
    expected_values, expected_positions = reference_top_k(x, k)
    torch.testing.assert_close(values, expected_values, rtol=0, atol=0)
    assert ((positions >= 0) & (positions < n)).all()
    finite = torch.isfinite(values)
    torch.testing.assert_close(x.gather(1, positions)[finite], values[finite], rtol=0, atol=0)
    untied = [0, 4, 5, 6]
    assert torch.equal(positions[untied], expected_positions[untied])


@pytest.mark.parametrize("beam_size", [1, 3])
def test_wide_vocabulary_search_equals_plain_topk(beam_size):
    """With 700 target words the searches take block_top_k's block path; torch.topk must pick the same."""
    torch.manual_seed(5)
    config = replace(make_config(), attention="bahdanau")
    model = build_model(config, 30, 700).eval()
    with torch.no_grad():
        model.decoder.classifier.bias[EOS_ID] += 0.4  # hypotheses end at many lengths, some at the limit
    src, lengths, max_lengths = random_batch(8, batch=9)
    assert top_k(True) is block_top_k and top_k(False) is reference_top_k
    outputs = []
    for fast in (True, False):
        settings = SearchSettings(beam_size=beam_size, n_best=beam_size, batch_size=4, top_k=top_k(fast))
        beams = beam_search(model, src, lengths, max_lengths, settings)
        greedy_ids = [h.ids for h in greedy(model, src, lengths, max_lengths, SearchSettings(batch_size=4, top_k=top_k(fast)))]
        outputs.append(([[h.ids for h in hyps] for hyps in beams], greedy_ids))
    assert outputs[0] == outputs[1]
    assert len({len(ids) for hyps in outputs[1][0] for ids in hyps}) >= 4     # hypotheses end at many lengths


# ---------------------------------------------------------------- forcing the reference from a run

@pytest.mark.parametrize("family", ["dates_model", "transformer_dates_model"])
def test_reference_decoding_gives_the_fast_translations(family, request):
    dates_model = request.getfixturevalue(family)
    sentences = ["March 3, 2021", "12/24/1999", "the 5th of May 1987"]
    fast = Translator.load(dates_model, "cpu")
    reference = Translator.load(dates_model, "cpu", fast_paths=False)
    assert fast_classes(fast.model) and fast_paths_in(fast.model)
    assert not fast_classes(reference.model) and fast_paths_in(reference.model) == []
    assert model_info(dates_model)["fast_paths"] == fast_paths_in(fast.model)   # `attnmt info`: decoding's
    for beam in (1, 4):
        assert ([t.text for t in reference.translate(sentences, beam_size=beam)]
                == [t.text for t in fast.translate(sentences, beam_size=beam)])
    with pytest.raises(AttnmtError, match="int8 and --compile are fast paths"):
        Translator.load(dates_model, "cpu", "int8", fast_paths=False).translate(sentences)


def test_train_fast_paths_false_trains_the_reference_modules(tmp_path, monkeypatch):
    def refuse(*args):
        raise AssertionError("a fast path ran")

    monkeypatch.setattr(GRULayer, "apply", refuse)
    config = tiny_dates_config(tmp_path / "ref")
    config["data"]["num_pairs"] = 300
    config["train"].update(epochs=1, fast_paths=False)
    assert train(config_from_dict(config), log=lambda _: None).model_path.exists()
    config["train"].update(fast_paths=True, out_dir=str(tmp_path / "fast"))
    lines: list[str] = []
    with pytest.raises(AssertionError, match="a fast path ran"):
        train(config_from_dict(config), log=lines.append)
    # The log names what the training steps run: a GRU encoder's layers and the sigmoid form of the
    # Bahdanau decoder's additive scores (no dropout, no fused loop, no decoding cache).
    assert "fast paths: GRULayerEncoder for Encoder, SigmoidAdditiveAttention for AdditiveAttention" in lines
