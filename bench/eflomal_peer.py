"""eflomal, the statistical aligner that bench/alignment.py puts beside attnmt's rows.

eflomal (Östling and Tiedemann 2016: IBM1 + HMM + fertility, sampled) is GPL-licensed, so it is a
benchmark tool only: it lives in a virtual environment of its own, which `ensure_eflomal` creates
with `pip install eflomal==2.0.0`, and runs as a separate program; attnmt never imports it.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from attnmt.analysis.align import Link

EFLOMAL_VERSION = "2.0.0"


@dataclass
class PeerLinks:
    """eflomal's links of the sentences asked for, each direction as (source, target) pairs."""
    forward: list[set[Link]]
    reverse: list[set[Link]]
    wall_seconds: float
    cpu_seconds: float                      # user + system time of eflomal's processes


def ensure_eflomal(venv: Path) -> Path:
    """The folder of eflomal's programs in `venv`, created and installed there if missing."""
    programs = venv / "bin"
    if not (programs / "eflomal-align").exists():
        print(f"installing eflomal {EFLOMAL_VERSION} (GPL; benchmark only) into {venv}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(programs / "pip"), "install", "--quiet", f"eflomal=={EFLOMAL_VERSION}"], check=True)
    return programs


def read_links(path: Path) -> list[set[Link]]:
    """A links file of eflomal (and fast_align): one line per pair, `i-j` for source word i, target word j."""
    return [{(int(i), int(j)) for i, j in (link.split("-") for link in line.split())}
            for line in path.read_text(encoding="utf-8").splitlines()]


def align(programs: Path, text: list[tuple[list[str], list[str]]], asked: range,
          unseen: list[tuple[list[str], list[str]]] | None = None) -> PeerLinks:
    """eflomal trained on `text` (word tokens; it lowercases), with its defaults. Without `unseen`,
    returns the links of text[asked], which the training saw; with it, returns the links of the
    `unseen` pairs only, aligned with the lexical priors the training on `text` left (eflomal's way
    of aligning new text with what it learned: `eflomal-makepriors`, then `eflomal-align -p`)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="eflomal-") as folder:
        work = Path(folder)

        def write(name: str, pairs: list[tuple[list[str], list[str]]]) -> tuple[Path, Path]:
            source, target = work / f"{name}.src", work / f"{name}.tgt"
            source.write_text("".join(" ".join(s) + "\n" for s, _ in pairs), encoding="utf-8")
            target.write_text("".join(" ".join(t) + "\n" for _, t in pairs), encoding="utf-8")
            return source, target

        def run(source: Path, target: Path, prefix: str, *options: str) -> tuple[Path, Path]:
            forward, reverse = work / f"{prefix}.fwd", work / f"{prefix}.rev"
            subprocess.run([str(programs / "eflomal-align"), "-s", str(source), "-t", str(target),
                            "-f", str(forward), "-r", str(reverse), "--overwrite", *options], check=True)
            return forward, reverse

        source, target = write("text", text)
        forward, reverse = run(source, target, "text")
        if unseen is not None:
            priors = work / "priors"
            subprocess.run([str(programs / "eflomal-makepriors"), "-s", str(source), "-t", str(target),
                            "-f", str(forward), "-r", str(reverse), "-p", str(priors)], check=True)
            forward, reverse = run(*write("unseen", unseen), "unseen", "-p", str(priors))
            asked = range(len(unseen))
        links = [read_links(forward), read_links(reverse)]
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return PeerLinks([links[0][i] for i in asked], [links[1][i] for i in asked], time.monotonic() - started,
                     after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
