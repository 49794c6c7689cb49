"""The queue in front of a model: requests wait in it, and one model call answers a group of them."""

from __future__ import annotations

import asyncio
import contextlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np
import torch

from ..config import ServeConfig
from ..search import SearchSettings
from ..translate import TextTranslator, Translation
from .errors import ServeError


@dataclass
class _Job:
    texts: list[str]
    settings: SearchSettings
    future: asyncio.Future


def model_thread() -> ThreadPoolExecutor:
    """The one thread a server's model calls run on, every model's in turn: two at once would share
    the CPU's cores, each with its own team of intra-op threads, and both would run slower."""
    return ThreadPoolExecutor(1, thread_name_prefix="attnmt-model")


class Batcher:
    """Queued requests in, one model call per group of requests with the same search settings, on
    `executor` (model_thread(), which may be shared with other models' batchers)."""

    def __init__(self, translator: TextTranslator, limits: ServeConfig, executor: ThreadPoolExecutor):
        self.translator = translator
        self.limits = limits
        self.queue: asyncio.Queue[_Job] = asyncio.Queue(limits.queue_size)
        # One worker task, calling on one thread: the model is never called from two threads at once.
        self.executor = executor
        self.model_calls = 0
        self.sentences = 0
        self.task: Optional[asyncio.Task] = None

    def start(self) -> None:
        self.task = asyncio.create_task(self._work())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    async def translate(self, texts: list[str], settings: SearchSettings) -> list[list[Translation]]:
        if not texts:                                                # a request of empty texts: nothing to queue
            return []
        future = asyncio.get_running_loop().create_future()
        try:
            self.queue.put_nowait(_Job(texts, settings, future))
        except asyncio.QueueFull:
            raise ServeError(503, f"the server is busy: {self.limits.queue_size} requests are waiting; "
                                  "retry later") from None
        try:
            # On timeout the future is cancelled, so the worker skips the job if it has not started it.
            return await asyncio.wait_for(future, self.limits.timeout_s)
        except asyncio.TimeoutError:
            raise ServeError(504, f"the translation took longer than {self.limits.timeout_s:g} s") from None

    async def run(self, work: Callable[[], Any], what: str) -> Any:
        """`work()` on the model's thread, within the timeout."""
        future = asyncio.get_running_loop().run_in_executor(self.executor, work)
        try:
            return await asyncio.wait_for(future, self.limits.timeout_s)
        except asyncio.TimeoutError:
            raise ServeError(504, f"{what} took longer than {self.limits.timeout_s:g} s") from None

    async def maps(self, translations: list[Translation]) -> list[dict[str, np.ndarray]]:
        """Every attention map of each translation (none for an empty one), on the model's thread."""
        return await self.run(lambda: [self.translator.attention_maps(t) if t.tokens and t.source_tokens else {}
                                       for t in translations], "the attention maps")

    def _drain(self, jobs: list[_Job]) -> None:
        while sum(len(job.texts) for job in jobs) < self.limits.max_batch and not self.queue.empty():
            jobs.append(self.queue.get_nowait())

    async def _work(self) -> None:
        while True:
            jobs = [await self.queue.get()]
            self._drain(jobs)
            if self.queue.empty() and self.limits.batch_window_ms > 0:
                await asyncio.sleep(self.limits.batch_window_ms / 1000)  # let stragglers join this call
                self._drain(jobs)
            groups: dict[SearchSettings, list[_Job]] = {}
            for job in jobs:
                if not job.future.done():
                    groups.setdefault(job.settings, []).append(job)
            for settings, group in groups.items():
                await self._decode(group, settings)

    async def _decode(self, group: list[_Job], settings: SearchSettings) -> None:
        texts = [text for job in group for text in job.texts]
        loop = asyncio.get_running_loop()
        try:
            results = await loop.run_in_executor(self.executor, self._call_model, texts, settings)
        except Exception as err:  # a failed call fails its requests, not the server
            for job in group:
                if not job.future.done():
                    job.future.set_exception(err)
            return
        self.model_calls += 1
        self.sentences += len(texts)
        start = 0
        for job in group:
            if not job.future.done():
                job.future.set_result(results[start: start + len(job.texts)])
            start += len(job.texts)

    def _call_model(self, texts: list[str], settings: SearchSettings) -> list[list[Translation]]:
        with torch.inference_mode():
            return [nbest for chunk in self.translator.stream(texts, settings) for nbest in chunk]
