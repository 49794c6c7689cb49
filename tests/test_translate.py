"""The Translator API and model files: save, load, translate, edge cases."""

import json
import pickle

import numpy as np
import pytest
import torch

from attnmt import AttnmtError, Translator, translate
from attnmt.corpus.dates import generate_dates
from attnmt.modelfile import load_file, save_file
from attnmt.plot import plot_attention

SENTENCES = ["March 3, 2021", "3. Oktober 1990", "12/25/2031", "the 1st of May 1999"]


def test_translation_fields(dates_model):
    translator = Translator.load(dates_model)
    results = translator.translate(SENTENCES)
    assert len(results) == len(SENTENCES)
    for sentence, result in zip(SENTENCES, results, strict=True):
        assert result.source_tokens == translator.src_tokenizer.tokenize(sentence)
        assert result.text == translator.tgt_tokenizer.detokenize(result.tokens)
        assert result.attention.shape == (len(result.tokens), len(result.source_tokens))
        assert np.all(result.attention >= 0)
        np.testing.assert_allclose(result.attention.sum(axis=1), 1.0, rtol=1e-5)


def test_save_load_gives_identical_translations(dates_model, tmp_path):
    first = Translator.load(dates_model)
    copy = tmp_path / "copy.safetensors"
    first.save(copy)
    second = Translator.load(copy)
    for a, b in zip(first.translate(SENTENCES), second.translate(SENTENCES), strict=True):
        assert a.text == b.text and a.tokens == b.tokens
        np.testing.assert_array_equal(a.attention, b.attention)
    for name, tensor in first.model.state_dict().items():
        assert torch.equal(tensor, second.model.state_dict()[name])


def test_batch_does_not_change_translations(dates_model):
    translator = Translator.load(dates_model)
    together = [r.text for r in translator.translate(SENTENCES * 5, batch_size=64)]
    alone = [translator.translate([s])[0].text for s in SENTENCES]
    assert together == alone * 5


def test_empty_line_gives_empty_translation(dates_model):
    translator = Translator.load(dates_model)
    empty, real, blank = translator.translate(["", SENTENCES[0], "   \u200b "])
    for result in (empty, blank):
        assert result.text == "" and result.tokens == [] and result.attention.shape == (0, 0)
    assert real.text != ""


def test_unknown_words_translate_without_error(dates_model):
    translator = Translator.load(dates_model)
    (result,) = translator.translate(["жжжёёёЩЩЩ"])  # no Cyrillic in the dates vocabulary
    ids = translator.tokenization.src_vocab.encode(result.source_tokens)
    assert set(ids) == {1}  # all <unk>
    limit = int(len(result.source_tokens) * translator.config.decode.max_len_ratio) + translator.config.decode.max_len_extra
    assert len(result.tokens) <= limit
    assert result.attention.shape == (len(result.tokens), len(result.source_tokens))


def test_overlong_input_is_cut_to_the_documented_limit(dates_model):
    translator = Translator.load(dates_model)
    limit = translator.config.decode.max_src_len
    (result,) = translator.translate(["1" * (limit * 3)])
    assert len(result.source_tokens) == limit


def test_model_file_is_safetensors_with_json_metadata(dates_model):
    tensors, meta = load_file(dates_model)
    assert meta["kind"] == "model"
    assert meta["src_vocab"][:4] == ["<pad>", "<unk>", "<sos>", "<eos>"]
    assert meta["config"]["model"]["attention"] == "bahdanau"
    assert all(name.startswith("model.") for name in tensors)
    header_len = int.from_bytes(dates_model.read_bytes()[:8], "little")
    header = json.loads(dates_model.read_bytes()[8 : 8 + header_len])
    assert "attnmt" in header["__metadata__"]


class Boom:
    def __reduce__(self):
        return (exec, ("open(__import__('os').environ['BOOM_FILE'], 'w').write('ran')",))


def test_pickle_in_place_of_model_is_refused_without_running(tmp_path, monkeypatch):
    marker = tmp_path / "ran.txt"
    monkeypatch.setenv("BOOM_FILE", str(marker))
    evil = tmp_path / "model.safetensors"
    evil.write_bytes(pickle.dumps(Boom()))
    with pytest.raises(AttnmtError, match="not an attnmt model file"):
        Translator.load(evil)
    assert not marker.exists()


def test_torch_save_file_is_refused(tmp_path):
    path = tmp_path / "model.pt"
    torch.save({"weights": torch.zeros(3)}, path)
    with pytest.raises(AttnmtError, match="not an attnmt model file"):
        Translator.load(path)


def test_truncated_model_file_is_refused(dates_model, tmp_path):
    data = dates_model.read_bytes()
    for cut in (4, 100, len(data) // 2, len(data) - 1):
        broken = tmp_path / f"cut{cut}.safetensors"
        broken.write_bytes(data[:cut])
        with pytest.raises(AttnmtError, match=str(broken.name)):
            Translator.load(broken)


def test_other_safetensors_file_is_refused(tmp_path):
    from safetensors.torch import save_file as plain_save

    path = tmp_path / "other.safetensors"
    plain_save({"w": torch.zeros(2)}, str(path))
    with pytest.raises(AttnmtError, match="without attnmt metadata"):
        Translator.load(path)


def test_missing_model_file(tmp_path):
    with pytest.raises(AttnmtError, match="not found"):
        Translator.load(tmp_path / "nothing.safetensors")


def test_save_into_missing_directory_fails_cleanly(tmp_path):
    with pytest.raises(AttnmtError, match="does not exist"):
        save_file(tmp_path / "no" / "such" / "m.safetensors", {"x": torch.zeros(1)}, {})


def test_plot_writes_png(dates_model, tmp_path):
    translator = Translator.load(dates_model)
    (result,) = translator.translate(["3. Oktober 1990"])
    out = tmp_path / "a.png"
    plot_attention(result.attention, result.source_tokens, result.tokens, out, title="ü ß → Devanagari हवं")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError):
        plot_attention(result.attention, result.source_tokens[:-1], result.tokens, out)


def test_a_plots_title_wraps_whole_and_is_cut_only_past_three_lines(monkeypatch, tmp_path):
    """A 5x5 heatmap is about 3.75 inches wide: its title once lost all but three words to '...'."""
    from attnmt import plot

    titles: list[str] = []
    monkeypatch.setattr(plot, "write_png", lambda fig, path: titles.append(fig.axes[0].get_title()))
    tokens, weights = list("abcde"), np.full((5, 5), 0.2)
    sentence = "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche -> Two young men are outside"
    plot_attention(weights, tokens, tokens, tmp_path / "a.png", title=sentence)
    assert titles[-1].replace("\n", " ") == sentence and titles[-1].count("\n") >= 1
    plot_attention(weights, tokens, tokens, tmp_path / "a.png", title=sentence * 4)
    assert titles[-1].count("\n") == 2 and titles[-1].endswith(" ...")


def test_a_plot_tells_the_space_symbol_from_an_underscore(monkeypatch, tmp_path):
    """At a label's size "▁" was drawn as a bold "_": "▁x" and "_x" looked the same."""
    from attnmt import plot
    from attnmt.plot import plot_attention_grid

    drawn: list = []
    monkeypatch.setattr(plot, "write_png", lambda fig, path: drawn.append(fig))
    source, output = ["\u2581Ein", "_x", "."], ["\u2581A", "x"]
    plot_attention(np.full((2, 3), 0.3), source, output, tmp_path / "a.png")
    ax = drawn[-1].axes[0]
    across, down = [t.get_text() for t in ax.get_xticklabels()], [t.get_text() for t in ax.get_yticklabels()]
    assert across == ["\u2423Ein", "_x", "."] and down == ["\u2423A", "x"]
    assert any(text.get_text().endswith("\u2423: a space (\u2581 in the text views)") for text in drawn[-1].texts)
    plot_attention(np.full((2, 2), 0.3), ["a", "_b"], ["c", "d"], tmp_path / "a.png")
    assert not drawn[-1].texts  # no space, no key
    plot_attention_grid(np.full((1, 2, 2, 3), 0.3), source, output, tmp_path / "g.png")
    assert [t.get_text() for t in drawn[-1].axes[0].get_xticklabels()][0] == "\u2423Ein"
    assert "\u2423: a space" in drawn[-1]._supxlabel.get_text()


def assert_same_nbests(nbests: list, expected: list) -> None:
    """The same texts; log-probabilities the same up to the float sums of another batch."""
    assert [[t.text for t in nbest] for nbest in nbests] == [[t.text for t in nbest] for nbest in expected]
    got, want = ([t.log_prob for nbest in n for t in nbest] for n in (nbests, expected))
    assert got == pytest.approx(want, rel=1e-5)


@pytest.mark.parametrize("n_best,beam_size", [(1, 1), (2, 3)])
def test_stream_across_chunks_equals_translating_at_once(dates_model, monkeypatch, n_best, beam_size):
    translator = Translator.load(dates_model)
    sentences = SENTENCES + [""] + [source for source, _ in generate_dates(6, seed=5)]  # 11
    at_once = translator.translate_nbest(sentences, n_best, beam_size)  # one chunk
    monkeypatch.setattr(translate, "CHUNK", 1)
    chunks = list(translator.translate_stream(iter(sentences), n_best, beam_size, batch_size=2))
    assert [len(chunk) for chunk in chunks] == [2, 2, 2, 2, 2, 1]
    assert_same_nbests([nbest for chunk in chunks for nbest in chunk], at_once)


def test_stream_pulls_one_chunk_at_a_time(dates_model, monkeypatch):
    translator = Translator.load(dates_model)
    monkeypatch.setattr(translate, "CHUNK", 2)
    pulled = []

    def lines():
        for sentence in SENTENCES * 3:
            pulled.append(sentence)
            yield sentence

    stream = translator.translate_stream(lines(), batch_size=2)
    assert pulled == []
    assert len(next(stream)) == 4 and len(pulled) == 4
    assert [len(chunk) for chunk in stream] == [4, 4] and len(pulled) == 12


def test_stream_checks_its_arguments_at_the_call(dates_model):
    translator = Translator.load(dates_model)
    with pytest.raises(AttnmtError, match="n_best"):
        translator.translate_stream(iter(SENTENCES), n_best=3, beam_size=2)
    with pytest.raises(TypeError, match="list of sentences"):
        translator.translate_stream(SENTENCES[0])
    assert list(translator.translate_stream(iter([]))) == []


def test_validation_scores_the_weights_of_that_epoch(tmp_path):
    """With a bf16 decoding copy, each epoch's valid_bleu is that of the epoch's own weights."""
    from conftest import tiny_dates_config

    from attnmt.configfile import config_from_dict
    from attnmt.corpus.prepare import prepare_corpus
    from attnmt.evaluate import score_translations
    from attnmt.training.train import train

    values = tiny_dates_config(tmp_path)
    values["data"]["num_pairs"] = 600
    values["train"].update(epochs=3, average_last=3)          # keeps each epoch's weights in a file
    values["decode"] = {"precision": "bf16"}
    lines: list[str] = []
    train(config_from_dict(values), log=lines.append)
    logged = [float(line.split("valid_bleu ")[1].split()[0]) for line in lines if line.startswith("epoch ")
              and "valid_bleu" in line]
    config = config_from_dict(values)
    pairs = prepare_corpus(config).valid_pairs
    rescored = [score_translations(Translator.load(tmp_path / f"epoch{e}.safetensors", "cpu"), pairs)["bleu"]
                for e in (1, 2, 3)]
    assert logged == pytest.approx(rescored, abs=0.01)


@pytest.fixture(scope="module")
def never_ending_model(transformer_dates_model, tmp_path_factory):
    """The small Transformer made never to write <eos> (its classifier's bias for it -1e4), with a
    length rule of its own: every output runs to the longest the rule allows."""
    from attnmt.vocab import EOS_ID

    translator = Translator.load(transformer_dates_model, "cpu", precision="fp32")
    translator.config.decode.max_len_ratio, translator.config.decode.max_len_extra = 1.5, 2
    bias = next(p for name, p in translator.model.named_parameters() if name.endswith("classifier.bias"))
    with torch.no_grad():
        bias[EOS_ID] = -1e4
    path = tmp_path_factory.mktemp("never_ending") / "model.safetensors"
    translator.save(path)
    return path


@pytest.mark.parametrize("engine", ["greedy", "beam", "explain", "ctranslate2"])
def test_every_engine_and_explain_keep_the_one_output_length_rule(never_ending_model, tmp_path, engine):
    """decode.max_len_ratio x source tokens + decode.max_len_extra tokens, <eos> not counted
    (TextTranslator.max_output_tokens): a drift of one in any of them fails here."""
    from attnmt.analysis.explain import explain

    translator = Translator.load(never_ending_model, "cpu", precision="fp32")
    sentence = SENTENCES[0]
    source_length = len(translator.tokenize_source(sentence))
    limit = translator.max_output_tokens(source_length)
    assert limit == int(source_length * 1.5) + 2
    if engine == "explain":
        explanation = explain(translator, sentence)
        assert len(explanation.output_tokens) == len(explanation.steps) == limit
        return
    if engine == "ctranslate2":
        pytest.importorskip("ctranslate2", reason="the ctranslate2 package (the test extra) is not installed")
        from attnmt.formats.ctranslate2 import export_ctranslate2
        from attnmt.formats.ctranslate2_engine import CTranslate2Translator

        translator = CTranslate2Translator.load(export_ctranslate2(never_ending_model, tmp_path / "ct2"), "cpu", "fp32")
    for beam_size in ([1] if engine == "greedy" else [3] if engine == "beam" else [1, 3]):
        (translation,) = translator.translate([sentence], beam_size=beam_size)
        assert len(translation.tokens) == limit, beam_size


def test_the_python_api_takes_a_training_runs_folder_as_the_command_line_does(dates_model):
    """Translator.load(train.out_dir), as `attnmt translate RUN` takes it (it once said the folder held no
    model.safetensors while the file was there)."""
    assert dates_model.name == "model.safetensors"
    from_folder, from_file = Translator.load(dates_model.parent, "cpu"), Translator.load(dates_model, "cpu")
    assert from_folder.translate(["3. Oktober 1990"])[0].text == from_file.translate(["3. Oktober 1990"])[0].text
