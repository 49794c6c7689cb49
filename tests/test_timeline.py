"""A training run records its watched sentences' translation and attention as they form (the
timeline), resumes it whole, survives a cut last line, and `attnmt plot RUN --timeline` draws it."""

import json

import numpy as np
import pytest
from conftest import tiny_dates_config

from attnmt import AttnmtError, Translator
from attnmt.cli import main
from attnmt.configfile import config_from_dict
from attnmt.training.timeline import TIMELINE_FILE, read_timeline
from attnmt.training.train import train

PNG, GIF = b"\x89PNG\r\n\x1a\n", b"GIF89a"


def run(tmp_path, name: str, resume: bool = False, **train_settings) -> dict:
    values = tiny_dates_config(tmp_path / name)
    values["train"].update(train_settings)
    train(config_from_dict(values), resume=resume, log=lambda _: None)
    return values


def test_a_run_records_its_watched_sentences_early_and_at_every_validation(tmp_path):
    values = run(tmp_path, "run")
    points = read_timeline(tmp_path / "run")
    # 1,300 training pairs in batches of 64: 21 updates an epoch, two epochs.
    assert [(p.step, p.epoch, p.valid_loss is not None) for p in points] == [
        (1, 1, False), (2, 1, False), (4, 1, False), (8, 1, False), (16, 1, False), (21, 1, True), (42, 2, True)]
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [p.valid_loss for p in points if p.valid_loss is not None] == [m["valid_loss"] for m in metrics]
    watched = points[-1].sentences
    assert len(watched) == 3 and all(p.sentences[0].source == watched[0].source for p in points)
    # The last point is the weights the run ended with: its checkpoint's translation and attention.
    final = Translator.load(tmp_path / "run" / "checkpoint.safetensors")
    result = final.translate([watched[0].source], beam_size=1)[0]
    assert watched[0].tokens == result.tokens and watched[0].maps.shape[:2] == (1, 1)
    np.testing.assert_allclose(watched[0].maps[0, 0], result.attention, atol=0.5 / 255 + 1e-6)
    assert values["train"]["out_dir"].endswith("run")


@pytest.mark.slow  # a whole run or several processes; the module's other tests stay in the quick tier
def test_a_resumed_run_keeps_the_timeline_whole(tmp_path):
    run(tmp_path, "whole")
    run(tmp_path, "cut", epochs=1)
    path = tmp_path / "cut" / TIMELINE_FILE
    lines = path.read_text().splitlines()
    # A kill after the checkpoint: a point recorded past it, then a line cut mid-write.
    past = json.loads(lines[-1]) | {"step": 30, "epoch": 2}
    path.write_text("\n".join([*lines, json.dumps(past), lines[-1][:50]]) + "\n")
    assert [p.step for p in read_timeline(tmp_path / "cut")] == [1, 2, 4, 8, 16, 21, 30]  # the cut line skipped
    run(tmp_path, "cut", resume=True, epochs=2)
    whole, resumed = read_timeline(tmp_path / "whole"), read_timeline(tmp_path / "cut")
    assert [p.step for p in resumed] == [p.step for p in whole] == [1, 2, 4, 8, 16, 21, 42]
    for a, b in zip(whole, resumed):  # resume is exact: the same translations and the same maps
        assert [s.tokens for s in a.sentences] == [s.tokens for s in b.sentences]
        assert all(np.array_equal(x.maps, y.maps) for x, y in zip(a.sentences, b.sentences))


def test_watching_is_chosen_by_the_config(tmp_path):
    run(tmp_path, "none", watch=0, epochs=1)
    assert not (tmp_path / "none" / TIMELINE_FILE).exists()
    with pytest.raises(AttnmtError, match="no timeline.jsonl"):
        read_timeline(tmp_path / "none")
    sentences = tmp_path / "watch.txt"
    sentences.write_text("March 14, 2026\n\n3. Oktober 1990\n", encoding="utf-8")
    run(tmp_path, "file", watch_file=str(sentences), epochs=1)
    assert [s.source for s in read_timeline(tmp_path / "file")[0].sentences] == ["March 14, 2026", "3. Oktober 1990"]


def test_a_watched_sentence_with_gold_links_records_the_alignment_error_at_each_point(tmp_path, capsys):
    from attnmt.analysis.align import AttentionLinks, align_by_attention, parse_links, score

    sentences = tmp_path / "watch.tsv"
    sentences.write_text("3 . Oktober 1990\t1990 - 10 - 03\t0-4 2-2 3-0\nMarch 14, 2026\n", encoding="utf-8")
    run(tmp_path, "gold", watch_file=str(sentences), epochs=1)
    points = read_timeline(tmp_path / "gold")
    assert all(p.sentences[0].aer is not None and 0 <= p.sentences[0].aer <= 1 for p in points)
    assert all(p.sentences[1].aer is None for p in points)
    final = Translator.load(tmp_path / "gold" / "checkpoint.safetensors")   # the last point's weights
    (alignment,) = align_by_attention(final, ["3 . Oktober 1990"], ["1990 - 10 - 03"], AttentionLinks())
    gold = parse_links("0-4 2-2 3-0", 0, "gold")
    assert points[-1].sentences[0].aer == round(score([alignment.links], [gold]).aer, 4)
    sentences.write_text("a\tb\n", encoding="utf-8")
    values = tiny_dates_config(tmp_path / "bad")
    values["train"]["watch_file"] = str(sentences)
    with pytest.raises(AttnmtError, match=r"watch.tsv:1: expected a sentence, or a sentence, its reference and its "
                                          r"gold links separated by TABs; found 2 columns"):
        train(config_from_dict(values), log=lambda _: None)


def test_plot_draws_the_timeline_as_an_animation_and_a_contact_sheet(tmp_path, capsys):
    from PIL import Image

    run(tmp_path, "run", epochs=1)
    out = tmp_path / "forming.gif"
    assert main(["plot", str(tmp_path / "run"), "--timeline", "--watched", "2", "--out", str(out)]) == 0
    assert "6 points of training, steps 1 to 21" in capsys.readouterr().out
    assert out.read_bytes().startswith(GIF) and Image.open(out).n_frames == 6
    assert out.with_suffix(".png").read_bytes().startswith(PNG)
    assert main(["plot", str(tmp_path / "run"), "--timeline", "--watched", "4", "--out", str(out)]) == 2
    assert "watched sentence 4: the run watched 3 sentences (from 1)" in capsys.readouterr().err
    assert main(["plot", str(tmp_path / "run"), "--out", str(out)]) == 2
    assert "plot needs a sentence to translate (or --timeline" in capsys.readouterr().err


def test_the_server_answers_a_runs_timeline_and_says_which_models_have_one(tmp_path):
    from fastapi.testclient import TestClient

    from attnmt.serve import create_app
    from attnmt.serve.models import ModelSet, ServedModel

    run(tmp_path, "run", epochs=1)
    model = tmp_path / "run" / "model.safetensors"
    elsewhere = tmp_path / "copy.safetensors"
    elsewhere.write_bytes(model.read_bytes())
    served = ModelSet([ServedModel(name, str(path), Translator.load(path)) for name, path in
                       (("run", model), ("copy", elsewhere))])
    with TestClient(create_app(served)) as client:
        answer = client.get("/timeline", params={"name": "run"}).json()
        points = read_timeline(tmp_path / "run")
        assert [p["step"] for p in answer["points"]] == [p.step for p in points]
        assert answer["sources"] == [s.source for s in points[-1].sentences]
        last = answer["points"][-1]["sentences"][0]
        assert last["tokens"] == points[-1].sentences[0].tokens
        np.testing.assert_allclose(last["attention"], points[-1].sentences[0].maps[-1].mean(0), atol=1e-4)
        assert [c["step"] for c in answer["curve"]] == [p.step for p in points if p.valid_loss is not None]
        assert client.get("/model", params={"name": "run"}).json()["timeline"] is True
        assert client.get("/model", params={"name": "copy"}).json()["timeline"] is False
        missing = client.get("/timeline", params={"name": "copy"})
        assert missing.status_code == 404 and "no timeline.jsonl" in missing.json()["error"]
