"""Load check of `attnmt serve`: N concurrent clients on 127.0.0.1 for T seconds.

    python bench/load.py --clients 50 --seconds 60                     # trains the demo model first
    python bench/load.py --model attnmt-demo/model.safetensors --clients 50 --seconds 60

Starts the server in a subprocess, then each client posts one generated date at a time (with the
attention matrix, as the explorer page asks) and posts again as soon as the answer comes. Prints
`metric=<name> value=<number>` lines: requests per second, latency percentiles, errors (any answer
other than 200, or none), the server's peak resident memory, and its mean resident memory in the
first and the last third of the run (flat memory: the two are close).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from attnmt.dates import generate_dates
from attnmt.demo import run_demo

MEMORY_SAMPLE_S = 0.25


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


async def client(seed: int, http: httpx.AsyncClient, url: str, sentences: list[str], body: dict, stop_at: float,
                 latencies: list[float], errors: list[str]) -> None:
    rng = random.Random(seed)
    while time.monotonic() < stop_at:
        started = time.monotonic()
        try:
            response = await http.post(url, json={**body, "text": rng.choice(sentences)})
            if response.status_code != 200:
                errors.append(f"{response.status_code} {response.text[:200]}")
        except httpx.HTTPError as err:
            errors.append(f"{type(err).__name__}: {err}")
        latencies.append(time.monotonic() - started)


async def sample_memory(pid: int, stop_at: float, samples: list[tuple[float, int]]) -> None:
    while time.monotonic() < stop_at:
        samples.append((time.monotonic(), rss_kib(pid)))
        await asyncio.sleep(MEMORY_SAMPLE_S)


async def run_load(base: str, pid: int, clients: int, seconds: float, body: dict) -> None:
    sentences = [source for source, _ in generate_dates(2000, seed=7)]
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(limits=limits, timeout=120) as http:
        for sentence in sentences[:20]:  # warm-up, not counted
            (await http.post(base + "translate", json={**body, "text": sentence})).raise_for_status()
        latencies: list[float] = []
        errors: list[str] = []
        memory: list[tuple[float, int]] = []
        started, cpu_started = time.monotonic(), cpu_seconds(pid)
        stop_at = started + seconds
        await asyncio.gather(sample_memory(pid, stop_at, memory),
                             *(client(seed, http, base + "translate", sentences, body, stop_at, latencies, errors)
                               for seed in range(clients)))
        elapsed, server_cpu = time.monotonic() - started, cpu_seconds(pid) - cpu_started
        health = (await http.get(base + "health")).json()
    latencies.sort()
    third = seconds / 3
    first = [kib for t, kib in memory if t < started + third]
    last = [kib for t, kib in memory if t >= stop_at - third]
    print(f"metric=clients value={clients}")
    print(f"metric=seconds value={elapsed:.1f}")
    print(f"metric=requests value={len(latencies)}")
    print(f"metric=requests_per_s value={len(latencies) / elapsed:.1f}")
    print(f"metric=latency_p50_ms value={1000 * latencies[len(latencies) // 2]:.1f}")
    print(f"metric=latency_p99_ms value={1000 * latencies[int(len(latencies) * 0.99)]:.1f}")
    print(f"metric=latency_max_ms value={1000 * latencies[-1]:.1f}")
    print(f"metric=errors value={len(errors)}")
    print(f"metric=server_cpu_ms_per_request value={1000 * server_cpu / len(latencies):.2f}")
    print(f"metric=model_calls value={health['model_calls']}")
    print(f"metric=sentences_per_model_call value={health['sentences'] / health['model_calls']:.1f}")
    print(f"metric=server_rss_peak_mib value={max(kib for _, kib in memory) / 1024:.1f}")
    print(f"metric=server_rss_first_third_mib value={statistics.mean(first) / 1024:.1f}")
    print(f"metric=server_rss_last_third_mib value={statistics.mean(last) / 1024:.1f}")
    for error in sorted(set(errors))[:5]:
        print(f"error: {error}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="model file (default: train the demo model into a temporary directory)")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--beam", type=int, default=1)
    parser.add_argument("--no-attention", action="store_true", help="do not ask for the attention matrix")
    parser.add_argument("serve_args", nargs="*", help="more `attnmt serve` flags, after --")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or str(run_demo(tmp, log=lambda line: print(line, file=sys.stderr))["model"])
        server = subprocess.Popen([sys.executable, "-m", "attnmt", "serve", model, "--port", "0", *args.serve_args],
                                  stdout=subprocess.PIPE, text=True)
        try:
            line = server.stdout.readline()
            url = re.search(r"http://\S+/", line)
            if url is None:
                sys.exit(f"the server did not start: {line}")
            print(f"server: {line.strip()} pid={server.pid}", file=sys.stderr)
            body = {"beam": args.beam, "attention": not args.no_attention}
            asyncio.run(run_load(url.group(), server.pid, args.clients, args.seconds, body))
        finally:
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
