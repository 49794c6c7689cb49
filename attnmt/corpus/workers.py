"""The worker processes that tokenize a corpus's chunks while prepare.py prepares it: how many
(`worker_count`), and the chunks sent through them and given back in order (`encoded_chunks`).

Each worker is a spawned process with its own pipe and holds at most one chunk, so that nothing
the workers share can be left locked, and whatever ends preparing ends them too. Three ways a
worker once hung the run at start-up are answered here: a worker that dies starting up (its
encoder now goes through its own pipe, not spawn's argument pipe), a main program read from
standard input (which a spawned worker cannot run again: one process tokenizes), and a script
without `if __name__ == "__main__":` (which each worker runs again: `refuse_in_a_starting_worker`).
The pool knows nothing of tokenizers: it calls what its encoder's maker makes on what it is given.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import pickle
import signal
import sys
import traceback
from multiprocessing.connection import Connection
from typing import Callable, Generic, Iterator, TypeVar

from ..errors import AttnmtError
from ..threads import usable_cpus

WORKER_NAME = "attnmt-prepare-worker"  # each tokenizing worker's process name, from its start
WAKE_SECONDS = 0.5    # how often the wait for a worker wakes, to act on a Ctrl-C another thread received

Chunk = TypeVar("Chunk")
Encoded = TypeVar("Encoded")


def worker_count(setting: int, log: Callable[[str], None]) -> int:
    """How many workers tokenize: data.workers' `setting`, 0 meaning one per CPU this process may use
    (threads.usable_cpus: its affinity, capped by a container's CPU quota); one, said in `log`,
    where the main program cannot be run again in a spawned worker."""
    workers = setting or usable_cpus()
    unspawnable = _unspawnable_main()
    if workers > 1 and unspawnable:
        log(f"tokenizing in this process alone (not data.workers' {workers}): worker processes run the main "
            f"program again, and {unspawnable} is not a file")
        return 1
    return workers


def refuse_in_a_starting_worker() -> None:
    """Ends a tokenizing worker that, starting up, runs the program that started it and reaches a corpus:
    Python's spawn runs the main program's file again in each new process, all but its
    `if __name__ == "__main__":` part, so a script without one would prepare again in every worker
    (waiting there for the lock its parent holds, for ever)."""
    if multiprocessing.current_process().name == WORKER_NAME:
        sys.exit("attnmt: error: a tokenizing worker ran the program that started it, which prepares a corpus "
                 "again: put that program's work under `if __name__ == \"__main__\":`")


def _unspawnable_main() -> str:
    """The main program's name where a spawned worker cannot run it again ('' where it can): Python's
    spawn runs the main program's file in each new process (but its `__main__` part), which a
    program read from standard input (`python - < script.py`) does not have."""
    main = sys.modules.get("__main__")
    if main is None or getattr(main, "__spec__", None) is not None:  # python -m: run again by its name
        return ""
    path = getattr(main, "__file__", None)  # None: python -c, the interactive prompt, notebooks
    return path if path is not None and not os.path.isfile(path) else ""


class WorkerError(Exception):
    """The traceback of an error raised in a tokenizing worker, set as the cause of the error the
    main process raises again (shown with --debug, or when the error is a bug)."""


def _worker(connection: Connection) -> None:
    """A tokenizing worker: makes its encoder from the first message (a function that makes it), then
    encodes the chunks it is sent, one at a time, until told to stop (None) or its connection closes.
    Ctrl-C reaches the whole process group: the main process decides, so the worker ignores it (it
    was started with SIGINT blocked, so none arrives before this)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    try:
        encoder = connection.recv()()
        while (chunk := connection.recv()) is not None:
            connection.send(("done", encoder(chunk)))
    except (EOFError, BrokenPipeError):  # the main process is gone or stopped listening
        return
    except BaseException as err:
        text = traceback.format_exc()
        try:
            pickle.loads(pickle.dumps(err))
        except Exception:  # an error that does not pickle travels as its type's name and its message
            err = RuntimeError(f"{type(err).__name__}: {err}")
        try:
            connection.send(("error", err, text))
        except OSError:
            pass


class Workers(Generic[Chunk, Encoded]):
    """`count` tokenizing processes, each with its own pipe and at most one chunk at a time, so that
    nothing they share can be left locked: a worker that dies is seen at once (its end of the pipe
    closes) and named with how it ended, an error it raises comes back as that error, and closing
    ends every worker, whatever ended preparation. They are spawned, not forked: a fresh
    interpreter inherits none of this process's threads' locks (torch's, tqdm's) nor its signal
    handlers. The encoder's maker (its tokenizers, often larger than a pipe holds) goes through the
    worker's own pipe once it has started, not as the process's argument: Python's spawn writes
    those into a pipe whose reading end this process keeps open until the write ends, so a worker
    that died starting up (out of memory, a main program it could not run again) left that write,
    and the run, waiting for ever."""

    def __init__(self, make_encoder: Callable[[], Callable[[Chunk], Encoded]], count: int, where: str) -> None:
        self.where = where
        self.processes: list[multiprocessing.process.BaseProcess] = []
        self.connections: list[Connection] = []
        context = multiprocessing.get_context("spawn")
        # Started with SIGINT blocked (a child inherits the mask): a Ctrl-C while a worker starts up
        # stays pending here and is discarded there, where _worker ignores it.
        masks = hasattr(signal, "pthread_sigmask")  # not on Windows
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}) if masks else set()
        try:
            for _ in range(count):
                mine, theirs = context.Pipe()
                process = context.Process(target=_worker, args=(theirs,), daemon=True, name=WORKER_NAME)
                self.processes.append(process)
                self.connections.append(mine)
                process.start()
                theirs.close()  # only the worker holds its end: its death closes the pipe
            for worker in range(count):  # once all have started, so that they start up side by side
                self.send(worker, make_encoder)
        except BaseException:
            self.close()
            raise
        finally:
            if masks:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def send(self, worker: int, message: object) -> None:
        try:
            self.connections[worker].send(message)
        except (BrokenPipeError, ConnectionResetError):
            if self.connections[worker].poll():  # it said why before it ended (an error in starting up)
                self.receive(worker)
            raise self._died(worker) from None

    def receive(self, worker: int) -> Encoded:
        """The result of the chunk `worker` holds; its error raised again here, its death as one line."""
        connection = self.connections[worker]
        # A signal the kernel hands to another thread of this process (tqdm's monitor, torch's) does
        # not interrupt a read blocked in this one, and Python runs its handler in this thread only,
        # between bytecodes: so the wait wakes now and then, and Ctrl-C or SIGTERM is acted on within
        # WAKE_SECONDS whichever thread received it.
        while not connection.poll(WAKE_SECONDS):
            pass
        try:
            answer = connection.recv()
        except (EOFError, ConnectionResetError):
            raise self._died(worker) from None
        if answer[0] == "done":
            return answer[1]
        _, err, text = answer
        if isinstance(err, AttnmtError):
            raise err from None
        raise err from WorkerError(text)

    def _died(self, worker: int) -> AttnmtError:
        process = self.processes[worker]
        process.join()
        code = process.exitcode
        how = (f"killed by signal {-code}" + (", out of memory? fewer data.workers need less" if code == -signal.SIGKILL
                                               else "") if code is not None and code < 0 else f"exit status {code}")
        return AttnmtError(f"preparing {self.where}: a tokenizing worker died ({how}); nothing was kept")

    def close(self) -> None:
        """End every worker: those idle are told to stop, then any still running is terminated."""
        for connection in self.connections:
            try:
                connection.send(None)
            except (OSError, ValueError):
                pass
        for process in self.processes:
            if process.is_alive() and process.pid is not None:
                process.terminate()  # SIGTERM: a worker has no handler of its own
        for process in self.processes:
            if process.pid is not None:
                process.join()
        for connection in self.connections:
            connection.close()


def encoded_chunks(make_encoder: Callable[[], Callable[[Chunk], Encoded]], chunks: Iterator[Chunk],
                   workers: int, where: str = "the corpus") -> Iterator[Encoded]:
    """The chunks encoded in order: a small corpus (one chunk) in this process, a larger one by
    `workers` processes (`Workers`), each holding one chunk while the next waits here, so memory
    stays bounded. Whatever stops the reading early (an error, Ctrl-C, SIGTERM, a worker that dies)
    ends the workers before it goes on."""
    first = next(chunks, None)
    if first is None:
        return
    second = next(chunks, None)
    if second is None or workers <= 1:
        encoder = make_encoder()
        yield encoder(first)
        if second is not None:
            yield encoder(second)
            yield from map(encoder, chunks)
        return
    pool: Workers[Chunk, Encoded] = Workers(make_encoder, workers, where)
    try:
        given = itertools.chain((first, second), chunks)
        held = 0  # chunk i is with worker i % workers; chunks 0 .. held - 1 are out
        for chunk in itertools.islice(given, workers):
            pool.send(held, chunk)
            held += 1
        waiting = next(given, None)  # read while the workers tokenize
        done = 0
        while done < held:
            worker = done % workers
            result = pool.receive(worker)
            if waiting is not None:
                pool.send(worker, waiting)
                held += 1
            done += 1
            yield result
            waiting = next(given, None) if waiting is not None else None
    finally:
        pool.close()
