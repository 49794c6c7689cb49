"""The fast paths, bf16 (training and decoding) and int8 (decoding), compute what fp32 computes,
within their precision."""

import copy
import ctypes
import os
import random
import subprocess
import sys

import pytest
import torch
from conftest import needs_exact_int8, tiny_dates_config

from attnmt import precision
from attnmt.batch import collate
from attnmt.configfile import config_from_dict
from attnmt.errors import AttnmtError
from attnmt.families.rnn.network import RNNEncoderDecoder
from attnmt.families.transformer.network import Transformer
from attnmt.fast import int8 as int8_module
from attnmt.fast.int8 import Int8Linear, Int8RNN, int8_decoding_copy, int8_products_exact
from attnmt.training.data import Part
from attnmt.training.metrics import read_metrics
from attnmt.training.step import TeacherForced, make_optimizer, train_step
from attnmt.training.train import train
from attnmt.translate import Translator

MODELS = [
    {"attention": "bahdanau", "decoder": "bahdanau"},
    {"attention": "bahdanau", "decoder": "luong", "input_feeding": True},  # the peers' benchmark model
    {"attention": "general", "decoder": "luong", "rnn": "lstm"},
]


def random_batch(src_vocab: int, tgt_vocab: int, size: int = 16):
    rng = random.Random(0)
    examples = [([rng.randrange(4, src_vocab) for _ in range(rng.randint(3, 12))],
                 [rng.randrange(4, tgt_vocab) for _ in range(rng.randint(3, 12))]) for _ in range(size)]
    return collate(examples, list(range(size)))


@pytest.mark.parametrize("model", MODELS)
def test_bf16_training_step_gives_the_fp32_loss_and_update(model, tmp_path):
    torch.manual_seed(0)
    configs = {p: config_from_dict({**tiny_dates_config(tmp_path, **model), "train": {"precision": p, "clip": 100.0}})
               for p in ("fp32", "bf16")}
    fp32 = RNNEncoderDecoder(configs["fp32"].model, 40, 30)
    bf16 = copy.deepcopy(fp32)
    batch = random_batch(40, 30)
    losses, updates = {}, {}
    for kind, model_ in (("fp32", fp32), ("bf16", bf16)):
        torch.manual_seed(1)  # the same dropout masks
        optimizer = make_optimizer(model_, configs[kind].train)
        before = {n: p.detach().clone() for n, p in model_.named_parameters()}
        losses[kind] = train_step(TeacherForced(model_), optimizer, [Part(batch)], configs[kind].train, 1,
                                  batch.num_target_tokens)
        updates[kind] = torch.cat([(p.detach() - before[n]).flatten() for n, p in model_.named_parameters()])
        assert all(p.dtype == torch.float32 for p in model_.parameters())  # weights stay fp32
    assert not torch.equal(updates["bf16"], updates["fp32"])  # bf16 really ran
    assert losses["bf16"] == pytest.approx(losses["fp32"], rel=2e-2)
    # Adam's first step moves each weight by about lr * sign(grad): the directions must agree.
    agreement = torch.nn.functional.cosine_similarity(updates["bf16"], updates["fp32"], dim=0)
    assert agreement > 0.9


@pytest.mark.parametrize("precision", ["bf16", pytest.param("int8", marks=needs_exact_int8)])
@pytest.mark.parametrize("beam", [1, 3])
def test_fast_decoding_translates_like_fp32(dates_model, precision, beam):
    translator = Translator.load(dates_model, "cpu")  # int8 runs on CPUs only
    sources = [f"{day} march {1950 + day}" for day in range(1, 29)] + ["june 3, 2004", "12/25/1999", "tuesday 9 may 1871"]
    fp32 = translator.translate(sources, beam_size=beam)
    translator.config.decode.precision = precision
    fast = translator.translate(sources, beam_size=beam)
    assert all(p.dtype == torch.float32 for p in translator.model.parameters())  # a copy is converted, not the model
    assert any(a.log_prob != b.log_prob for a, b in zip(fp32, fast))  # the fast path really ran
    same = sum(a.text == b.text for a, b in zip(fp32, fast))
    assert same >= 0.9 * len(sources)
    for a, b in zip(fp32, fast):
        if a.text == b.text:
            assert b.log_prob == pytest.approx(a.log_prob, abs=0.05 + 0.05 * abs(a.log_prob))
            assert b.attention.dtype == a.attention.dtype and b.attention.shape == a.attention.shape
            assert abs(b.attention - a.attention).max() < 0.05


def test_int8_is_refused_in_one_line_where_int8_products_are_not_exact(dates_model, monkeypatch):
    monkeypatch.setattr(int8_module, "int8_products_exact", lambda: False)
    with pytest.raises(AttnmtError, match="int8 matrix products .* are not exact here; use bf16 or fp32"):
        Translator.load(dates_model, "cpu", "int8").translate(["May 5, 2001"])


@needs_exact_int8
def test_int8_linear_is_exact_on_int8_values_and_close_on_others():
    torch.manual_seed(0)
    linear = torch.nn.Linear(24, 10)
    with torch.no_grad():  # integer weights with a 127 in every row: their int8 form is exact
        linear.weight.copy_(torch.randint(-127, 128, (10, 24)).float())
        linear.weight[:, 0] = 127
    x = torch.randint(-127, 128, (2, 5, 24)).float()
    x[..., 3] = -127  # every row's absmax is 127: its int8 form is exact too
    int8 = Int8Linear(linear.weight, linear.bias)
    assert int8.weight_t.dtype == torch.int8
    assert torch.equal(int8(x), linear(x).detach())
    assert torch.equal(int8(torch.zeros(1, 24)), linear.bias.detach().unsqueeze(0))  # an all-zero row: the bias
    for scale in (1e-3, 1.0, 50.0):  # any other inputs: close to float32, within int8's precision
        x = torch.randn(7, 24) * scale
        reference = linear(x).detach()
        assert (int8(x) - reference).norm() / reference.norm() < 0.02


@needs_exact_int8
@pytest.mark.parametrize("rnn", [torch.nn.GRU, torch.nn.LSTM])
def test_int8_rnn_follows_the_float_rnn(rnn):
    torch.manual_seed(0)
    reference = rnn(12, 16, num_layers=2, batch_first=True)
    int8 = Int8RNN(reference)
    x = torch.randn(3, 6, 12)
    state = torch.randn(2, 3, 16) * 0.5
    state = (state, torch.randn(2, 3, 16) * 0.5) if rnn is torch.nn.LSTM else state
    with torch.no_grad():
        expected, expected_state = reference(x, state)
    outputs, final = int8(x, state)
    assert outputs.shape == expected.shape and outputs.dtype == torch.float32
    assert (outputs - expected).norm() / expected.norm() < 0.03                # within int8's precision
    for mine, theirs in zip(*(s if isinstance(s, tuple) else (s,) for s in (final, expected_state))):
        assert (mine - theirs).norm() / theirs.norm() < 0.03
    # Step by step, as decoding calls it, each step gives the same as the whole sequence at once.
    steps = []
    for t in range(x.shape[1]):
        output, state = int8(x[:, t : t + 1], state)
        steps.append(output)
    assert torch.equal(torch.cat(steps, dim=1), outputs)
    assert all(torch.equal(a, b) for a, b in zip(*(s if isinstance(s, tuple) else (s,) for s in (state, final))))


def assert_steps_close(fp32, int8) -> None:
    """Five decoding steps from the same tokens, one at a time as decoding runs them (through the
    state: an RNN's hidden state, a Transformer's caches): int8's float32 logits stay close to fp32's."""
    src, lengths = torch.randint(4, 30, (4, 9)), torch.tensor([9, 7, 5, 3])
    tokens = torch.randint(4, 20, (4, 5))
    logits = {}
    with torch.inference_mode():
        for name, m in (("fp32", fp32), ("int8", int8)):
            memory, state = m.encode(src, lengths)
            steps = []
            for t in range(tokens.shape[1]):
                step_logits, state, _ = m.step(tokens[:, t : t + 1], state, memory)
                steps.append(step_logits)
            logits[name] = torch.cat(steps, dim=1)
    assert logits["int8"].dtype == torch.float32
    assert (logits["int8"] - logits["fp32"]).norm() / logits["fp32"].norm() < 0.05


@needs_exact_int8
@pytest.mark.parametrize("model", MODELS + [{"attention": "bahdanau", "decoder": "luong", "tie_embeddings": True}])
def test_int8_decoding_copy_runs_every_product_of_a_step_in_int8(model):
    torch.manual_seed(0)
    fp32 = RNNEncoderDecoder(config_from_dict(tiny_dates_config("unused", **model)).model, 30, 20).eval()
    int8 = int8_decoding_copy(fp32)
    decoder = int8.decoder
    assert isinstance(decoder.rnn, Int8RNN)
    assert isinstance(decoder.combine, Int8Linear) and isinstance(decoder.classifier, Int8Linear)
    if model["attention"] == "bahdanau":
        assert isinstance(decoder.attention.query_proj, Int8Linear)
    assert all(p.dtype == torch.bfloat16 for p in int8.parameters())    # what runs once per sentence
    assert isinstance(fp32.decoder.classifier, torch.nn.Linear)          # the model itself is unchanged
    if model.get("tie_embeddings"):
        assert fp32.decoder.classifier.weight is fp32.decoder.embedding.weight
    assert_steps_close(fp32, int8)


@needs_exact_int8
@pytest.mark.parametrize("fast", [True, False])
def test_int8_transformer_runs_every_product_but_the_embeddings_in_int8(fast):
    """Through the in-place caches (fast.py), which the int8 copy keeps, and through the reference's."""
    torch.manual_seed(0)
    values = tiny_dates_config("unused", arch="transformer", emb_dim=32, heads=4, ff_dim=64, enc_layers=2, dec_layers=2,
                               tie_embeddings=True)
    fp32 = Transformer(config_from_dict(values).model, 30, 20, fast=fast).eval()
    int8 = int8_decoding_copy(fp32)
    assert type(int8.decoder_layers) is type(fp32.decoder_layers)
    for layer in [*int8.encoder_layers, *int8.decoder_layers]:
        attentions = [layer.self_attention] + ([layer.cross_attention] if hasattr(layer, "cross_attention") else [])
        assert all(isinstance(linear, Int8Linear) for attention in attentions for linear in (
            attention.query_proj, attention.key_proj, attention.value_proj, attention.out_proj))
        assert isinstance(layer.feed_forward[0], Int8Linear) and isinstance(layer.feed_forward[3], Int8Linear)
    assert not any(isinstance(m, torch.nn.Linear) for m in int8.modules())                 # none left float
    assert isinstance(int8.classifier, Int8Linear) and isinstance(fp32.classifier, torch.nn.Linear)
    assert all(p.dtype == torch.bfloat16 for p in int8.parameters())          # embeddings, norms: bf16
    assert_steps_close(fp32, int8)


def test_decoding_copy_is_reused_until_the_weights_or_the_precision_change(dates_model):
    translator = Translator.load(dates_model)
    translator.config.decode.precision = "bf16"
    first, _ = translator._decoding()
    assert translator._decoding()[0] is first
    assert next(first.parameters()).dtype == torch.bfloat16
    with torch.no_grad():
        next(translator.model.parameters()).add_(1.0)  # as an optimizer step would
    second, _ = translator._decoding()
    assert second is not first
    assert torch.equal(next(second.parameters()), next(translator.model.parameters()).to(torch.bfloat16))
    translator.config.decode.precision = "int8"
    if int8_products_exact():
        assert isinstance(translator._decoding()[0].decoder.classifier, Int8Linear)
    else:
        with pytest.raises(AttnmtError, match="int8 matrix products .* are not exact here; use bf16 or fp32"):
            translator._decoding()


@pytest.mark.slow  # a whole run or several processes; the module's other tests stay in the quick tier
def test_precision_flag_of_translate(dates_model):
    from test_cli import attnmt

    lines = "March 14, 2026\n3. Oktober 1990\n"
    fp32 = attnmt("translate", str(dates_model), stdin=lines)
    bf16 = attnmt("translate", str(dates_model), "--precision", "bf16", stdin=lines)
    int8 = attnmt("translate", str(dates_model), "--precision", "int8", stdin=lines)
    assert fp32.returncode == bf16.returncode == 0, bf16.stderr
    assert len(bf16.stdout.splitlines()) == 2
    if int8_products_exact():
        assert int8.returncode == 0 and len(int8.stdout.splitlines()) == 2, int8.stderr
    else:  # refused in one line
        assert int8.returncode == 2 and int8.stderr.strip().endswith("are not exact here; use bf16 or fp32")
    with pytest.raises(Exception, match="choose fp32, bf16, int8"):
        Translator.load(dates_model, precision="fp16")



# glibc's accounting of malloc: bytes in blocks mapped one by one (hblkhd), free bytes the heap keeps (fordblks).
MALLINFO = """
import ctypes

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
"""

MANY_SHAPES = MALLINFO + """
import torch
from attnmt.fast.process import bound_kernel_caches
if BOUND:
    bound_kernel_caches()

def in_use_mb():
    info = libc.mallinfo2()
    return (info.uordblks + info.hblkhd) / 2**20

weight = torch.randn(256, 1536, dtype=torch.bfloat16)
for rows in range(1, 100):                              # fill the caches up to their bound
    torch.randn(rows, 256, dtype=torch.bfloat16) @ weight
before = in_use_mb()
for rows in range(100, 400):
    torch.randn(rows, 256, dtype=torch.bfloat16) @ weight
print(in_use_mb() - before)
"""

needs_glibc_mallinfo2 = pytest.mark.skipif(not hasattr(ctypes.CDLL(None), "mallinfo2"), reason="needs glibc 2.33 or later")


def growth_over_new_shapes_mb(bound: bool) -> float:
    env = {k: v for k, v in os.environ.items() if k not in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")}
    done = subprocess.run([sys.executable, "-c", f"BOUND = {bound}\n" + MANY_SHAPES], capture_output=True, text=True,
                          env={**env, "OMP_NUM_THREADS": "1"}, check=True)
    return float(done.stdout.strip().splitlines()[-1])


@needs_glibc_mallinfo2
def test_training_bounds_the_kernel_caches_of_bf16_products():
    """oneDNN keeps a kernel and buffers for every matrix shape it has multiplied in bfloat16;
    training bounds those caches, so that batches of ever new shapes do not grow a run. In a
    fresh process each, as the bound must come before the first bfloat16 product."""
    if growth_over_new_shapes_mb(bound=False) < 50:
        pytest.skip("this CPU's bfloat16 products keep no kernels per shape")
    assert growth_over_new_shapes_mb(bound=True) < 25


FREED_BLOCK = MALLINFO + """
import torch
took = SET_UP()
size = 48 * 2**20                                       # over glibc's largest adaptive threshold, 32 MB
block = torch.ones(size, dtype=torch.uint8)
mapped = libc.mallinfo2().hblkhd >= size
del block
kept = libc.mallinfo2().fordblks >= size
print(took, mapped, kept)
"""


def fate_of_a_freed_block(set_up: str) -> list[str]:
    """[what `set_up` (a function's source, SET_UP) returned, whether a 48 MB tensor then had its own
    map, whether its memory stayed after it was freed], in a fresh process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    done = subprocess.run([sys.executable, "-c", set_up + FREED_BLOCK], capture_output=True, text=True,
                          env=env, check=True)
    return done.stdout.split()[-3:]


@needs_glibc_mallinfo2
def test_training_keeps_freed_large_blocks_for_the_next_step():
    """By default glibc maps each large tensor afresh and unmaps it when freed; training has it keep them."""
    assert fate_of_a_freed_block("def SET_UP():\n    return False\n") == ["False", "True", "False"]
    kept = "def SET_UP():\n    from attnmt.fast.process import keep_freed_blocks\n    return keep_freed_blocks()\n"
    assert fate_of_a_freed_block(kept) == ["True", "False", "True"]


@needs_glibc_mallinfo2
def test_attnmt_translate_keeps_freed_large_blocks(dates_model, tmp_path):
    """So does `attnmt translate` (and evaluate, serve): a Transformer's beam search copies its
    caches at every step (docs/speed.md)."""
    source = tmp_path / "in.txt"
    source.write_text("3. Oktober 1990\n")
    translated = (f"def SET_UP():\n    from attnmt.cli import main\n"
                  f"    return main(['translate', {str(dates_model)!r}, '--input', {str(source)!r}]) == 0\n")
    assert fate_of_a_freed_block(translated) == ["True", "False", "True"]


@needs_glibc_mallinfo2
@pytest.mark.parametrize("command", ["train-aligner", "align"])
def test_the_aligner_commands_keep_freed_large_blocks(dates_model, tmp_path, command):
    """So do `attnmt train-aligner` and `attnmt align` (whose --adapt trains): each of the aligner's
    batches makes a log-softmax over the vocabulary for every distinct piece, tens of MB."""
    source, target = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("3. Oktober 1990\n")
    target.write_text("3 October 1990\n")
    argv = [command, str(dates_model), "--src", str(source), "--tgt", str(target), "--device", "cpu"]
    argv += ["--out", str(tmp_path / "aligned.safetensors"), "--epochs", "1"] if command == "train-aligner" else []
    called = f"def SET_UP():\n    from attnmt.cli import main\n    return main({argv!r}) == 0\n"
    assert fate_of_a_freed_block(called) == ["True", "False", "True"]


# --- precision that fits the machine ---------------------------------------------------------

@pytest.mark.parametrize("features,expected", [((), "fp32"), (("AVX512-BF16",), "bf16"), (("AMX",), "bf16")])
def test_auto_is_bf16_only_on_cpus_with_native_bf16(monkeypatch, features, expected):
    monkeypatch.setattr(precision, "cpu_bf16_features", lambda: features)
    cpu = torch.device("cpu")
    assert precision.resolve("auto", cpu) == expected
    assert precision.resolve("fp32", cpu) == "fp32" and precision.resolve("int8", cpu) == "int8"
    note = precision.precision_note({"train.precision": "auto"}, cpu)
    assert note.startswith(f"precision: train.precision {expected} (this CPU has ")
    assert ("no AVX512-BF16 or AMX" in note) == (not features)
    # Explicit bf16 without native bf16: a warning that says what auto would do; with it: silence.
    warning = precision.precision_note({"decode.precision": "bf16"}, cpu)
    assert (warning is None) == bool(features)
    if warning:
        assert warning.startswith("warning:") and "slower than fp32" in warning and "auto picks fp32" in warning


def test_a_onednn_isa_cap_below_bf16_means_no_native_bf16():
    code = "from attnmt.precision import cpu_bf16_features; print(cpu_bf16_features())"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "ONEDNN_MAX_CPU_ISA": "avx2"},
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "()"


@pytest.mark.parametrize("features", [(), ("AMX",)], ids=["no native bf16", "native bf16"])
def test_training_logs_what_auto_chose(tmp_path, monkeypatch, features):
    """Both answers of the CPU's check, on every CPU: without native bf16 one note names fp32; with
    it, auto times the first batch in both formats and one line names the format the run trained in."""
    monkeypatch.setattr(precision, "cpu_bf16_features", lambda: features)
    lines = []
    settings = tiny_dates_config(tmp_path)
    settings["data"].update(num_pairs=300, valid_size=20, test_size=0)
    settings["train"].update(epochs=1, precision="auto", device="cpu")
    train(config_from_dict(settings), log=lines.append)
    trained_in = {record["precision"] for record in read_metrics(tmp_path)}
    notes = [line for line in lines if line.startswith("precision:")]
    if features:
        assert len(trained_in) == 1 and len(notes) == 1
        assert notes[0].startswith(f"precision: train {trained_in.pop()} (train.precision auto: this CPU computes "
                                   f"bf16 natively, and the first batch's forward and backward took ")
    else:
        assert trained_in == {"fp32"}
        assert notes == ["precision: train.precision fp32, decode.precision fp32 (this CPU has no AVX512-BF16 or AMX)"]


def test_translator_resolves_auto(dates_model):
    translator = Translator.load(dates_model, "cpu", precision="auto")
    assert translator.precision == precision.resolve("auto", torch.device("cpu"))
    assert translator.precision_note().startswith(f"precision: decode.precision {translator.precision} (")
    explicit = Translator.load(dates_model, "cpu", precision=translator.precision)
    sources = ["june 3, 2004", "12/25/1999"]
    assert [t.text for t in translator.translate(sources)] == [t.text for t in explicit.translate(sources)]


def test_has_lstm_finds_an_lstm_anywhere_in_a_network(tmp_path):
    """What training's and decoding's precision notes ask before naming the LSTMs' fp32 (one check for both)."""
    lstm, gru = (RNNEncoderDecoder(config_from_dict(tiny_dates_config(tmp_path, rnn=rnn)).model, 40, 30)
                 for rnn in ("lstm", "gru"))
    assert precision.has_lstm(lstm.modules()) and precision.has_lstm(TeacherForced(lstm).modules())
    assert not precision.has_lstm(gru.modules())


def test_lstms_train_in_fp32_under_bf16_where_onednn_has_no_kernel(monkeypatch, tmp_path, fresh_probes):
    """On CPUs without AVX-512, oneDNN has no bf16 LSTM kernel under autocast: the encoder's and the
    decoder's LSTMs run in fp32 there (forced here, so the fallback is tested on every CPU), the rest
    of the step in bf16."""
    monkeypatch.setattr(precision, "cpu_bf16_lstm", lambda kind: kind != "autocast")
    model_settings = {"attention": "general", "decoder": "luong", "rnn": "lstm"}
    config = config_from_dict({**tiny_dates_config(tmp_path, **model_settings), "train": {"precision": "bf16"}})
    model = RNNEncoderDecoder(config.model, 40, 30)
    batch = random_batch(40, 30)
    seen = []
    for rnn in (model.encoder.rnn, model.decoder.rnn):
        rnn.register_forward_hook(lambda module, inputs, output: seen.append(output[0].data.dtype))
    loss = train_step(TeacherForced(model), make_optimizer(model, config.train), [Part(batch)], config.train, 1,
                      batch.num_target_tokens)
    assert seen == [torch.float32, torch.float32] and loss > 0
    monkeypatch.setattr(precision, "cpu_bf16_features", lambda: ())
    warning = precision.precision_note({"train.precision": "bf16"}, torch.device("cpu"), lstm=True)
    assert "LSTMs run in fp32" in warning
    assert "LSTMs" not in precision.precision_note({"decode.precision": "bf16"}, torch.device("cpu"), lstm=True)


ONEDNN_REFUSAL = ("could not create a primitive descriptor for the LSTM forward propagation primitive. Run workload "
                  "with environment variable ONEDNN_VERBOSE=all to get additional diagnostic information.")


@pytest.fixture
def fresh_probes(monkeypatch):
    """precision's probes asked anew (their functools caches cleared, before and after), no refusal remembered."""
    def clear():
        for value in list(vars(precision).values()):
            if callable(getattr(value, "cache_clear", None)):
                value.cache_clear()
    clear()
    monkeypatch.setattr(precision, "_refused_at_call", set(), raising=False)
    yield
    clear()


@pytest.fixture
def onednn_refuses_bf16_lstms(monkeypatch, fresh_probes):
    """torch's LSTM refusing bf16 as oneDNN does on a real AVX2-only CPU (issue 58), on any CPU: under
    CPU autocast or with bfloat16 inputs, unpacked and packed (the real CPU refuses a packed batch whose
    sentences are all of one length, which torch gives oneDNN whole; every packed one here, so that every
    batch meets it), with oneDNN's message. On a CPU without native bf16, as there. Counts the refusals."""
    real = torch._VF.lstm
    refusals = []

    def lstm(*args):
        data, packed = args[0], isinstance(args[1], torch.Tensor)  # packed: (data, batch_sizes, hx, ...), else (input, hx, ...)
        if data.device.type == "cpu" and (torch.is_autocast_enabled("cpu") or data.dtype == torch.bfloat16):
            refusals.append("packed" if packed else "unpacked")
            raise RuntimeError(ONEDNN_REFUSAL)
        return real(*args)

    monkeypatch.setattr(torch._VF, "lstm", lstm)
    monkeypatch.setattr(precision, "cpu_bf16_features", lambda: ())
    return refusals


def test_the_probe_meets_the_refusal_of_a_packed_batch_of_one_length(monkeypatch, fresh_probes):
    """On the real AVX2-only EPYC of issue 58, under autocast oneDNN refused a packed batch whose
    sentences are all of one length and ran the other packed ones: the probe must meet that case alone
    (simulated, the rest run in fp32, so on every CPU)."""
    real = torch._VF.lstm

    def lstm(*args):
        batch_sizes = args[1]  # packed: (data, batch_sizes, hx, ...)
        if torch.is_autocast_enabled("cpu") and isinstance(batch_sizes, torch.Tensor) and batch_sizes.unique().numel() == 1:
            raise RuntimeError(ONEDNN_REFUSAL)
        with torch.autocast("cpu", enabled=False):  # the probe's tensors are fp32
            return real(*args)

    monkeypatch.setattr(torch._VF, "lstm", lstm)
    assert not precision.cpu_bf16_lstm("autocast") and precision.lstm_in_fp32("autocast")
    assert precision.cpu_bf16_lstm("bf16")


def train_and_decode_a_bf16_lstm(tmp_path, fast_paths: bool, **model) -> tuple[list[str], Translator]:
    """The log of a tiny LSTM model trained in bf16 (validated in bf16), and a bf16 translator of it
    that has translated (greedy and beam)."""
    settings = tiny_dates_config(tmp_path, rnn="lstm", **model)
    settings["data"].update(num_pairs=300, valid_size=20, test_size=0)
    settings["train"].update(epochs=1, precision="bf16", fast_paths=fast_paths, device="cpu")
    settings["decode"] = {"precision": "bf16", "fast_paths": fast_paths}
    lines: list[str] = []
    result = train(config_from_dict(settings), log=lines.append)
    translator = Translator.load(result.model_path, "cpu", precision="bf16", fast_paths=fast_paths)
    sources = ["june 3, 2004", "12/25/1999", "5 may 1871"]
    for beam in (1, 3):
        assert len(translator.translate(sources, beam_size=beam)) == len(sources)
    return lines, translator


@pytest.mark.parametrize("fast_paths", [True, False])
@pytest.mark.parametrize("model", [{"decoder": "bahdanau"}, {"attention": "general", "decoder": "luong", "enc_layers": 2}])
def test_a_bf16_lstm_trains_and_decodes_in_fp32_where_onednn_refuses_it(tmp_path, onednn_refuses_bf16_lstms,
                                                                       fast_paths, model):
    """Issue 58: on a real AVX2-only CPU, an explicit bf16 LSTM ended in oneDNN's traceback in the
    encoder's packed LSTM. Wherever oneDNN refuses (simulated), the encoder's and decoder's LSTMs, packed
    and unpacked, train and decode in fp32, and the warnings say so."""
    lines, translator = train_and_decode_a_bf16_lstm(tmp_path, fast_paths, **model)
    assert onednn_refuses_bf16_lstms  # the probes met the refusals
    warnings = [line for line in lines if line.startswith("warning: bf16 asked for")]
    assert len(warnings) == 1 and "its LSTMs run in fp32" in warnings[0]
    assert "its LSTMs run in fp32" in translator.precision_note()


def test_a_refusal_at_the_call_is_remembered(tmp_path, monkeypatch, onednn_refuses_bf16_lstms):
    """Where the probe passes but oneDNN refuses a real call, that call and the later ones of its kind
    run in fp32 (one refusal per kind), and the warnings say so from then on."""
    monkeypatch.setattr(precision, "cpu_bf16_lstm", lambda kind: True)
    _, translator = train_and_decode_a_bf16_lstm(tmp_path, True)
    assert sorted(onednn_refuses_bf16_lstms) == ["packed", "packed"]  # the encoder's first call, training's and decoding's
    assert precision._refused_at_call == {"autocast", "bf16"}
    assert "its LSTMs run in fp32" in translator.precision_note()


def test_train_from_python_leaves_the_callers_process_alone(tmp_path):
    """train() sets neither oneDNN's cache bound nor malloc's thresholds: `attnmt train` does."""
    code = f"""
import os
from attnmt.configfile import config_from_dict
from attnmt.training.train import train
from conftest import tiny_dates_config
settings = tiny_dates_config({str(tmp_path)!r})
settings["data"].update(num_pairs=300, valid_size=20, test_size=0)
settings["train"].update(epochs=1)
train(config_from_dict(settings), log=lambda _: None)
print(sorted(k for k in os.environ if k in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")))
"""
    env = {k: v for k, v in os.environ.items() if k not in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")}
    tests = os.path.dirname(os.path.abspath(__file__))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**env, "PYTHONPATH": tests + os.pathsep + env.get("PYTHONPATH", "")})
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_faster_precision_alternates_the_formats_and_goes_by_each_ones_best_run():
    runs, now = [], [0.0]
    seconds = {"fp32": iter([1.0, 1.0, 9.0, 1.0]), "bf16": iter([0.5, 0.8, 0.8, 0.8])}

    def run(precision):  # the clock moves by the planted seconds of each run
        runs.append(precision)
        now[0] += next(seconds[precision])

    chosen, best = precision.faster_precision(run, repeats=3, clock=lambda: now[0])
    assert runs == ["fp32", "bf16"] * 4  # one untimed run each, then alternating
    assert best == pytest.approx({"fp32": 1.0, "bf16": 0.8})  # fp32's one slow run (a busy neighbour) does not count
    assert chosen == "bf16"
    # bf16 must be at least 10 % faster to be taken.
    seconds = {"fp32": iter([1.0] * 4), "bf16": iter([0.95] * 4)}
    assert precision.faster_precision(run, repeats=3, clock=lambda: now[0])[0] == "fp32"


@pytest.mark.parametrize("planted", ["fp32", "bf16"])
def test_training_under_auto_times_both_formats_and_trains_as_the_faster_alone(planted, tmp_path, monkeypatch):
    """On a CPU with native bf16, auto times the first batch in both formats; the run then trains
    bit for bit as one set to the chosen format, records it, and a resumed run keeps it."""
    import attnmt.training.train as training
    from attnmt.modelfile import read_metadata

    timed = []

    def planted_timing(run, repeats):
        for format in ("fp32", "bf16"):  # the real forward and backward, which must leave no trace
            run(format)
            timed.append(format)
        return planted, {"fp32": 0.002, "bf16": 0.001 if planted == "bf16" else 0.003}

    monkeypatch.setattr(training, "native_bf16", lambda device: True)
    monkeypatch.setattr(training, "faster_precision", planted_timing)
    weights, lines = {}, []
    for setting in ("auto", planted):
        settings = tiny_dates_config(tmp_path / setting, dropout=0.3)
        settings["data"]["num_pairs"] = 600
        settings["train"].update(precision=setting, epochs=1, checkpoint_every=3)
        result = train(config_from_dict(settings), log=lines.append)
        weights[setting] = Translator.load(result.model_path).model.state_dict()
    assert timed == ["fp32", "bf16"]  # auto alone timed
    assert any(line.startswith(f"precision: train {planted} (train.precision auto") for line in lines)
    assert all(torch.equal(weights["auto"][name], weights[planted][name]) for name in weights[planted])
    assert read_metadata(tmp_path / "auto" / "model.safetensors")["training"]["precision"] == planted
    # Resumed under auto: the recorded format, not timed again.
    settings = tiny_dates_config(tmp_path / "auto", dropout=0.3)
    settings["data"]["num_pairs"] = 600
    settings["train"].update(precision="auto", epochs=2)
    lines.clear()
    train(config_from_dict(settings), resume=True, log=lines.append)
    assert timed == ["fp32", "bf16"]
    assert f"precision: train {planted} (train.precision auto: the resumed run's format)" in lines
