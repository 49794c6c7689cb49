"""Who may translate on `attnmt serve`, and how much: API keys from a file, per-caller rate limits.

Keys: one per line of a file, an optional name after a tab, blank lines and `#` comments allowed.
The file is read again when it changes (looked at no more often than once a second, when a key
is checked) and on `reload()` (SIGHUP); a file that has become bad is logged and the keys loaded
before stay. Keys are kept as SHA-256 digests and compared in constant time; the log names a key
by its name, or by the first 8 hex digits of its digest, never by the key.

Rate limits: a moving window in memory (`MovingWindow`), per key, or per client address on a
server without keys. They are checked before a request is queued for the batcher, so they fit it
as any other limit does: a refused request never reaches the queue.

Both read a clock the caller may give (`time.monotonic` by default): what they do over time can
be shown without waiting for it.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from ..config import ServeConfig
from ..errors import AttnmtError

# RFC 6750's b64token: what an `Authorization: Bearer` header can carry.
KEY_PATTERN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
MIN_KEY_CHARS = 16
# A changed key file is noticed within this many seconds, without a stat() per request.
CHECK_INTERVAL_S = 1.0

Clock = Callable[[], float]  # seconds, from any start; never going back


@dataclass(frozen=True)
class Caller:
    """Where a request's rate is counted (`bucket`) and how the log may name its sender (`name`)."""

    bucket: str
    name: str


class RateLimited(Exception):
    """Over a rate limit: answered with 429 and Retry-After."""

    def __init__(self, message: str, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after


def _digest(key: str) -> bytes:
    # surrogatepass: a key from a JSON body may hold a lone surrogate; it must not fail, only not match.
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


def read_keys(path: Path) -> dict[bytes, str]:
    """The keys of a key file as {SHA-256 digest: name}; a bad file raises naming the file and line."""
    try:
        lines = path.read_bytes().split(b"\n")
    except OSError as err:
        raise AttnmtError(f"{path}: cannot read the key file: {err.strerror or err}") from None
    keys: dict[bytes, str] = {}
    first_line: dict[bytes, int] = {}
    for number, raw in enumerate(lines, 1):
        try:
            line = raw.decode("utf-8").rstrip("\r")
        except UnicodeDecodeError:
            raise AttnmtError(f"{path} line {number}: not UTF-8 text") from None
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, _, name = line.partition("\t")
        key, name = key.strip(), name.strip()
        where = f"{path} line {number}"
        if not KEY_PATTERN.fullmatch(key):
            raise AttnmtError(f"{where}: a key is one word of letters, digits and - . _ ~ + / (and = at its end); "
                              f"its name, if any, follows it after a tab")
        if len(key) < MIN_KEY_CHARS:
            raise AttnmtError(f"{where}: the key has {len(key)} characters; use {MIN_KEY_CHARS} or more "
                              f"(python -c 'import secrets; print(secrets.token_urlsafe())' makes one)")
        if "\t" in name or not name.isprintable():
            raise AttnmtError(f"{where}: the name after the tab must be printable text without tabs")
        digest = _digest(key)
        if digest in keys:
            raise AttnmtError(f"{where}: the same key as line {first_line[digest]}")
        keys[digest], first_line[digest] = name or f"key {digest.hex()[:8]}", number
    if not keys:
        raise AttnmtError(f"{path}: no keys in the file (one key per line, an optional name after a tab)")
    return keys


class KeyFile:
    """The keys of a key file, read again when the file changes or on reload()."""

    def __init__(self, path: str, log: Callable[[str], None] = print, clock: Clock = time.monotonic):
        self.path = Path(path)
        self.log = log
        self.clock = clock
        self.stamp = self._stamp()  # taken before reading: a change during the read is seen next time
        self.keys = read_keys(self.path)
        self.checked = clock()

    def _stamp(self) -> Optional[tuple[int, int, int]]:
        try:
            stat = self.path.stat()
        except OSError:
            return None
        return stat.st_mtime_ns, stat.st_size, stat.st_ino

    def reload(self) -> None:
        """Read the file again; if it is bad now, say so in one line and keep the keys."""
        self.stamp = self._stamp()
        try:
            keys = read_keys(self.path)
        except AttnmtError as err:
            self.log(f"attnmt serve: keys not reloaded, the {len(self.keys)} loaded before stay: {err}")
            return
        self.keys = keys
        self.log(f"attnmt serve: API keys read from {self.path}: {len(keys)}")

    def _refresh(self) -> None:
        now = self.clock()
        if now - self.checked >= CHECK_INTERVAL_S:
            self.checked = now
            if self._stamp() != self.stamp:
                self.reload()

    def identify(self, presented: str) -> Optional[Caller]:
        """The caller that holds `presented`, or None. Every key is compared, in constant time, so
        the time taken says nothing of which key, or how much of one, was right."""
        self._refresh()
        digest = _digest(presented)
        found = None
        for known, name in self.keys.items():
            if hmac.compare_digest(known, digest):
                found = Caller(f"key {known.hex()}", name)
        return found


class MovingWindow:
    """At most `amount` units per `window_s` seconds for each bucket: units taken at time t count
    until t + window_s, so no moment of a reset lets a burst of twice the amount through."""

    def __init__(self, amount: int, window_s: float, clock: Clock = time.monotonic):
        self.amount, self.window_s, self.clock = amount, window_s, clock
        self.taken: dict[str, deque[tuple[float, int]]] = {}  # per bucket: (time, units), oldest first
        self.swept = clock()
        self.lock = threading.Lock()

    def take(self, bucket: str, units: int) -> Optional[float]:
        """Count `units` (at most `amount`) for `bucket` and return None; or, if they would go over,
        count nothing and return the seconds until the oldest units counted leave the window."""
        if units > self.amount:
            raise ValueError(f"{units} units can never fit in a window of {self.amount}")
        with self.lock:
            now = self.clock()
            left_before = now - self.window_s  # units taken then or earlier no longer count
            if now - self.swept >= self.window_s:  # once a window: forget the buckets that went quiet
                self.swept = now
                for quiet in [name for name, entries in self.taken.items() if entries[-1][0] <= left_before]:
                    del self.taken[quiet]
            entries = self.taken.setdefault(bucket, deque())
            while entries and entries[0][0] <= left_before:
                entries.popleft()
            if sum(count for _, count in entries) + units <= self.amount:
                entries.append((now, units))
                return None
            return entries[0][0] - left_before


class RateLimits:
    """Requests and sentences per caller over ServeConfig's moving window (rate_window_s)."""

    def __init__(self, config: ServeConfig, clock: Clock = time.monotonic):
        self.window_s = config.rate_window_s

        def window(per_minute: int) -> Optional[MovingWindow]:
            # validate_serve makes per_minute × window / 60 whole.
            amount = per_minute * config.rate_window_s // 60
            return MovingWindow(amount, config.rate_window_s, clock) if amount else None

        self.requests = window(config.requests_per_minute)
        self.sentences = window(config.sentences_per_minute)

    def take(self, window: Optional[MovingWindow], caller: Caller, cost: int, what: str) -> None:
        """Count `cost` against the caller's limit, or raise RateLimited if it would go over;
        a cost over what is left is refused whole, and counts nothing."""
        wait = window.take(caller.bucket, cost) if window is not None else None
        if window is None or wait is None:
            return
        # When the oldest counted entry leaves the window: the earliest a retry can pass (one with
        # many sentences may need to wait for more entries to leave, and is told again).
        retry_after = max(1, math.ceil(wait))
        raise RateLimited(f"over the limit of {window.amount} {what} per {self.window_s} s for {caller.name}; "
                          f"retry in {retry_after} s", retry_after)

    def request(self, caller: Caller) -> None:
        self.take(self.requests, caller, 1, "requests")

    def sentences_of(self, caller: Caller, count: int) -> None:
        self.take(self.sentences, caller, count, "sentences")
