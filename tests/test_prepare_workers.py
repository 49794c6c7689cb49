"""Preparing never hangs (issue 59): a tokenizing worker that dies, an error raised in one, SIGTERM
or Ctrl-C while the workers run each end `attnmt prepare` and `attnmt train` with one line, no
worker process left and no store half-written.

Each test runs the command in a subprocess whose ChunkEncoder is replaced by `Planted` (a module
written beside the test data and put on the path, so that the workers import it too): it prints
each worker's process id, and at a planted line either raises an error or says so and blocks,
reading a FIFO nobody writes to, until the test has done what it does to it. The tests wait on
those lines, never on the clock; the timeout of `finish` only turns a hang into a failure."""

from __future__ import annotations

import ctypes
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import write_dates_files
from test_prepare import config_for, left_in, small_corpus

from attnmt import threads
from attnmt.configfile import config_from_dict
from attnmt.corpus.prepare import prepare_corpus

PLANTED = textwrap.dedent(r'''
    import os
    import signal

    from attnmt.corpus import prepare
    from attnmt.errors import AttnmtError


    class Planted(prepare.ChunkEncoder):
        def __init__(self, *args):
            handlers = [signal.getsignal(n) for n in (signal.SIGTERM, signal.SIGINT)]
            said = " ".join("default" if h == signal.SIG_DFL else "ignored" if h == signal.SIG_IGN else "handler"
                            for h in handlers)
            os.write(2, f"worker {os.getpid()} {said}\n".encode())  # one write: workers share the pipe
            if os.environ["PLANTED"] == "fail-start":
                raise AttnmtError("planted: this worker cannot start")
            super().__init__(*args)

        def __call__(self, chunk):
            planted = {int(n) for n in os.environ["PLANTED_LINE"].split(",")}
            for line in planted.intersection(chunk.lines):
                if os.environ["PLANTED"] == "raise":
                    raise AttnmtError(f"{chunk.names[0]}:{line}: planted problem")
                if os.environ["PLANTED"] == "block":
                    os.write(2, f"blocked {os.getpid()}\n".encode())
                    with open(os.environ["PLANTED_FIFO"]) as fifo:  # nobody writes: blocks
                        fifo.read()
            return super().__call__(chunk)
''')

# The command with chunks of 50 pairs (400 training pairs: 8 chunks) and the planted encoder.
# Ctrl-C's handler is set, as an interactive shell leaves it: a shell running pytest in the
# background starts it with SIGINT ignored, which its children would inherit. A thread that only
# waits stands beside the main one, as tqdm's monitor and torch's threads do in a real run.
RUN = ("import signal, sys, threading; signal.signal(signal.SIGINT, signal.default_int_handler); "
       "threading.Thread(target=threading.Event().wait, daemon=True).start(); "
       "sys.path.insert(0, sys.argv[1]); import planted; from attnmt.corpus import prepare; "
       "prepare.CHUNK_PAIRS = 50; prepare.ChunkEncoder = planted.Planted; from attnmt.cli import main; "
       "sys.exit(main(sys.argv[2:]))")
LINE = 120  # in the third chunk, so that the workers have already given chunks back
NEXT_LINE = 170  # in the fourth, the second worker's once the first holds the third


def start(tmp_path: Path, command: str, plan: str, lines: tuple[int, ...] = (LINE,)) -> subprocess.Popen:
    (tmp_path / "planted.py").write_text(PLANTED)
    fifo = tmp_path / "fifo"
    if not fifo.exists():
        os.mkfifo(fifo)
    data = tmp_path / "data"
    write_dates_files(data, {"train": 400, "val": 20, "test_2016_flickr": 20})
    config = tmp_path / "config.yaml"
    config.write_text(f"data: {{format: parallel, path: {data}, prepared_dir: {tmp_path / 'prepared'}, workers: 2}}\n"
                      f"tokenizer: {{level: word}}\n"
                      f"model: {{arch: rnn, emb_dim: 8, enc_hidden: 8, dec_hidden: 8}}\n"
                      f"train: {{out_dir: {tmp_path / 'run'}, epochs: 1, threads: 1}}\n")
    env = {**os.environ, "PLANTED": plan, "PLANTED_LINE": ",".join(map(str, lines)), "PLANTED_FIFO": str(fifo),
           "PYTHONIOENCODING": "utf-8", "PYTHONFAULTHANDLER": "1"}  # a hang's stacks: `finish`
    return subprocess.Popen([sys.executable, "-c", RUN, str(tmp_path), command, str(config)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)


def read_until(process: subprocess.Popen, prefix: str, count: int = 1) -> tuple[str, list[str]]:
    """The first stderr line that starts with `prefix`, once `count` have and both workers have
    said they started, and every line read."""
    assert process.stderr is not None
    lines: list[str] = []
    for line in process.stderr:
        lines.append(line)
        found = [line for line in lines if line.startswith(prefix)]
        if len(found) >= count and sum(line.startswith("worker ") for line in lines) == 2:
            return found[0], lines
    process.wait()
    raise AssertionError(f"the command ended (status {process.returncode}) before printing {prefix!r}:\n" + "".join(lines))


def finish(process: subprocess.Popen, tmp_path: Path, read: list[str]) -> tuple[int, list[str]]:
    """Its exit status and its stderr lines but the planted ones, once it has ended (a hang fails);
    checks that no worker is left and that no store or part of one is."""
    try:
        _, rest = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("preparing hung:\n" + hung(process, read))
    lines = read + rest.splitlines(keepends=True)
    workers = [int(line.split()[1]) for line in lines if line.startswith("worker ")]
    assert workers, "the workers ran"
    assert not [pid for pid in workers if alive(pid)], "a worker process is left"
    assert not left_in(tmp_path / "prepared"), "a store or part of one is left"
    said = [line.rstrip("\n") for line in lines if not line.startswith(("worker ", "blocked "))]
    return process.returncode, said


def hung(process: subprocess.Popen, read: list[str]) -> str:
    """What each process of the hung command was waiting in (the kernel's word for it), then its
    stderr with every thread's Python stack (faulthandler's, on SIGABRT); all of it is killed."""
    pids = [process.pid] + [int(line.split()[1]) for line in read if line.startswith("worker ")]
    waits = [f"{'command' if pid == process.pid else 'worker'} {pid}: {state(pid)}" for pid in pids]
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGABRT)
    try:
        _, rest = process.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        rest = "(its stderr stayed open)"
    os.killpg(process.pid, signal.SIGKILL)
    return "\n".join(waits) + "\n" + "".join(read) + rest


def state(pid: int) -> str:
    """A process's state and what each of its threads waits in, from /proc."""
    try:
        threads = sorted(Path(f"/proc/{pid}/task").iterdir())
        return ", ".join(f"{thread_state(pid, int(t.name))} {(t / 'wchan').read_text() or '-'}" for t in threads)
    except (FileNotFoundError, ProcessLookupError):
        return "gone"


def alive(pid: int) -> bool:
    try:
        return thread_state(pid, pid) not in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.mark.parametrize("command", ["prepare", "train"])
def test_a_worker_killed_ends_the_run_with_one_line(tmp_path, command):
    process = start(tmp_path, command, "block")
    line, read = read_until(process, "blocked ")
    os.kill(int(line.split()[1]), signal.SIGKILL)  # as the kernel's OOM killer does
    status, said = finish(process, tmp_path, read)
    assert status == 2
    assert re.fullmatch(r"attnmt: error: preparing \S+: a tokenizing worker died \(killed by signal 9\b[^()]*\); "
                        r"nothing was kept", said[-1]), said
    assert not any("Traceback" in line for line in said), said


def test_an_error_raised_in_a_worker_is_its_one_line(tmp_path):
    process = start(tmp_path, "prepare", "raise")
    status, said = finish(process, tmp_path, [])
    assert status == 2
    assert said[-1] == f"attnmt: error: {tmp_path / 'data' / 'train.de'}:{LINE}: planted problem"
    assert not any("Traceback" in line for line in said), said


def test_a_worker_that_cannot_start_ends_the_run_with_its_one_line(tmp_path):
    process = start(tmp_path, "prepare", "fail-start")
    status, said = finish(process, tmp_path, [])
    assert status == 2
    assert said[-1] == "attnmt: error: planted: this worker cannot start"
    assert not any("Traceback" in line for line in said), said


@pytest.mark.parametrize(("signum", "group", "status", "last"), [
    (signal.SIGTERM, False, 128 + signal.SIGTERM, None),  # `kill PID`, `timeout`: the process alone
    (signal.SIGINT, True, 130, "attnmt: interrupted"),   # Ctrl-C: the terminal's whole process group
], ids=["SIGTERM", "SIGINT"])
def test_a_signal_while_workers_tokenize_ends_train_leaving_nothing(tmp_path, signum, group, status, last):
    process = start(tmp_path, "train", "block")
    _, read = read_until(process, "blocked ")
    if group:
        os.killpg(process.pid, signum)
    else:
        process.send_signal(signum)
    # The cause of issue 59's hang: forked workers ran this process's SIGTERM handler, which only
    # raises at the next bytecode, so a SIGTERM landing as a worker went to sleep on the pool's
    # queue lock was never acted on. Workers now keep the default (SIGTERM ends them) and ignore
    # Ctrl-C, which the main process answers.
    assert [line.split()[2:] for line in read if line.startswith("worker ")] == [["default", "ignored"]] * 2
    got, said = finish(process, tmp_path, read)
    assert got == status, said
    assert not any("Traceback" in line for line in said), said
    if last:
        assert said[-1] == last


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="signals one thread of another process (tgkill)")
def test_ctrl_c_received_by_another_thread_still_ends_train(tmp_path):
    # The kernel may hand a process's signal to any of its threads; Python runs the handler in the
    # main thread only, which a read blocked there never gives a chance (CI's hang, 2026-12-02).
    process = start(tmp_path, "train", "block", lines=(LINE, NEXT_LINE))
    _, read = read_until(process, "blocked ", count=2)
    # Both workers hold a chunk they never finish: the main thread's last step is to wait for the
    # first, asleep in the kernel. Signal another thread once it is.
    while thread_state(process.pid, process.pid) != "S":
        os.sched_yield()
    others = [int(t.name) for t in Path(f"/proc/{process.pid}/task").iterdir() if int(t.name) != process.pid]
    assert others, "the command runs a thread beside its main one"
    assert ctypes.CDLL(None, use_errno=True).tgkill(process.pid, others[0], signal.SIGINT) == 0
    status, said = finish(process, tmp_path, read)
    assert status == 130, said
    assert said[-1] == "attnmt: interrupted", said
    assert not any("Traceback" in line for line in said), said


def thread_state(pid: int, thread: int) -> str:
    """One thread's state letter (R running, S asleep, ...) from /proc."""
    return Path(f"/proc/{pid}/task/{thread}/stat").read_text().rsplit(")", 1)[1].split()[0]


# A worker that dies as it starts up, before it has read what it was given: `dying` is imported by
# unpickling `make` in the worker, and ends that process at once (the parent imported it first).
DYING = textwrap.dedent(r'''
    import multiprocessing
    import os

    if multiprocessing.current_process().name != "MainProcess":  # a worker, named as soon as it starts
        os.write(2, f"worker {os.getpid()} dying\n".encode())
        os._exit(3)


    def make(padding):
        return len
''')

# The encoder's maker holds a megabyte, as a real corpus's tokenizers do, so that it is larger than
# a pipe holds: Python's spawn, given it as the process's argument, waited for ever on a worker that
# died before reading it (the GPU check's hang, 2026-12-04).
DIE_STARTING = ("import functools, sys; sys.path.insert(0, sys.argv[1]); import dying; from attnmt.corpus import workers; "
                "from attnmt.errors import AttnmtError\n"
                "try:\n"
                "    list(workers.encoded_chunks(functools.partial(dying.make, b'x' * 2**20), iter(['a', 'b', 'c']), 2))\n"
                "except AttnmtError as err:\n"
                "    sys.exit(f'attnmt: error: {err}')\n")


def run_to_end(args: list[str], program: str = "") -> tuple[int, str, str]:
    """Its exit status, stdout and stderr once it has ended (a hang fails, with each process's wait);
    `program`, if any, is its standard input."""
    process = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONFAULTHANDLER": "1"}, start_new_session=True)
    try:
        out, err = process.communicate(program, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("preparing hung:\n" + hung(process, []))
    return process.returncode, out, err


def unguarded_program(tmp_path: Path) -> tuple[Path, str]:
    """400 training pairs, and a program without `if __name__ == "__main__":` that prepares them with
    2 workers in chunks of 50."""
    data = tmp_path / "data"
    write_dates_files(data, {"train": 400, "val": 20, "test_2016_flickr": 20})
    config = tmp_path / "config.yaml"
    config.write_text(f"data: {{format: parallel, path: {data}, prepared_dir: {tmp_path / 'prepared'}, workers: 2}}\n"
                      f"tokenizer: {{level: word}}\n")
    return data, ("import sys\nfrom attnmt.corpus import prepare\nprepare.CHUNK_PAIRS = 50\nfrom attnmt.cli import main\n"
                  f"sys.exit(main(['prepare', {str(config)!r}]))\n")


def test_a_worker_that_dies_starting_up_ends_the_run_with_one_line(tmp_path):
    (tmp_path / "dying.py").write_text(DYING)
    status, _, err = run_to_end([sys.executable, "-c", DIE_STARTING, str(tmp_path)])
    said = [line for line in err.splitlines() if not line.startswith("worker ")]
    assert status == 1, err
    assert said == ["attnmt: error: preparing the corpus: a tokenizing worker died (exit status 3); nothing was kept"], err


def test_a_program_read_from_stdin_prepares_in_its_own_process(tmp_path):
    # Spawned workers run the main program's file again, which a program read from stdin has not:
    # each died at once (exit status 1) and the run ended. Now the program's own process tokenizes.
    _, program = unguarded_program(tmp_path)
    status, out, err = run_to_end([sys.executable, "-"], program)
    assert status == 0, err
    assert "tokenizing in this process alone (not data.workers' 2): worker processes run the main program again, " \
           "and <stdin> is not a file" in out
    assert "400 of 400 read" in out and "1 workers" in out, out


def test_a_script_without_a_main_guard_ends_with_what_to_change(tmp_path):
    # Each spawned worker runs the script's file again: without `if __name__ == "__main__":` it
    # prepared once more in every worker, where it waited for ever for the lock its parent held.
    data, program = unguarded_program(tmp_path)
    script = tmp_path / "unguarded.py"
    script.write_text(program)
    status, _, err = run_to_end([sys.executable, str(script)])
    said = err.splitlines()
    assert status == 2, err
    assert said[-1] == f"attnmt: error: preparing {data}: a tokenizing worker died (exit status 1); nothing was kept"
    assert "attnmt: error: a tokenizing worker ran the program that started it, which prepares a corpus again: " \
           "put that program's work under `if __name__ == \"__main__\":`" in said, err
    assert not any("Traceback" in line for line in said), err
    assert not left_in(tmp_path / "prepared")


@pytest.mark.parametrize(("quota", "count"), [("200000 100000", 2), ("150000 100000", 2), ("50000 100000", 1),
                                              ("max 100000", 64), (None, 64)],
                         ids=["2 CPUs", "1.5 CPUs", "half a CPU", "no quota", "no cgroup v2"])
def test_the_worker_count_follows_a_containers_cpu_quota(tmp_path, monkeypatch, quota, count):
    """data.workers 0 in a container on a 64-core host: one worker per CPU its cgroup's quota (cpu.max)
    gives, as threads counts them, not one per core of the host."""
    cpu_max = tmp_path / "cpu.max"
    if quota is not None:
        cpu_max.write_text(f"{quota}\n")
    monkeypatch.setattr(threads, "CPU_QUOTA", cpu_max)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)))
    values = config_for(small_corpus(tmp_path / "data"), tmp_path, workers=0)  # one chunk: no process is started
    assert prepare_corpus(config_from_dict(values), log=lambda _: None).report["workers"] == count
