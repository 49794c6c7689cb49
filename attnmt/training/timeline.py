"""Attention as it forms: a training run records, for a few watched sentences, the greedy
translation and every layer's and head's cross-attention at a few early updates (1, 2, 4, 8, ...
before the first validation) and at every validation, into its folder; `attnmt plot RUN --timeline`
draws them as an animation and a contact sheet.

The file is JSON lines, one point of training per line, appended and flushed as it is recorded:
a run killed mid-write leaves its earlier lines readable (a cut last line is skipped), and a resumed
run first drops the points recorded after its checkpoint, so that the timeline reads as one run.
Weights are kept as bytes (0-255 for 0-1, base64): a map of 20 x 20 tokens in 8 heads of 6 layers
is 19,200 bytes, 25,600 in base64, a sentence and a point.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import numpy as np
from matplotlib.figure import Figure

from ..analysis.align import AttentionLinks, GoldLinks, align_by_attention, parse_links, score
from ..config import TrainConfig
from ..corpus.readers import read_lines
from ..errors import AttnmtError
from ..files import atomic_write
from ..translate import Translator, map_shapes

TIMELINE_FILE = "timeline.jsonl"


@dataclass
class Watched:
    """One watched sentence at one point of training."""

    source: str
    source_tokens: list[str]
    tokens: list[str]                # the greedy translation's tokens, without <eos>
    text: str
    maps: np.ndarray                 # [layers, heads, len(tokens), len(source_tokens)]: cross-attention
    aer: Optional[float] = None      # with a gold alignment: the AER of the attention's links on the reference

    def shown(self) -> np.ndarray:
        """The map a timeline shows of it (the figures, the explorer's slider): the last layer's
        cross-attention, the heads' mean, [len(tokens), len(source_tokens)]."""
        return self.maps[-1].mean(0)

    def to_dict(self) -> dict:
        quantized = np.rint(np.clip(self.maps, 0.0, 1.0) * 255).astype(np.uint8)
        return {"source": self.source, "source_tokens": self.source_tokens, "tokens": self.tokens, "text": self.text,
                "shape": list(quantized.shape), "maps": base64.b64encode(quantized.tobytes()).decode("ascii"),
                "aer": self.aer}

    @classmethod
    def from_dict(cls, values: dict) -> "Watched":
        flat = np.frombuffer(base64.b64decode(values["maps"]), dtype=np.uint8)
        maps = flat.reshape(values["shape"]).astype(np.float32) / 255
        return cls(values["source"], values["source_tokens"], values["tokens"], values["text"], maps, values.get("aer"))


@dataclass
class Sentence:
    """A sentence a run watches, with the reference translation and gold links to score its attention's
    alignment against, where given."""

    source: str
    reference: Optional[str] = None
    gold: Optional[GoldLinks] = None


@dataclass
class Point:
    """The watched sentences at one update of training."""

    step: int
    epoch: int
    valid_loss: Optional[float]      # at a validation; None at an early update
    sentences: list[Watched]


def watch(translator: Translator, sentences: list[Sentence]) -> list[Watched]:
    """The greedy translation of each sentence and its cross-attention, every layer and head, as the
    model is now; with a gold alignment, the AER of the attention's links on the reference."""
    translator.model.eval()
    one_map = map_shapes(translator.model).get("cross") == (1, 1)   # an RNN: decoding gave its one map already
    watched = []
    for sentence, result in zip(sentences, translator.translate([s.source for s in sentences], beam_size=1)):
        if not result.tokens or not result.source_tokens:
            maps = np.zeros((1, 1, len(result.tokens), len(result.source_tokens)), dtype=np.float32)
        elif one_map and result.attention is not None:
            maps = result.attention[None, None]
        else:
            maps = translator.attention_maps(result)["cross"]
        aer = None
        if sentence.reference is not None and sentence.gold is not None:
            (alignment,) = align_by_attention(translator, [sentence.source], [sentence.reference], AttentionLinks())
            aer = round(score([alignment.links], [sentence.gold]).aer, 4)
        watched.append(Watched(sentence.source, result.source_tokens, result.tokens, result.text, maps, aer))
    return watched


def watched_sentences(path: str, gold_base: int) -> list[Sentence]:
    """train.watch_file's sentences: a sentence a line, or `sentence<TAB>reference<TAB>gold links`."""
    sentences = []
    for number, line in enumerate(read_lines(path), 1):
        if not line.strip():
            continue
        source, *rest = line.split("\t")
        if not rest:
            sentences.append(Sentence(source.strip()))
            continue
        if len(rest) != 2:
            raise AttnmtError(f"{path}:{number}: expected a sentence, or a sentence, its reference and its gold links "
                              f"separated by TABs; found {len(rest) + 1} columns")
        lengths = (len(source.split()), len(rest[0].split()))
        sentences.append(Sentence(source.strip(), rest[0].strip(), parse_links(rest[1], gold_base, f"{path}:{number}",
                                                                              lengths)))
    if not sentences:
        raise AttnmtError(f"train.watch_file {path}: no sentence in it")
    return sentences


class TimelineWriter:
    """Appends points to a run's timeline file (rank 0 alone)."""

    def __init__(self, out_dir: Path, resumed_at: Optional[int]) -> None:
        self.path = out_dir / TIMELINE_FILE
        if resumed_at is None:
            self.path.unlink(missing_ok=True)
        elif self.path.exists():  # the points past the checkpoint are recorded again as the run redoes them
            kept = [line for line in _lines(self.path) if json.loads(line)["step"] <= resumed_at]
            atomic_write(self.path, "".join(line + "\n" for line in kept).encode("utf-8"))

    def write(self, point: Point) -> None:
        line = json.dumps({"step": point.step, "epoch": point.epoch, "valid_loss": point.valid_loss,
                           "sentences": [s.to_dict() for s in point.sentences]}, ensure_ascii=False)
        with self.path.open("a", encoding="utf-8") as out:
            out.write(line + "\n")
            out.flush()
            os.fsync(out.fileno())


def _lines(path: Path) -> Iterator[str]:
    """The file's complete lines (a last line cut by a kill is left out)."""
    for raw in path.read_bytes().splitlines():
        try:
            line = raw.decode("utf-8")
            json.loads(line)
        except ValueError:
            continue
        yield line


def read_timeline(run: str | Path) -> list[Point]:
    """The points a run folder's timeline holds (`run`: the folder, or a model file in it), in training
    order; one line if there is none."""
    run = Path(run)
    folder = run if run.is_dir() else run.parent
    path = folder / TIMELINE_FILE
    if not path.is_file():
        raise AttnmtError(f"{folder}: no {TIMELINE_FILE}: a training run records one in its folder while train.watch "
                          f"is above 0 (runs of earlier attnmt versions have none)")
    points = []
    for line in _lines(path):
        values = json.loads(line)
        points.append(Point(values["step"], values["epoch"], values["valid_loss"],
                            [Watched.from_dict(s) for s in values["sentences"]]))
    if not points:
        raise AttnmtError(f"{path}: no point recorded yet")
    return sorted(points, key=lambda p: p.step)


# The updates of the first epoch, before the first validation, at which the timeline records.
EARLY_STEPS = frozenset(2 ** k for k in range(40))


class Timeline:
    """What a training run watches (rank 0's): the sentences, and the file they go to."""

    def __init__(self, sentences: list[Sentence], writer: TimelineWriter) -> None:
        self.sentences, self.writer = sentences, writer

    @classmethod
    def start(cls, tc: TrainConfig, valid_sources: list[str], out_dir: Path,
              resumed_at: Optional[int]) -> Optional["Timeline"]:
        """The run's timeline: train.watch_file's sentences, else the first train.watch validation
        sentences; None where it watches none."""
        sentences = (watched_sentences(tc.watch_file, tc.watch_gold_base) if tc.watch_file
                     else [Sentence(source) for source in valid_sources[: tc.watch]])
        return cls(sentences, TimelineWriter(out_dir, resumed_at)) if sentences else None

    def record(self, translator: Translator, step: int, epoch: int, valid_loss: Optional[float] = None) -> None:
        """Watch the sentences now, mid-training (a fresh engine: a decoding copy, bf16 or int8, is made from
        the weights as they are now); the model goes back to training after."""
        now = Translator(translator.model, translator.config, translator.tokenization)
        self.writer.write(Point(step, epoch, valid_loss, watch(now, self.sentences)))
        translator.model.train()


def timeline_figures(points: list[Point], watched: int = 1) -> tuple[list[Figure], Figure]:
    """The watched sentence number `watched` (from 1) through the points: a heatmap of each (its last
    layer's cross-attention, the heads' mean, titled by the update and the translation then) and a
    contact sheet of them all. `attnmt plot RUN --timeline` writes them; a notebook shows them."""
    from ..plot import attention_figure, contact_sheet

    if not 1 <= watched <= len(points[-1].sentences):
        raise AttnmtError(f"watched sentence {watched}: the run watched {len(points[-1].sentences)} sentences (from 1)")
    index, source = watched - 1, points[-1].sentences[watched - 1]
    maps = [p.sentences[index].shown() if p.sentences[index].tokens
            else np.zeros((1, len(source.source_tokens)), dtype=np.float32) for p in points]
    titles = [f"step {p.step}" + (f" (valid loss {p.valid_loss:.3f})" if p.valid_loss is not None else "")
              + (f", AER {p.sentences[index].aer:.2f}" if p.sentences[index].aer is not None else "")
              + f": {p.sentences[index].text}" for p in points]
    frames = [attention_figure(m, source.source_tokens, p.sentences[index].tokens or ["(nothing)"], title=t)
              for m, p, t in zip(maps, points, titles)]
    return frames, contact_sheet(maps, titles, title=source.source)
