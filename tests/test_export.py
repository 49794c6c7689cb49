"""attnmt export --to ctranslate2: CTranslate2 translates an exported Transformer as attnmt does."""

import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_exact_int8

from attnmt import AttnmtError, Translator
from attnmt.cli import main
from attnmt.formats.ctranslate2 import export_ctranslate2

ctranslate2 = pytest.importorskip("ctranslate2", reason="the ctranslate2 package (the test extra) is not installed")

DATES = ["March 14, 2026", "3. Oktober 1990", "the 21st of June 1975", "12/25/2031", "Fr., 09.11.1989",
         "1 May 2000", "July 4, 1776", "Montag, 1. Januar 2024", "Samstag, den 14. März 2026", "May 5, 2001"]


def test_ctranslate2_decodes_what_attnmt_decodes(transformer_dates_model, tmp_path):
    out = export_ctranslate2(transformer_dates_model, tmp_path / "ct2")
    translator = Translator.load(transformer_dates_model, "cpu", precision="fp32")
    ours = translator.translate(DATES, beam_size=1)
    engine = ctranslate2.Translator(str(out), device="cpu", compute_type="float32")
    for text, mine in zip(DATES, ours, strict=True):
        tokens = translator.tokenize_source(text)
        (result,) = engine.translate_batch([tokens], beam_size=1, return_attention=True,
                                          max_decoding_length=translator.max_output_tokens(len(tokens)))
        assert result.hypotheses[0] == mine.tokens, text
        # Every token's log-probability, end of sentence included, as CTranslate2 scores the output.
        (scored,) = engine.score_batch([tokens], [mine.tokens])
        assert sum(scored.log_probs) == pytest.approx(mine.log_prob, abs=1e-4)
        # CTranslate2's attention: the mean of the last layer's heads, the matrix attnmt's heatmaps show.
        attention = np.array(result.attention[0])[: len(mine.tokens)]
        np.testing.assert_allclose(attention, mine.attention, atol=1e-4)


@needs_exact_int8  # CTranslate2's int8 products go through the same oneDNN kernels (wrong under ONEDNN_MAX_CPU_ISA=AVX2)
def cpu_has_vnni() -> bool:
    """Whether this CPU multiplies int8 with VNNI (or AMX); True where /proc/cpuinfo cannot say."""
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return True
    return bool(flags & {"avx512_vnni", "avx_vnni", "amx_int8"})


# On an AVX2-only AMD EPYC (no VNNI), CTranslate2's int8 agreed with fp32 on 1 of the 10 dates, on the
# code before and after issue 58 alike: its int8 products there are not the close calls this test allows.
@pytest.mark.skipif(not cpu_has_vnni(), reason="CTranslate2's int8 without VNNI (an AVX2-only CPU) changes more "
                                               "than close calls")
def test_int8_export_translates(transformer_dates_model, tmp_path, capsys):
    assert main(["export", str(transformer_dates_model), str(tmp_path / "int8"), "--to", "ctranslate2",
                 "--quantization", "int8"]) == 0
    assert "CTranslate2 model written to" in capsys.readouterr().out
    engine = ctranslate2.Translator(str(tmp_path / "int8"), device="cpu", compute_type="int8")
    translator = Translator.load(transformer_dates_model, "cpu", precision="fp32")
    results = engine.translate_batch([translator.tokenize_source(t) for t in DATES], beam_size=1)
    same = sum(r.hypotheses[0] == mine.tokens for r, mine in zip(results, translator.translate(DATES), strict=True))
    assert same >= len(DATES) - 2  # int8 rounding may change a close call


def test_refusals_are_one_line(dates_model, transformer_dates_model, tmp_path, monkeypatch, capsys):
    assert main(["export", str(dates_model), str(tmp_path / "rnn"), "--to", "ctranslate2"]) == 2
    assert "CTranslate2 cannot hold a model of model.arch rnn (it has no RNN encoder-decoder)" in capsys.readouterr().err
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    with pytest.raises(AttnmtError, match="is not empty; use --overwrite"):
        export_ctranslate2(transformer_dates_model, tmp_path / "full")
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # as if not installed
    with pytest.raises(AttnmtError, match="needs the ctranslate2 package: pip install ctranslate2"):
        export_ctranslate2(transformer_dates_model, tmp_path / "none")


def test_the_ctranslate2_engine_translates_as_attnmt_does(transformer_dates_model, tmp_path, capsys):
    from attnmt.formats.ctranslate2_engine import CTranslate2Translator

    out = export_ctranslate2(transformer_dates_model, tmp_path / "ct2")
    ours = Translator.load(transformer_dates_model, "cpu", precision="fp32")
    engine = CTranslate2Translator.load(out, "cpu", precision="fp32")
    for beam in (1, 3):
        mine, theirs = ours.translate(DATES + [""], beam_size=beam), engine.translate(DATES + [""], beam_size=beam)
        assert [t.text for t in theirs] == [t.text for t in mine]
        for a, b in zip(theirs, mine):
            assert a.log_prob == pytest.approx(b.log_prob, abs=1e-4)
            np.testing.assert_allclose(a.attention, b.attention, atol=1e-4)  # the heatmaps' matrix
    # With a length penalty the scores CTranslate2 ranks by are normalised; log_prob stays the model's.
    (best,) = engine.translate([DATES[0]], beam_size=3, alpha=0.6)
    (scored,) = ctranslate2.Translator(str(out), compute_type="float32").score_batch([best.source_tokens], [best.tokens])
    assert best.log_prob == pytest.approx(sum(scored.log_probs), abs=1e-4)

    # The CLI takes the exported directory where it takes a model file, and says which engine ran.
    source = tmp_path / "dates.txt"
    source.write_text("\n".join(DATES) + "\n", encoding="utf-8")
    assert main(["translate", str(out), "--input", str(source), "--precision", "fp32"]) == 0
    assert capsys.readouterr().out.splitlines() == [t.text for t in ours.translate(DATES)]
    assert main(["plot", str(out), DATES[0], "--out", str(tmp_path / "map.png"), "--precision", "fp32"]) == 0
    assert (tmp_path / "map.png").stat().st_size > 0
    capsys.readouterr()
    assert main(["evaluate", str(out), "--src", str(source), "--ref", str(source)]) == 0
    assert "bleu:" in capsys.readouterr().out


def test_what_the_ctranslate2_engine_cannot_do_is_one_line(transformer_dates_model, tmp_path, capsys):
    out = export_ctranslate2(transformer_dates_model, tmp_path / "ct2")
    for argv, message in (
            (["translate", str(out), "--compile"], "--compile is an option of attnmt's own engine"),
            (["plot", str(out), DATES[0], "--target", "x", "--out", str(tmp_path / "a.png")],
             "--target reads attention by teacher forcing"),
            (["serve", str(out), "--reference"], "--reference is an option of attnmt's own engine"),
            (["explain", str(out), DATES[0]],
             "a CTranslate2 model (attnmt export), which only translate, evaluate, plot and serve decode"),
            (["translate", str(transformer_dates_model), "--engine", "ctranslate2"],
             "not a model that attnmt export --to ctranslate2 wrote")):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err


def test_a_server_decodes_with_ctranslate2(transformer_dates_model, tmp_path):
    """attnmt serve on an exported directory: the same translations and heatmap matrix as attnmt's own
    engine in fp32, one map (CTranslate2's) where the explorer asks for maps, and /explain refused."""
    from fastapi.testclient import TestClient

    from attnmt.formats.ctranslate2_engine import CTranslate2Translator
    from attnmt.serve import create_app

    out = export_ctranslate2(transformer_dates_model, tmp_path / "ct2")
    ours = Translator.load(transformer_dates_model, "cpu", precision="fp32").translate(DATES[:4])
    with TestClient(create_app(CTranslate2Translator.load(out, "cpu", "fp32"))) as client:
        info = client.get("/model").json()
        assert info["engine"] == "ctranslate2" and info["explains"] is False and info["maps"] == {"cross": [1, 1]}
        assert info["alignments"] is None
        assert info["arch"] == "transformer" and info["architecture"]["heads"] == 4
        own = Translator.load(transformer_dates_model, "cpu").engine_info()
        assert (info["src_vocab_size"], info["tgt_vocab_size"]) == (own.src_vocab_size, own.tgt_vocab_size)
        answer = client.post("/translate", json={"texts": DATES[:4], "attention": True, "maps": True})
        assert answer.status_code == 200
        for result, mine in zip(answer.json()["results"], ours, strict=True):
            assert result["translation"] == mine.text
            np.testing.assert_allclose(result["attention"], mine.attention, atol=1e-3)
            assert np.array(result["maps"]["cross"]).shape == (1, 1, len(mine.tokens), len(mine.source_tokens))
        libre = client.post("/translate", data={"q": DATES[0], "source": "de", "target": "en"})
        assert libre.status_code == 200 and libre.json()["translatedText"] == ours[0].text
        for body in {"text": DATES[0]}, {"text": DATES[0], "attribution": "grad", "step": 1}:  # no weights, no gradients
            refused = client.post("/explain", json=body)
            assert refused.status_code == 501 and "ctranslate2, which gives no per-step numbers" in refused.json()["error"]
