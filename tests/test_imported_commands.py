"""Every command on an imported Marian model (issue 96): the file `attnmt import` writes is an attnmt
model like any other. A tiny made-up folder (tests/marian_folders.py) is imported once; each command
runs on it and is checked against what the Python API computes on the same file, so that a command
that reads the model's own symbols differently (its start token, the </s> every source ends with,
<pad> moved to id 0) fails here. tests/test_marian_parity.py compares the numbers with transformers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient
from marian_folders import write_marian_folder

from attnmt import cli
from attnmt.analysis.attribution import attribute
from attnmt.analysis.explain import explain
from attnmt.config import ServeConfig
from attnmt.configfile import config_from_dict
from attnmt.corpus.dates import generate_dates
from attnmt.formats.marian import import_marian
from attnmt.modelfile import read_metadata, read_model
from attnmt.serve import create_app
from attnmt.training.train import train
from attnmt.translate import Translator

PAIRS = generate_dates(6, seed=11)
SOURCES = [source for source, _ in PAIRS]


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> Path:
    folder = write_marian_folder(tmp_path_factory.mktemp("marian") / "opus-mt-de-en")
    return import_marian(folder, tmp_path_factory.mktemp("imported") / "model.safetensors")


@pytest.fixture(scope="module")
def translator(imported) -> Translator:
    return Translator.load(imported, "cpu")


def run(capsys, *argv: str) -> str:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out


@pytest.fixture
def sources(tmp_path) -> Path:
    path = tmp_path / "sources.txt"
    path.write_text("".join(f"{s}\n" for s in SOURCES), encoding="utf-8")
    return path


def test_translate_and_evaluate_read_the_file_as_the_api_does(imported, translator, sources, tmp_path, capsys):
    expected = [t.text for t in translator.translate(SOURCES, beam_size=3)]
    assert run(capsys, "translate", str(imported), "--input", str(sources), "--beam", "3",
               "--device", "cpu").splitlines() == expected
    references = tmp_path / "references.txt"
    references.write_text("".join(f"{t}\n" for t in expected), encoding="utf-8")
    scored = run(capsys, "evaluate", str(imported), "--src", str(sources), "--ref", str(references), "--beam", "3",
                 "--device", "cpu")
    assert "exact" in scored and "100.0" in scored       # its own outputs as references: every one exact


def test_every_precision_decodes_the_imported_model(imported, sources, capsys):
    for precision in ("int8", "bf16"):
        out = run(capsys, "translate", str(imported), "--input", str(sources), "--precision", precision,
                  "--device", "cpu")
        assert len(out.splitlines()) == len(SOURCES)


def test_explain_reads_the_source_as_the_model_does_and_writes_greedys_output(imported, translator, capsys):
    sentence = SOURCES[0]
    explanation = explain(translator, sentence)
    assert explanation.source_tokens[-1] == "</s>"                      # the model's own source end
    assert explanation.source_tokens == translator.tokenize_source(sentence)
    greedy = translator.translate([sentence], beam_size=1)[0]
    assert explanation.output_tokens == greedy.tokens
    written = [step.token for step in explanation.steps]                 # every token, and the model's end
    assert written[: len(greedy.tokens)] == greedy.tokens and written[len(greedy.tokens):] in ([], ["</s>"])
    for step in explanation.steps:
        assert step.keys == explanation.source_tokens and abs(sum(step.weights) - 1) < 1e-4
    text = run(capsys, "explain", str(imported), sentence, "--json", "--device", "cpu")
    assert json.loads(text)["output_tokens"] == greedy.tokens
    decoder = run(capsys, "explain", str(imported), sentence, "--attention", "decoder", "--step", "1",
                  "--device", "cpu")
    assert "<pad>" in decoder        # the decoder starts from Marian's start token, <pad>, and attends to it


def test_attribution_names_the_source_words_and_the_targets_steps(imported, translator, capsys):
    sentence = SOURCES[1]
    greedy = translator.translate([sentence], beam_size=1)[0]
    attribution = attribute(translator, sentence, method="grad")
    # Words as a reader sees them (the period apart); </s> is no word of the source.
    assert attribution.source_words == ["am", "7", ".", "Februar", "2067"] and sentence == "am 7. Februar 2067"
    assert attribution.target_tokens == greedy.tokens
    assert len(attribution.steps) in (len(greedy.tokens), len(greedy.tokens) + 1)
    assert attribution.start_token == "<pad>"                            # Marian's decoder starts from <pad>
    out = run(capsys, "explain", str(imported), sentence, "--attribution", "grad", "--step", "2", "--device", "cpu")
    assert sentence.split()[0] in out and "%: <pad> " in out             # the prefix named by its start token


def test_plot_draws_the_imported_models_attention(imported, tmp_path, capsys):
    out = tmp_path / "attention.png"
    for attention in ("cross", "encoder", "decoder"):
        run(capsys, "plot", str(imported), SOURCES[0], "--out", str(out), "--attention", attention, "--grid",
            "--device", "cpu")
        assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_align_links_source_words_only_and_train_aligner_keeps_the_weights(imported, sources, tmp_path, capsys):
    targets = tmp_path / "targets.txt"
    targets.write_text("".join(f"{t}\n" for _, t in PAIRS), encoding="utf-8")
    links = run(capsys, "align", str(imported), "--src", str(sources), "--tgt", str(targets), "--device", "cpu")
    for line, (source, target) in zip(links.splitlines(), PAIRS):
        pairs = [tuple(map(int, link.split("-"))) for link in line.split()]
        assert pairs and all(i < len(source.split()) and j < len(target.split()) for i, j in pairs)  # no </s> link
    with_aligner = tmp_path / "aligned.safetensors"
    run(capsys, "train-aligner", str(imported), "--src", str(sources), "--tgt", str(targets), "--out",
        str(with_aligner), "--epochs", "1", "--device", "cpu")
    aligned = run(capsys, "align", str(with_aligner), "--src", str(sources), "--tgt", str(targets), "--method",
                  "aligner", "--device", "cpu")
    assert len(aligned.splitlines()) == len(PAIRS)
    assert "imported from the marian folder" in run(capsys, "info", str(with_aligner))


def test_export_to_ctranslate2_translates_as_attnmt_does(imported, translator, sources, tmp_path, capsys):
    pytest.importorskip("ctranslate2")
    out = tmp_path / "ct2"
    run(capsys, "export", str(imported), str(out), "--to", "ctranslate2")
    expected = [t.text for t in translator.translate(SOURCES, beam_size=1)]
    assert run(capsys, "translate", str(out), "--input", str(sources), "--beam", "1",
               "--device", "cpu").splitlines() == expected


def test_the_server_answers_translate_explain_model_and_libretranslate(imported, translator):
    with TestClient(create_app(translator, ServeConfig())) as client:
        answer = client.post("/translate", json={"text": SOURCES[0], "attention": True}).json()["results"][0]
        greedy_or_beam = translator.translate([SOURCES[0]])[0]
        assert answer["translation"] == greedy_or_beam.text
        assert answer["source_tokens"][-1] == "</s>"
        assert len(answer["attention"]) == len(answer["tokens"]) and \
            all(len(row) == len(answer["source_tokens"]) for row in answer["attention"])
        explained = client.post("/explain", json={"text": SOURCES[0]}).json()
        assert explained["output_tokens"] == translator.translate([SOURCES[0]], beam_size=1)[0].tokens
        model = client.get("/model").json()
        assert (model["src_lang"], model["tgt_lang"], model["start_token"]) == ("de", "en", "<pad>")
        assert client.get("/").status_code == 200
        libre = client.post("/libretranslate/translate", json={"q": SOURCES[0], "source": "de", "target": "en"})
        assert libre.json()["translatedText"] == greedy_or_beam.text


def test_an_imported_model_fine_tunes_and_its_file_says_from_what(imported, tmp_path, capsys):
    config = {"data": {"format": "dates", "num_pairs": 300, "valid_size": 30, "test_size": 30, "seed": 2},
              "train": {"out_dir": str(tmp_path / "fine"), "init_from": str(imported), "epochs": 1, "lr": 1e-4}}
    result = train(config_from_dict(config), log=lambda _: None)
    fine = Translator.load(result.model_path, "cpu")
    assert fine.tokenization.to_dict() == Translator.load(imported, "cpu").tokenization.to_dict()
    assert fine.translate(SOURCES[:1])[0].tokens                        # it decodes with the model's own symbols
    info = run(capsys, "info", str(result.model_path))
    assert f"fine-tuned from: {imported.resolve()} (weights sha256 " in info
    assert "imported from the marian folder" in info.split("fine-tuned from:")[1]

    # attnmt average: the mean of the imported and the fine-tuned weights, which info says it is
    out = tmp_path / "mean.safetensors"
    run(capsys, "average", str(imported), str(tmp_path / "fine"), "--out", str(out))
    (_, before, _), (_, after, _), (_, mean, meta) = read_model(imported), read_model(result.model_path), read_model(out)
    assert all(torch.equal(mean[k], (before[k] + after[k]) / 2) for k in before)
    assert meta["origin"]["format"] == "marian"
    info = run(capsys, "info", str(out))
    assert f"averaged from: {imported.resolve()} (weights sha256 {read_metadata(imported)['sha256']}), " \
           f"{result.model_path.resolve()} (weights sha256 " in info


def test_average_refuses_files_of_another_model_and_a_single_file(imported, transformer_dates_model, tmp_path, capsys):
    out = tmp_path / "mean.safetensors"
    for argv, error in [([imported, transformer_dates_model], f"{transformer_dates_model}: another architecture than "
                                                              f"{imported} (model."),
                        ([imported], "attnmt average: give two or more model files to average")]:
        assert cli.main(["average", *map(str, argv), "--out", str(out)]) == 2
        assert error in capsys.readouterr().err and not out.exists()
