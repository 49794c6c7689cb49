"""Preparing and training on corpora of millions of pairs (issue 38): time, memory, time to the first update.

    python bench/data_scale.py --pairs 1000000 --dir /tmp/scale_1M [--ranks 1,2] [--steps 30] [--no-peer]
                               [--out results.txt] [--config CONFIG] [key=value ...]
    python bench/data_scale.py --pairs 9000000 --dir /tmp/scale_9M --build-only

The corpus. No public corpus of millions of pairs is at hand, so one is made from Tatoeba deu-eng
(../shared/data/tatoeba_deu_eng/deu.txt.gz, 169,813 pairs): synthetic pair i joins k_i Tatoeba pairs
drawn uniformly with replacement, k_i uniform in 1..--max-join (3), the German sides joined by a
space as its source line and the English sides, in the same order, as its target line; Tatoeba
sentences average 6.5 words, so lines average about 6.5 x (1 + max_join) / 2 words. The draws come
from numpy generators seeded by (--seed, block, what), blocks of 65,536 pairs, so a corpus is the
first N pairs of any larger one with the same seed. DIR/train.de and DIR/train.en are written block
by block (memory stays a few hundred MiB whatever N is) and renamed into place when complete; Multi30k's
val and test_2016_flickr are decompressed beside them as the validation and test splits. A stamp
file (DIR/data_scale.json) records N, the seed and max_join: a DIR holding the same corpus is kept.

The measurements, each a fresh process tree, one after the other:
- attnmt prepare CONFIG data.path=DIR ...: wall time, pairs/s, peak memory, the store's size. It
  runs with ATTNMT_CACHE=DIR/attnmt_cache, emptied first (and at the end), so that it does the work
  rather than find the store of an earlier run;
- attnmt train on that store with train.log_every=1, on 1 process and under torchrun (--ranks,
  the torchrun beside sys.executable): seconds from the start to the first update's log line
  (`step 1 (`) and to step K (--steps), peak memory; the run (its process group) is killed at step K;
- OpenNMT-py 3.5.1 (the peers' venv, $PEERS_ROOT/onmt-venv; --no-peer leaves it out): onmt_build_vocab
  over the whole corpus (-n_sample -1) and onmt_train to its first logged step (-report_every 1),
  on bench/data_scale_onmt.yaml (the peers' Transformer with attnmt's 4,096-token batches). Its BPE
  would need a subword model trained first, so it reads whitespace words, 8,000 per side; attnmt
  trains its own sentencepiece BPE (8,000, joint). Vocabulary entries holding a no-break space are
  taken out of its vocabulary files before training (its reader cannot parse them).
Each process's output goes to DIR/logs/.

Memory: every 0.2 s the sampler walks the process tree (the root and all its descendants, from
/proc/*/stat), reads VmRSS and RssAnon from /proc/PID/status and Pss_Anon from smaps_rollup, and
sums each over the tree; the figures are the peaks of those sums (a peak shorter than 0.2 s can be
missed), sampling stopping at step K. VmRSS counts file-backed pages too: a corpus read through a
memory map is page cache, which the kernel can drop and which the ranks of one machine share, yet
it shows in every rank's VmRSS. RssAnon is the memory each process holds for itself, so it is the
figure that must stay flat as N grows, and the one that adds up over ranks (the ratio of 2 ranks to
1). Pages a forked worker still shares with its parent count in both processes' RssAnon; Pss_Anon
divides each among its sharers, so its sum is what the tree really holds. Under torchrun the sums
are over the ranks, the launcher left out (its own peak is printed apart).
Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Callable, Optional

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
TATOEBA = SHARED / "data" / "tatoeba_deu_eng" / "deu.txt.gz"
MULTI30K = SHARED / "data" / "multi30k"
HELD_OUT = ("val", "test_2016_flickr")
STAMP = "data_scale.json"
BLOCK = 65536  # pairs per block of draws and writes; part of the corpus's definition (the seeds go by block)
ONMT_TEMPLATE = REPO / "bench" / "data_scale_onmt.yaml"
MIB = 1024 * 1024


# ---------------------------------------------------------------------------------------- corpus

def read_side_bytes(sentences: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All sentences in one byte buffer, each followed by a space; their starts and lengths (the space included)."""
    encoded = [(s + " ").encode("utf-8") for s in sentences]
    lengths = np.fromiter((len(e) for e in encoded), dtype=np.int64, count=len(encoded))
    starts = np.cumsum(lengths) - lengths
    return np.frombuffer(b"".join(encoded), dtype=np.uint8), starts, lengths


def join_block(buffer: np.ndarray, starts: np.ndarray, lengths: np.ndarray, picks: np.ndarray,
               group_ends: np.ndarray) -> bytes:
    """The lines of one block: the picked sentences one after the other, a newline after each group's last."""
    sizes = lengths[picks]
    out_starts = np.cumsum(sizes) - sizes
    # Byte j of the block comes from buffer[j + (start of its sentence - where that sentence lands)].
    positions = np.arange(int(sizes.sum()), dtype=np.int64) + np.repeat(starts[picks] - out_starts, sizes)
    block = buffer[positions]
    block[(out_starts + sizes - 1)[group_ends]] = ord("\n")  # the last sentence's trailing space ends the line
    return block.tobytes()


def build_corpus(directory: Path, pairs: int, seed: int, max_join: int, log: Callable[[str], None]) -> Optional[dict]:
    """Write the synthetic corpus into `directory` unless its stamp says it is there; its figures, or None if kept."""
    stamp = {"pairs": pairs, "seed": seed, "max_join": max_join, "source": TATOEBA.name, "block": BLOCK}
    stamp_path = directory / STAMP
    names = ["train.de", "train.en"] + [f"{split}.{lang}" for split in HELD_OUT for lang in ("de", "en")]
    if stamp_path.exists() and all((directory / name).exists() for name in names):
        if json.loads(stamp_path.read_text()) == stamp:
            log(f"corpus: {directory} already holds {pairs:,} pairs of seed {seed}, kept")
            return None
    directory.mkdir(parents=True, exist_ok=True)
    stamp_path.unlink(missing_ok=True)  # a build cut short must not pass for a complete one
    started = time.perf_counter()
    english, german = [], []
    with gzip.open(TATOEBA, "rt", encoding="utf-8", newline="\n") as handle:
        for line in handle:  # English<TAB>German, no quoting
            columns = line.rstrip("\n").split("\t")
            english.append(columns[0])
            german.append(columns[1])
    de, en = read_side_bytes(german), read_side_bytes(english)
    count = len(german)
    words = {"de": 0, "en": 0}
    word_counts = {"de": np.array([len(s.split()) for s in german]), "en": np.array([len(s.split()) for s in english])}
    del english, german
    parts = {lang: directory / f"train.{lang}.part" for lang in ("de", "en")}
    with open(parts["de"], "wb") as out_de, open(parts["en"], "wb") as out_en:
        for block, first in enumerate(range(0, pairs, BLOCK)):
            size = min(BLOCK, pairs - first)
            joins = np.random.default_rng([seed, block, 0]).integers(1, max_join + 1, size=BLOCK)[:size]
            picks = np.random.default_rng([seed, block, 1]).integers(0, count, size=BLOCK * max_join)[:int(joins.sum())]
            group_ends = np.cumsum(joins) - 1
            out_de.write(join_block(*de, picks, group_ends))
            out_en.write(join_block(*en, picks, group_ends))
            words["de"] += int(word_counts["de"][picks].sum())
            words["en"] += int(word_counts["en"][picks].sum())
    for lang, part in parts.items():
        part.replace(directory / f"train.{lang}")
    for split in HELD_OUT:
        for lang in ("de", "en"):
            with gzip.open(MULTI30K / f"{split}.{lang}.gz", "rb") as source, open(directory / f"{split}.{lang}", "wb") as target:
                shutil.copyfileobj(source, target, 1 << 20)
    seconds = time.perf_counter() - started
    stamp_path.write_text(json.dumps(stamp) + "\n")
    return {"seconds": seconds, "words_de": words["de"] / max(pairs, 1), "words_en": words["en"] / max(pairs, 1),
            "bytes": sum((directory / f"train.{lang}").stat().st_size for lang in ("de", "en"))}


# ---------------------------------------------------------------------------------------- memory

FIGURES = ("rss", "anon", "pss_anon")


def memory_kib(pid: int) -> tuple[int, int, int]:
    """VmRSS, RssAnon and anonymous PSS of one process in KiB; zeros once it is gone (a zombie has none)."""
    found = dict.fromkeys(("VmRSS:", "RssAnon:", "Pss_Anon:"), 0)
    for name in ("status", "smaps_rollup"):
        try:
            with open(f"/proc/{pid}/{name}") as handle:
                for line in handle:
                    key = line.split(maxsplit=1)[0] if line.strip() else ""
                    if key in found:
                        found[key] = int(line.split()[1])
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            pass
    return found["VmRSS:"], found["RssAnon:"], found["Pss_Anon:"]


def children_by_scan() -> dict[int, list[int]]:
    """Every process's children, from the parent ids in /proc/*/stat (where the kernel lacks the children files)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as handle:
                stat = handle.read()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        # The command name (field 2) may hold spaces and parentheses: the fields after its last ')' are plain.
        parent = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    return children


def children_of(pid: int) -> list[int]:
    """The children of `pid`, from /proc/PID/task/*/children: each thread lists those it started."""
    found: list[int] = []
    try:
        for task in os.scandir(f"/proc/{pid}/task"):
            with open(f"{task.path}/children") as handle:
                found.extend(int(child) for child in handle.read().split())
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass  # it or a thread ended meanwhile
    return found


HAS_CHILDREN_FILES = Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").exists()


def descendants(root: int) -> list[int]:
    """`root` and every process below it."""
    # The children files cost a few reads per process of the tree; a scan of /proc reads every process's stat.
    scanned = None if HAS_CHILDREN_FILES else children_by_scan()
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children_of(pid) if scanned is None else scanned.get(pid, []))
    return tree


class TreeMemory:
    """Samples a process tree's memory every `interval` seconds in a thread and keeps the peaks of the sums (KiB).

    `peak[scope][figure]`: scope `tree` (the root and all below it), `root`, or `below` (all but
    the root: torchrun's ranks without the launcher); figure `rss` (VmRSS), `anon` (RssAnon) or
    `pss_anon` (anonymous pages, each shared one divided among the processes sharing it).
    """

    def __init__(self, root: int, interval: float = 0.2):
        self.root, self.interval = root, interval
        self.peak = {scope: dict.fromkeys(FIGURES, 0) for scope in ("tree", "root", "below")}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def sample(self) -> None:
        figures = {pid: memory_kib(pid) for pid in descendants(self.root)}
        root = figures.pop(self.root, (0, 0, 0))
        below = tuple(sum(column) for column in zip(*figures.values())) if figures else (0, 0, 0)
        for scope, values in (("tree", tuple(a + b for a, b in zip(root, below))), ("root", root), ("below", below)):
            for figure, value in zip(FIGURES, values):
                self.peak[scope][figure] = max(self.peak[scope][figure], value)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def stop(self) -> None:
        """Take a last sample (a short run may end between two) and stop sampling."""
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join()
            self.sample()


class Run:
    """One command in its own process group, its memory sampled; `lines` reads its merged output as it comes."""

    def __init__(self, command: list[str], env: Optional[dict] = None, cwd: Path = REPO, log_path: Optional[Path] = None):
        self.command = command
        self.started = time.perf_counter()
        # Its own session, so that killing it reaches every process it started (torchrun's ranks).
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                                        cwd=cwd, env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
                                        start_new_session=True)
        self.memory = TreeMemory(self.process.pid)
        self.tail: deque[str] = deque(maxlen=40)
        self.log = open(log_path, "w") if log_path else None
        self.hard_kill: Optional[threading.Timer] = None

    def lines(self):
        """(seconds since the start, line) as the command prints them."""
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.tail.append(line.rstrip("\n"))
            if self.log:
                self.log.write(line)
            yield time.perf_counter() - self.started, line

    def signal(self, number: int) -> None:
        try:
            os.killpg(self.process.pid, number)
        except ProcessLookupError:
            pass  # it has ended

    def kill(self) -> None:
        """SIGTERM to its process group, SIGKILL 30 s later if it is still there; `finish` then reads what is left."""
        self.signal(signal.SIGTERM)
        self.hard_kill = threading.Timer(30, self.signal, (signal.SIGKILL,))
        self.hard_kill.start()

    def finish(self) -> tuple[int, float]:
        """Exit status and wall seconds, once it has ended."""
        for _ in self.lines():  # whatever it still prints
            pass
        status = self.process.wait()
        seconds = time.perf_counter() - self.started
        if self.hard_kill:
            self.hard_kill.cancel()
        self.memory.stop()
        if self.log:
            self.log.close()
        return status, seconds

    def failure(self, what: str) -> str:
        return f"{what} failed: {' '.join(self.command)}\n" + "\n".join(self.tail)


def mib(kib: int) -> float:
    return kib / 1024


def until_step(run: Run, pattern: re.Pattern, steps: int, timeout: float) -> tuple[Optional[float], Optional[float]]:
    """Seconds to the first logged update and to update `steps`, reading `run`'s output; kills it at `steps`."""
    timer = threading.Timer(timeout, run.kill)  # a run that never reaches `steps` must still end
    timer.start()
    first = last = None
    try:
        for seconds, line in run.lines():
            match = pattern.search(line)
            if not match:
                continue
            step = int(match.group(1))
            if first is None and step >= 1:
                first = seconds
            if step >= steps:
                last = seconds
                run.memory.stop()  # the peaks are those of training, not of its being stopped
                run.kill()
                break
    finally:
        timer.cancel()
    return first, last


# ---------------------------------------------------------------------------------------- runs

class Report:
    """Figures as `name value unit` lines, printed as they come and kept for --out."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(self, name: str, value, unit: str) -> None:
        text = f"{value:.3f}" if isinstance(value, float) and abs(value) < 100 else \
            f"{value:.0f}" if isinstance(value, float) else str(value)
        self.say(f"{name} {text} {unit}")

    def say(self, line: str) -> None:
        print(line, flush=True)
        self.lines.append(line)


def progress(message: str) -> None:
    print(f"[data_scale] {message}", file=sys.stderr, flush=True)


ATTNMT_STEP = re.compile(r"\bstep (\d+) \(")
ONMT_STEP = re.compile(r"\bStep (\d+)/")


def add_memory(report: Report, name: str, peak: dict[str, int]) -> None:
    report.add(f"{name}_peak_anon", mib(peak["anon"]), "MiB")
    report.add(f"{name}_peak_rss", mib(peak["rss"]), "MiB")
    report.add(f"{name}_peak_pss_anon", mib(peak["pss_anon"]), "MiB")


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def attnmt_prepare(args: argparse.Namespace, report: Report, overrides: list[str], env: dict, logs: Path) -> bool:
    progress("attnmt prepare")
    run = Run([sys.executable, "-m", "attnmt", "prepare", args.config, *overrides], env=env,
              log_path=logs / "attnmt_prepare.log")
    status, seconds = run.finish()
    if status != 0:
        report.say(f"# attnmt prepare exited {status}; the training figures below include preparing the data")
        progress(run.failure("attnmt prepare"))
        return False
    report.add("attnmt_prepare_wall", seconds, "s")
    report.add("attnmt_prepare_pairs_per_s", args.pairs / seconds, "pairs/s")
    add_memory(report, "attnmt_prepare", run.memory.peak["tree"])
    report.add("attnmt_prepared_size", folder_bytes(Path(env["ATTNMT_CACHE"])) / MIB, "MiB")
    return True


def attnmt_train(args: argparse.Namespace, report: Report, overrides: list[str], env: dict, ranks: int,
                 logs: Path) -> Optional[int]:
    """Time to the first update and peak memory of `ranks` training processes; their summed peak RssAnon (KiB)."""
    progress(f"attnmt train on {ranks} rank(s) to step {args.steps}")
    with tempfile.TemporaryDirectory(prefix="data_scale_train_") as out:
        start = [str(Path(sys.executable).with_name("torchrun")), "--standalone", f"--nproc_per_node={ranks}"] \
            if ranks > 1 else [sys.executable]
        run = Run([*start, "-m", "attnmt", "train", args.config, *overrides, "train.log_every=1", f"train.out_dir={out}",
                   "--overwrite"], env=env, log_path=logs / f"attnmt_train_{ranks}rank.log")
        first, last = until_step(run, ATTNMT_STEP, args.steps, args.timeout)
        status, _ = run.finish()
    name = f"attnmt_train_{ranks}rank"
    if last is None:
        report.say(f"# {name}: no step {args.steps} (exit {status})")
        progress(run.failure(f"attnmt train on {ranks} rank(s)"))
        return None
    # Under torchrun the ranks are the launcher's children; alone, the training process is the root.
    peak = run.memory.peak["below" if ranks > 1 else "tree"]
    report.add(f"{name}_first_update", first, "s")
    report.add(f"{name}_step{args.steps}", last, "s")
    add_memory(report, name, peak)
    if ranks > 1:
        report.add(f"{name}_launcher_peak_anon", mib(run.memory.peak["root"]["anon"]), "MiB")
    return peak["anon"]


def drop_spaced_tokens(vocab: Path) -> int:
    """Drop the entries of an onmt_build_vocab file that onmt_train cannot read back; how many there were.

    build_vocab splits the text on " " alone, so a word may hold a no-break space; onmt_train reads
    the file back with str.split(), which splits there too, and stops on the count it cannot parse.
    """
    lines = vocab.read_text(encoding="utf-8").split("\n")
    kept = [line for line in lines if len(line.split()) == 2 or not line]
    vocab.write_text("\n".join(kept), encoding="utf-8")
    return len(lines) - len(kept)


def onmt(args: argparse.Namespace, report: Report, logs: Path) -> None:
    venv = Path(args.peers_root) / "onmt-venv" / "bin"
    if not (venv / "onmt_train").exists():
        report.say(f"# OpenNMT-py left out: no {venv / 'onmt_train'} (bash ../shared/bench/peers/setup_peers.sh)")
        return
    report.say("# OpenNMT-py 3.5.1: whitespace-word tokens, src_vocab_size = tgt_vocab_size = 8000 (its BPE needs a subword "
               "model trained beforehand); the peers' Transformer, 4096-token batches")
    # The peers' harness runs OpenNMT-py so: 2 threads, no GPU, its pickled checkpoints allowed.
    env = {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2", "CUDA_VISIBLE_DEVICES": "", "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}
    with tempfile.TemporaryDirectory(prefix="data_scale_onmt_") as out:
        config = Path(out) / "config.yaml"
        config.write_text(ONMT_TEMPLATE.read_text().replace("@DATA@", str(args.dir)).replace("@OUT@", out)
                          .replace("@STEPS@", str(args.steps)))
        progress("onmt_build_vocab")
        run = Run([str(venv / "onmt_build_vocab"), "-config", str(config), "-n_sample", "-1"], env=env,
                  log_path=logs / "onmt_build_vocab.log")
        status, seconds = run.finish()
        if status != 0:
            report.say(f"# onmt_build_vocab exited {status}")
            progress(run.failure("onmt_build_vocab"))
            return
        report.add("onmt_build_vocab_wall", seconds, "s")
        report.add("onmt_build_vocab_pairs_per_s", args.pairs / seconds, "pairs/s")
        add_memory(report, "onmt_build_vocab", run.memory.peak["tree"])
        dropped = sum(drop_spaced_tokens(Path(out) / f"vocab.{side}") for side in ("src", "tgt"))
        if dropped:
            report.say(f"# OpenNMT-py: {dropped} vocabulary entries holding a non-ASCII space (Tatoeba's U+00A0, U+202F) "
                       "left out, as its vocabulary reader cannot parse them")
        progress(f"onmt_train to step {args.steps}")
        run = Run([str(venv / "onmt_train"), "-config", str(config), "-report_every", "1"], env=env,
                  log_path=logs / "onmt_train.log")
        first, last = until_step(run, ONMT_STEP, args.steps, args.timeout)
        status, _ = run.finish()
    if last is None:
        report.say(f"# onmt_train: no step {args.steps} (exit {status})")
        progress(run.failure("onmt_train"))
        return
    report.add("onmt_train_first_update", first, "s")
    report.add(f"onmt_train_step{args.steps}", last, "s")
    add_memory(report, "onmt_train", run.memory.peak["tree"])


def machine(report: Report) -> None:
    flags = sorted(set(re.findall(r"\b(avx512_bf16|amx_bf16|avx512f|avx2)\b", Path("/proc/cpuinfo").read_text())))
    version = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                             text=True).stdout.strip()
    report.say(f"# cpu flags: {' '.join(flags) or 'none of avx2 avx512f avx512_bf16 amx_bf16'}; {os.cpu_count()} cores")
    report.say(f"# torch {version}; {datetime.datetime.now().isoformat(timespec='seconds')}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, required=True, help="training pairs of the synthetic corpus")
    parser.add_argument("--dir", type=Path, required=True, help="where the corpus is (or is built)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the corpus (default: %(default)s)")
    parser.add_argument("--max-join", type=int, default=3,
                        help="Tatoeba pairs per synthetic pair: 1 to this (default: %(default)s)")
    parser.add_argument("--build-only", action="store_true", help="build the corpus, measure nothing")
    parser.add_argument("--config", default="configs/multi30k_de_en_transformer.yaml",
                        help="attnmt config (default: %(default)s)")
    parser.add_argument("--ranks", default="1,2", help="attnmt training on these numbers of processes (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=30, help="updates before a training run is stopped (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds before a training run is stopped anyway")
    parser.add_argument("--no-peer", action="store_true", help="leave OpenNMT-py out")
    parser.add_argument("--no-attnmt", action="store_true", help="leave attnmt out (only the corpus and OpenNMT-py)")
    parser.add_argument("--peers-root", default=os.environ.get("PEERS_ROOT", str(Path.home() / ".cache" / "attnmt-peers")),
                        help="where setup_peers.sh put the venvs (default: $PEERS_ROOT or %(default)s)")
    parser.add_argument("--out", help="also append the figures to this file")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="more attnmt config overrides")
    args = parser.parse_args()
    if args.pairs < 1 or args.max_join < 1 or args.steps < 1:
        parser.error("--pairs, --max-join and --steps count from 1")
    if not TATOEBA.exists():
        sys.exit(f"data_scale: needs {TATOEBA} (the shared data beside the repository)")
    args.dir = args.dir.resolve()
    args.config = str(Path(args.config).resolve() if Path(args.config).exists() else REPO / args.config)
    report = Report()

    progress(f"corpus of {args.pairs:,} pairs in {args.dir}")
    built = build_corpus(args.dir, args.pairs, args.seed, args.max_join, progress)
    report.add("corpus_pairs", args.pairs, "pairs")
    if built:
        report.add("corpus_build", built["seconds"], "s")
        report.add("corpus_words_de_mean", built["words_de"], "words")
        report.add("corpus_words_en_mean", built["words_en"], "words")
        report.add("corpus_size", built["bytes"] / MIB, "MiB")
    if not args.build_only:
        logs = args.dir / "logs"
        logs.mkdir(exist_ok=True)
        if not args.no_attnmt:
            overrides = [f"data.path={args.dir}", "tokenizer.level=bpe", *args.overrides]
            report.say(f"# attnmt: {Path(args.config).name} {' '.join(overrides)}")
            # A cache of its own, emptied first: prepare finds a store made before by the same data and
            # settings, and would time that look-up instead of the work.
            cache = args.dir / "attnmt_cache"
            shutil.rmtree(cache, ignore_errors=True)
            env = {"ATTNMT_CACHE": str(cache)}
            attnmt_prepare(args, report, overrides, env, logs)
            anon = {ranks: attnmt_train(args, report, overrides, env, ranks, logs) for ranks in map(int, args.ranks.split(","))}
            for ranks, value in anon.items():
                if ranks > 1 and value and anon.get(1):
                    report.add(f"attnmt_train_anon_{ranks}rank_over_1rank", value / anon[1], "x")
            shutil.rmtree(cache, ignore_errors=True)
        if not args.no_peer:
            onmt(args, report, logs)
        progress(f"the runs' output is in {logs}")
    machine(report)
    if args.out:
        with open(args.out, "a") as handle:
            handle.write("\n".join(report.lines) + "\n")


if __name__ == "__main__":
    main()
