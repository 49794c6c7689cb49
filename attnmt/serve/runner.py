"""serve(): the app on a socket, with uvicorn, until SIGTERM or SIGINT stops it; SIGHUP reads the key file again."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import ipaddress
import signal
import socket
import sys
import threading
from types import FrameType
from typing import Any, Callable, Optional

import uvicorn

from ..config import ServeConfig, validate_serve
from ..errors import AttnmtError
from ..translate import TextTranslator
from .access import KeyFile
from .app import create_app
from .models import ModelSet


def logging_config(access_log: bool) -> dict[str, Any]:
    """uvicorn's logging: its warnings and errors on stderr; with `access_log`, its access log on stdout,
    one line a request with the client's address and port, the request line and the status."""
    config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    config["loggers"]["uvicorn"]["level"] = config["loggers"]["uvicorn.error"]["level"] = "WARNING"
    if not access_log:
        config["loggers"]["uvicorn.access"]["handlers"] = []
    return config


# How often the server renews the Date header it sends, as uvicorn does (every tenth 0.1 s look).
DATE_EVERY_S = 1.0


class Server(uvicorn.Server):
    """uvicorn's server, whose main loop sleeps until a stop wakes it, where uvicorn's looks at
    should_exit every 0.1 s: a SIGTERM or SIGINT begins the shutdown at once."""

    def __init__(self, config: uvicorn.Config):
        super().__init__(config)
        self.stopping = asyncio.Event()
        self.loop: Optional[asyncio.AbstractEventLoop] = None   # the loop main_loop runs in, while it runs

    async def main_loop(self) -> None:
        self.loop = asyncio.get_running_loop()
        # on_tick(0) renews the Date header and says whether to stop (uvicorn: each 10th of its ticks).
        while not await self.on_tick(0):
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), DATE_EVERY_S)

    def handle_exit(self, sig: int, frame: Optional[FrameType]) -> None:
        super().handle_exit(sig, frame)
        # A signal handler runs between two steps of the loop, which may sleep in select(): wake it.
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.stopping.set)


def announced(models: TextTranslator | ModelSet, log: Callable[[str], None]) -> ModelSet:
    """The models as a ModelSet, their notes logged (ModelSet.notes); one translator, loaded by the
    caller, says its lines here (a ModelSet's models said theirs as they loaded)."""
    if not isinstance(models, ModelSet):
        models = ModelSet.one(models, "the model")
        for line in models.first.lines()[1:]:
            log(f"attnmt serve: {line}")
    for line in models.notes():
        log(f"attnmt serve: {line}")
    return models


def listening(host: str, port: int, keys: Optional[KeyFile]) -> socket.socket:
    """A socket bound to host:port and listening: from then on connections wait for uvicorn instead
    of being refused. Warns on stderr where it is open to others without keys."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except (OSError, OverflowError) as err:
        sock.close()
        raise AttnmtError(f"cannot listen on {host}:{port}: {getattr(err, 'strerror', None) or err}") from None
    bound = ipaddress.ip_address(sock.getsockname()[0])
    if keys is None and not bound.is_loopback:
        print(f"attnmt: warning: listening on {host} without --api-keys: the server is open to anyone who can "
              f"reach it", file=sys.stderr, flush=True)
    return sock


def serve(models: TextTranslator | ModelSet, host: str, port: int, limits: ServeConfig,
          log: Callable[[str], None] = print, keys: Optional[KeyFile] = None, access_log: bool = True) -> None:
    """Serve one translator or a set of models until SIGTERM or SIGINT: the requests in flight are
    answered, the log's last line says the server stopped, then serve() returns (SIGTERM) or raises
    KeyboardInterrupt (SIGINT). The log says the address it listens on; port 0 picks a free port. With
    `keys`, translating needs a key; SIGHUP reads the key file again. With `access_log`, each request
    is logged on stdout (uvicorn's access log). A ModelSet's models said their lines as they loaded
    (load_models); the address is the last line before the requests'."""
    validate_serve(limits)
    models = announced(models, log)
    app = create_app(models, limits, keys)
    sock = listening(host, port, keys)
    # Idle connections stay open longer than clients keep them (httpx: 5 s), so the client is the one
    # that closes them: otherwise a request sent as the server closes its connection fails.
    # uvicorn's proxy_headers (on) takes the client address from X-Forwarded-For when the connection
    # comes from FORWARDED_ALLOW_IPS (127.0.0.1 unless set): a reverse proxy's clients get their own rates.
    # log_level None: uvicorn keeps the levels of logging_config (warnings, and the access log's lines).
    server = Server(uvicorn.Config(app, log_config=logging_config(access_log), log_level=None,
                                   access_log=access_log, timeout_keep_alive=75))
    stopped_by: list[str] = []                                        # the signal that stopped it, for the log

    def stop(signum: int, frame: Optional[FrameType]) -> None:
        stopped_by.append(signal.Signals(signum).name)
        server.handle_exit(signum, frame)

    # uvicorn stops on SIGTERM or SIGINT once the requests in flight are answered, then raises the
    # signal again for the handler it found (attnmt's CLI: exit 143 for SIGTERM, as for a killed
    # training run). A SIGTERM is the end of serving, not a failure: with this handler found, serve()
    # returns; a SIGINT ends as Ctrl-C does (KeyboardInterrupt). It is set before the address is
    # logged, so that a signal sent on reading it stops the server the same way (a SIGINT there
    # would otherwise interrupt uvicorn before its loop starts).
    # uvicorn handles SIGINT and SIGTERM, not SIGHUP, which reads the key file again.
    handlers: dict[int, Callable[[int, Any], None]] = {signal.SIGTERM: stop, signal.SIGINT: stop}
    if keys is not None and hasattr(signal, "SIGHUP"):
        handlers[signal.SIGHUP] = lambda _signum, _frame: keys.reload()
    # Only the main thread may set a handler.
    main_thread = threading.current_thread() is threading.main_thread()
    previous = {signum: signal.signal(signum, handler) for signum, handler in handlers.items()} if main_thread else {}
    try:
        shown = f"[{host}]" if ":" in host else host
        what = models.first.path if len(models.models) == 1 else f"{len(models.models)} models"
        log(f"attnmt serve: {what} on http://{shown}:{sock.getsockname()[1]}/ (Ctrl-C stops)")
        if keys is not None:
            log(f"attnmt serve: API keys read from {keys.path}: {len(keys.keys)}; translating needs one")
        try:
            server.run(sockets=[sock])
        except KeyboardInterrupt:  # a SIGINT that reached no handler of ours (serve() outside the main thread)
            stopped_by.append("SIGINT")
    finally:
        for signum, handler in previous.items():
            if handler is not None:  # None: not set by Python
                signal.signal(signum, handler)
    log(f"attnmt serve: stopped ({stopped_by[0]})" if stopped_by else "attnmt serve: stopped")
    if stopped_by[:1] == ["SIGINT"]:
        raise KeyboardInterrupt  # Ctrl-C ends as Ctrl-C: the CLI says it was interrupted (exit 130)

