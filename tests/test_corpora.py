"""Corpus downloads, against a local HTTP server on 127.0.0.1 that serves generated dates or ../shared/data."""

import functools
import gzip
import hashlib
import http.server
import shutil
import threading
import zipfile
from pathlib import Path
from typing import Iterator, NamedTuple

import pytest
from conftest import write_dates_files, write_dates_tsv

from attnmt import AttnmtError
from attnmt.config import DataConfig
from attnmt.corpus import corpora
from attnmt.corpus.readers import load_corpus, read_tsv


class Handler(http.server.SimpleHTTPRequestHandler):
    requests: list[str] = []
    cut_off: set[str] = set()  # paths answered with a Content-Length larger than the body

    def log_message(self, *args):
        pass

    def do_GET(self):
        Handler.requests.append(self.path)
        name = self.path.rsplit("/", 1)[-1]
        if name in Handler.cut_off:
            body = (Path(self.directory) / name).read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.connection.close()
            return
        super().do_GET()


class Served(NamedTuple):
    root: Path                         # the folder the server serves
    multi30k: tuple[int, int, int]     # its Multi30k's train, val and test pairs
    tatoeba: int                       # the pairs of its deu.txt


@pytest.fixture(params=["dates", "shared"])
def server(request, tmp_path, monkeypatch) -> Iterator[Served]:
    """Serves multi30k's six files and a deu-eng.zip: generated dates (their sha256 in place of the
    pinned ones), or the files of ../shared/data (which skips without it)."""
    root = tmp_path / "www"
    if request.param == "dates":
        sizes = {"train": 300, "val": 20, "test_2016_flickr": 30}
        write_dates_files(root, sizes, gz=True)
        assert sorted(p.name for p in root.iterdir()) == sorted(corpora.MULTI30K_FILES)
        monkeypatch.setattr(corpora, "MULTI30K_FILES", {name: hashlib.sha256((root / name).read_bytes()).hexdigest()
                                                        for name in corpora.MULTI30K_FILES})
        tatoeba = len(write_dates_tsv(tmp_path / "deu.txt", 3200))
        with zipfile.ZipFile(root / "deu-eng.zip", "w") as zipped:
            zipped.write(tmp_path / "deu.txt", "deu.txt")
            zipped.writestr("_about.txt", "generated dates\n")
        served = Served(root, tuple(sizes.values()), tatoeba)
    else:
        shared_data = request.getfixturevalue("shared_data")
        root.mkdir()
        for name in corpora.MULTI30K_FILES:
            shutil.copy(shared_data / "multi30k" / name, root / name)
        with zipfile.ZipFile(root / "deu-eng.zip", "w") as zipped:
            zipped.writestr("deu.txt", gzip.decompress((shared_data / "tatoeba_deu_eng" / "deu.txt.gz").read_bytes()))
            zipped.write(shared_data / "tatoeba_deu_eng" / "_about.txt", "_about.txt")
        served = Served(root, (29000, 1014, 1000), 169813)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(root)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    monkeypatch.setattr(corpora, "MULTI30K_URL", base + "/{name}")
    monkeypatch.setattr(corpora, "TATOEBA_URL", base + "/{lang}-eng.zip")
    monkeypatch.setenv("ATTNMT_CACHE", str(tmp_path / "cache"))
    Handler.requests, Handler.cut_off = [], set()
    yield served
    httpd.shutdown()


def test_multi30k_is_downloaded_verified_and_reused(server, tmp_path):
    directory = corpora.resolve("multi30k")
    assert directory == tmp_path / "cache" / "multi30k"
    for name in corpora.MULTI30K_FILES:
        assert (directory / name).read_bytes() == (server.root / name).read_bytes()
    assert len(Handler.requests) == 6
    corpora.resolve("multi30k")
    assert len(Handler.requests) == 6  # the cache is used, nothing fetched again
    corpus = load_corpus(DataConfig(format="parallel", path="multi30k", src_lang="de", tgt_lang="en"))
    assert (len(corpus.train), len(corpus.valid), len(corpus.test)) == server.multi30k


@pytest.mark.parametrize("settings, error", [
    ({"path": "multi30k", "format": "tsv"}, "data.path: multi30k is read with data.format=parallel, not tsv"),
    ({"path": "multi30k", "format": "parallel", "src_lang": "fr"}, "data.src_lang: multi30k has de and en, not 'fr'"),
    ({"path": "tatoeba:deu", "format": "parallel"}, "data.path: tatoeba:deu is read with data.format=tsv, not parallel"),
])
def test_settings_that_cannot_read_a_known_corpus_are_refused_before_its_download(server, tmp_path, settings, error):
    with pytest.raises(AttnmtError) as refused:
        load_corpus(DataConfig(**{"src_lang": "de", "tgt_lang": "en", **settings}))
    assert str(refused.value).startswith(error)
    assert Handler.requests == [] and not (tmp_path / "cache").exists()      # nothing fetched


def test_wrong_checksum_is_not_kept(server, tmp_path):
    (server.root / "val.en.gz").write_bytes(gzip.compress(b"tampered\n"))
    with pytest.raises(AttnmtError, match="val.en.gz: downloaded file does not match its sha256"):
        corpora.resolve("multi30k")
    assert not (tmp_path / "cache" / "multi30k" / "val.en.gz").exists()


def test_interrupted_download_leaves_no_file(server, tmp_path):
    Handler.cut_off = {"train.en.gz"}
    with pytest.raises(AttnmtError, match="train.en.gz") as err:
        corpora.resolve("multi30k")
    assert "by hand" in str(err.value)
    cached = tmp_path / "cache" / "multi30k"
    assert not (cached / "train.en.gz").exists()
    assert not [p for p in cached.iterdir() if p.name.startswith(".")]  # no temporary file either
    Handler.cut_off = set()
    assert (corpora.resolve("multi30k") / "train.en.gz").exists()  # a later try completes


def test_unreachable_host_says_what_to_fetch_and_where(monkeypatch, tmp_path):
    monkeypatch.setattr(corpora, "MULTI30K_URL", "http://127.0.0.1:9/{name}")  # the discard port: refused
    monkeypatch.setenv("ATTNMT_CACHE", str(tmp_path))
    with pytest.raises(AttnmtError) as err:
        corpora.resolve("multi30k")
    message = str(err.value)
    assert "http://127.0.0.1:9/train.de.gz" in message and str(tmp_path / "multi30k" / "train.de.gz") in message


def test_tatoeba_zip_is_unpacked(server, tmp_path):
    path = corpora.resolve("tatoeba:deu")
    assert path == tmp_path / "cache" / "tatoeba" / "deu.txt"
    assert len(read_tsv(path)) == server.tatoeba
    corpus = load_corpus(DataConfig(format="tsv", path="tatoeba:deu", src_lang="de", tgt_lang="en",
                                    max_pairs=3000, valid_size=100, test_size=100))
    assert len(corpus.train) == 2800


def test_unknown_corpus_name(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNMT_CACHE", str(tmp_path))
    with pytest.raises(AttnmtError, match="unknown corpus"):
        corpora.resolve("tatoeba:../etc")


def test_local_paths_win_over_names(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("multi30k").mkdir()
    with pytest.raises(AttnmtError, match="multi30k/train.de"):  # read as a directory, not downloaded
        load_corpus(DataConfig(format="parallel", path="multi30k"))
