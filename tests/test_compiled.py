"""The compiled decoding step (fast/compiled.py) computes what the model's step computes, for both families, and is cached."""

import os
import shutil

import numpy as np
import pytest
import torch
from conftest import needs_exact_int8, tiny_dates_config
from test_batch_invariance import FP32_TOLERANCE, assert_alone_as_in_a_batch, assert_rows_computed_alone

from attnmt import AttnmtError, Translator, cli
from attnmt.configfile import config_from_dict
from attnmt.families import build_model
from attnmt.families.rnn.network import RNNEncoderDecoder
from attnmt.fast.compiled import _program_key, compiled_step
from attnmt.fast.int8 import int8_decoding_copy
from attnmt.files import cache_dir
from attnmt.seam import Model

needs_compiler = pytest.mark.skipif(shutil.which(os.environ.get("CXX", "g++")) is None,
                                    reason="no C++ compiler to compile the step with (.ci/run installs g++)")

# The models whose int8 step is compiled (once, then reused by the later tests of the module).
INT8_KINDS = [{"attention": "bahdanau", "decoder": "luong", "input_feeding": True},
              {"arch": "transformer", "emb_dim": 32, "heads": 4, "ff_dim": 64}]

DATES = ["March 3, 2021", "3. Oktober 1990", "12/25/2031", "the 1st of May 1999", "1.2.2003", "May 9 1976"] * 3


@pytest.fixture(autouse=True)
def cache(tmp_path_factory, monkeypatch):
    """One cache for the module's tests (compiling takes seconds), never the user's."""
    monkeypatch.setenv("ATTNMT_CACHE", str(tmp_path_factory.getbasetemp() / "compiled-cache"))


def tiny_model(tmp_path, **kind) -> Model:
    torch.manual_seed(0)
    config = config_from_dict(tiny_dates_config(tmp_path, **kind))
    return build_model(config.model, 40, 30).eval()


def assert_steps_agree(model: Model, atol: float) -> None:
    """Five steps from the same inputs, at batch and source sizes other than the export's example; the
    compiled step follows its own states (a Transformer's step writes its caches in place)."""
    step = compiled_step(model)
    generator = torch.Generator().manual_seed(0)
    for rows, length in [(1, 1), (5, 9), (64, 3)]:
        src = torch.randint(4, 40, (rows, length), generator=generator)
        lengths = torch.randint(1, length + 1, (rows,), generator=generator)
        lengths[0] = length
        tokens = torch.randint(4, 30, (rows, 1), generator=generator)
        with torch.inference_mode():
            memory, state = model.encode(src, lengths)
            compiled_state = state.like([t.clone() for t in state])
            for _ in range(5):
                logits, state, weights = model.step(tokens, state, memory)
                compiled_logits, compiled_state, compiled_weights = step(tokens, compiled_state, memory)
                torch.testing.assert_close(compiled_logits, logits, atol=atol, rtol=0)
                assert (compiled_weights is None) == (weights is None)
                if weights is not None:
                    torch.testing.assert_close(compiled_weights, weights, atol=atol, rtol=0)
                    assert torch.all(compiled_weights.masked_select(~memory.mask[:, None]) == 0)  # pads get none
                ours, theirs = list(compiled_state), list(state)
                assert len(ours) == len(theirs)
                for mine, reference in zip(ours, theirs):
                    torch.testing.assert_close(mine, reference, atol=atol, rtol=0)
                tokens = logits[:, -1].argmax(-1, keepdim=True)


@pytest.mark.slow  # compiles with g++
@needs_compiler
@pytest.mark.parametrize("kind", [
    {"attention": "bahdanau", "decoder": "luong", "input_feeding": True},  # the peers' benchmark model
    {"attention": "dot", "decoder": "bahdanau", "rnn": "lstm", "dec_layers": 2, "enc_hidden": 24},
    {"attention": "none", "decoder": "luong"},
    {"attention": "local_p", "decoder": "luong", "local_window": 2},
    {"arch": "transformer", "emb_dim": 32, "heads": 4, "ff_dim": 64, "enc_layers": 2, "dec_layers": 3},
    {"arch": "transformer", "emb_dim": 32, "heads": 2, "ff_dim": 64, "norm": "post", "positions": "learned",
     "activation": "gelu"},
])
def test_compiled_step_computes_what_the_decoder_step_computes(kind, tmp_path):
    assert_steps_agree(tiny_model(tmp_path, **kind), atol=1e-5)


@pytest.mark.slow  # compiles with g++
@needs_compiler
@needs_exact_int8
@pytest.mark.parametrize("kind,atol", list(zip(INT8_KINDS, [3e-2, 6e-2])))
def test_compiled_int8_step_agrees_within_bfloat16_rounding(kind, atol, tmp_path):
    # The compiled program keeps elementwise chains in float32 where eager rounds each op to bfloat16;
    # the Transformer's bfloat16 caches (values up to about 3) then differ by a unit or two in the
    # last place (2^-6 each), and its logits (up to about 3.5) by up to 0.05.
    assert_steps_agree(int8_decoding_copy(tiny_model(tmp_path, **kind)), atol=atol)


@pytest.mark.slow  # compiles with g++
@needs_compiler
@pytest.mark.parametrize("family", ["dates_model", "transformer_dates_model"])
def test_translator_with_compile_translates_as_without_and_reuses_the_program(family, request, capsys):
    dates_model = request.getfixturevalue(family)
    plain = Translator.load(dates_model, "cpu")
    compiled = Translator.load(dates_model, "cpu", compile=True)
    assert "compiling the decoding step" in capsys.readouterr().err
    for beam in (1, 3):
        for ours, theirs in zip(compiled.translate(DATES, beam_size=beam, batch_size=4),
                                plain.translate(DATES, beam_size=beam, batch_size=4)):
            assert ours.text == theirs.text
            np.testing.assert_allclose(ours.attention, theirs.attention, atol=1e-5)
    Translator.load(dates_model, "cpu", compile=True)
    assert "compiling" not in capsys.readouterr().err  # the second load found the program
    folder = cache_dir() / "compiled"
    assert (folder / f"step-{_program_key(plain.model)}.pt2").is_file()
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]  # no temporary file left


# Batch invariance of the compiled step (tests/test_batch_invariance.py): after the tests above, whose
# programs these reuse from the module's cache.
@pytest.mark.slow  # compiles with g++ when run alone
@needs_compiler
@pytest.mark.parametrize("family", ["dates_model", "transformer_dates_model"])
def test_compiled_translation_alone_is_as_in_a_batch(family, request):
    translator = Translator.load(request.getfixturevalue(family), "cpu", compile=True)
    text = translator.tokenization
    assert_rows_computed_alone(*translator._decoding(), len(text.src_vocab), len(text.tgt_vocab))
    for beam in (1, 3):
        assert_alone_as_in_a_batch(translator, beam, FP32_TOLERANCE, exact_share=0)


@pytest.mark.slow  # compiles with g++ when run alone
@needs_compiler
@needs_exact_int8
@pytest.mark.parametrize("kind", INT8_KINDS)
def test_compiled_int8_rows_are_computed_from_their_own_sentence_alone(kind, tmp_path):
    model = int8_decoding_copy(tiny_model(tmp_path, **kind))
    assert_rows_computed_alone(model, compiled_step(model), 40, 30)


@needs_exact_int8
def test_program_key_follows_the_weights_and_the_precision(tmp_path):
    model = tiny_model(tmp_path, attention="bahdanau", decoder="luong", input_feeding=True)
    key = _program_key(model)
    assert _program_key(model) == key
    assert _program_key(int8_decoding_copy(model)) != key
    with torch.no_grad():
        model.decoder.combine.bias[0] += 1e-3
    assert _program_key(model) != key


def test_missing_compiler_is_one_clear_error(dates_model, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ATTNMT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CXX", "no-such-c++-compiler")
    source = tmp_path / "in.txt"
    source.write_text("March 3, 2021\n")
    code = cli.main(["translate", str(dates_model), "--compile", "--input", str(source)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "needs a C++ compiler" in err[0] and "no-such-c++-compiler" in err[0]
    assert not any((tmp_path / "cache").rglob("*.pt2"))  # nothing half-written left behind


@needs_compiler
def test_damaged_cached_program_is_named_in_the_error(dates_model, tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNMT_CACHE", str(tmp_path / "cache"))
    translator = Translator.load(dates_model, "cpu")
    path = tmp_path / "cache" / "compiled" / f"step-{_program_key(translator.model)}.pt2"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a program")
    with pytest.raises(AttnmtError, match="cannot load the compiled decoding step.*delete it"):
        Translator.load(dates_model, "cpu", compile=True)


@needs_compiler
def test_unwritable_cache_is_one_clear_error(dates_model, tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("ATTNMT_CACHE", str(blocker))  # a file where the cache folder should be
    with pytest.raises(AttnmtError, match="a-file/compiled: cannot write the compiled decoding step"):
        Translator.load(dates_model, "cpu", compile=True)


def test_a_family_without_int8_layers_is_refused_in_one_line(dates_model, monkeypatch):
    """int8 is a capability (fast.int8.Int8Layers): a family without it is refused in one clear line."""
    monkeypatch.delattr(RNNEncoderDecoder, "int8_layers")
    with pytest.raises(AttnmtError, match=r"^decode precision int8 \(use bf16 or fp32\): model.arch rnn does not give it "
                                          r"\(its network has no int8_layers\)$"):
        Translator.load(dates_model, "cpu", "int8").translate(["March 3, 2021"])
