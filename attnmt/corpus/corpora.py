"""Known corpora by name, downloaded once into a cache and verified.

`data.path` may name a corpus instead of a local file or directory:
    multi30k         WMT16 multimodal task 1 raw text (train, val, test_2016_flickr; de, en)
    tatoeba:<lang>   manythings.org Tatoeba pairs, English and <lang> (e.g. tatoeba:deu)
Files go to $ATTNMT_CACHE (default ~/.cache/attnmt). A download is written to a temporary
name and renamed only when complete and, where the file is fixed, its sha256 matches, so an
interrupted download never leaves a file that looks whole.
"""

from __future__ import annotations

import hashlib
import http.client
import io
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

from ..errors import AttnmtError
from ..files import atomic_write, cache_dir

# Pinned to a commit of https://github.com/multi30k/dataset, so the files never change.
MULTI30K_URL = ("https://raw.githubusercontent.com/multi30k/dataset/"
                "a3d2e0d26b56f3846f66a952536ffed4e401d05a/data/task1/raw/{name}")
MULTI30K_FILES = {
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
}
# manythings.org updates these zips from time to time, so there is no fixed checksum.
TATOEBA_URL = "https://www.manythings.org/anki/{lang}-eng.zip"
TIMEOUT_S = 60


def is_corpus_name(path: str) -> bool:
    return path == "multi30k" or path.startswith("tatoeba:")


# The data.format each known corpus is read with, and the languages it has (None: any it is named for).
CORPUS_FORMATS = {"multi30k": ("parallel", ("de", "en")), "tatoeba": ("tsv", None)}


def check_settings(name: str, data_format: str, languages: tuple[str, str]) -> None:
    """Refuse, before anything is downloaded, settings that cannot read the corpus `name`."""
    fits, known = CORPUS_FORMATS[name.split(":")[0]]
    if data_format != fits:
        raise AttnmtError(f"data.path: {name} is read with data.format={fits}, not {data_format}: set data.format={fits}")
    for key, language in zip(("data.src_lang", "data.tgt_lang"), languages):
        if known is not None and language not in known:
            raise AttnmtError(f"{key}: {name} has {' and '.join(known)}, not {language!r}")


def resolve(name: str) -> Path:
    """The local path of a known corpus, downloading what the cache lacks."""
    if name == "multi30k":
        directory = cache_dir() / "multi30k"
        for file, sha256 in MULTI30K_FILES.items():
            target = directory / file
            if not target.exists():
                _store(download(MULTI30K_URL.format(name=file), target), target, sha256)
        return directory
    if name.startswith("tatoeba:") and name[len("tatoeba:"):].isalpha():
        lang = name[len("tatoeba:"):]
        target = cache_dir() / "tatoeba" / f"{lang}.txt"
        if not target.exists():
            url = TATOEBA_URL.format(lang=lang)
            archive = download(url, target)
            try:
                with zipfile.ZipFile(io.BytesIO(archive)) as zipped:
                    text = zipped.read(f"{lang}.txt")
            except (zipfile.BadZipFile, KeyError) as err:
                raise AttnmtError(f"{url}: not the expected zip with {lang}.txt ({err}); "
                                  f"put {lang}.txt from it at {target}") from None
            _store(text, target, None)
        return target
    raise AttnmtError(f"unknown corpus {name!r}; known: multi30k, tatoeba:<lang> (e.g. tatoeba:deu)")


def download(url: str, target: Path) -> bytes:
    """The bytes at `url`; on failure, say what to fetch by hand and where to put it."""
    request = urllib.request.Request(url, headers={"User-Agent": "attnmt (corpus download)"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            data = response.read()
            expected = response.headers.get("Content-Length")
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as err:
        raise AttnmtError(f"cannot download {url} ({getattr(err, 'reason', err)}); fetch it by hand and put it "
                          f"at {target}") from None
    if expected is not None and len(data) != int(expected):
        raise AttnmtError(f"download of {url} was cut off ({len(data)} of {expected} bytes); try again, or fetch "
                          f"it by hand and put it at {target}")
    return data


def _store(data: bytes, target: Path, sha256: str | None) -> None:
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
        raise AttnmtError(f"{target.name}: downloaded file does not match its sha256 {sha256}; not kept")
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(target, data)
