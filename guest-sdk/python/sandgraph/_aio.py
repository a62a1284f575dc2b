"""Runs an `async def` node, router or reducer to completion inside the
host's call, on an event loop made for that call.

The loop runs ready callbacks in order; a timer (`asyncio.sleep(d)`, `call_later`)
due within the call is waited for with a blocking sleep (the wait counts
against the run's deadline). There is no I/O to select on: the SDK's
capability calls are synchronous host calls, so `asyncio.gather` over
several runs them one after another. What would outlive the call is
refused: a task or timer still pending when the coroutine returns fails the
call, and so does a coroutine that waits for something nothing will finish.
"""

import asyncio
import heapq
import inspect
import itertools
import time
from typing import Any, List


class NotFinished(RuntimeError):
    """An awaitable that cannot finish inside the call."""


class _Loop(asyncio.AbstractEventLoop):
    """A single-threaded loop with a ready queue and timers, no I/O."""

    def __init__(self) -> None:
        self._ready: List[asyncio.Handle] = []
        self._timers: List[Any] = []
        self._order = itertools.count()
        self._running = False
        self._closed = False
        self._exception: Any = None

    # -- what asyncio's tasks and futures use ------------------------------

    def call_soon(self, callback: Any, *args: Any, context: Any = None) -> asyncio.Handle:
        handle = asyncio.Handle(callback, args, self, context=context)
        self._ready.append(handle)
        return handle

    def call_later(self, delay: float, callback: Any, *args: Any, context: Any = None) -> Any:
        return self.call_at(self.time() + max(0.0, delay), callback, *args, context=context)

    def call_at(self, when: float, callback: Any, *args: Any, context: Any = None) -> Any:
        handle = asyncio.TimerHandle(when, callback, args, self, context=context)
        heapq.heappush(self._timers, (when, next(self._order), handle))
        return handle

    def _timer_handle_cancelled(self, handle: Any) -> None:
        pass

    def time(self) -> float:
        return time.monotonic()

    def create_future(self) -> asyncio.Future:
        return asyncio.Future(loop=self)

    def create_task(self, coro: Any, *, name: Any = None, context: Any = None) -> asyncio.Task:
        return asyncio.Task(coro, loop=self, name=name)

    def get_debug(self) -> bool:
        return False

    def is_running(self) -> bool:
        return self._running

    def is_closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        self._closed = True

    def call_exception_handler(self, context: dict) -> None:
        # An exception nobody retrieved (a failed task no one awaited): kept
        # to fail the call rather than be lost.
        if self._exception is None:
            self._exception = context.get("exception") or RuntimeError(context.get("message"))

    def default_exception_handler(self, context: dict) -> None:
        self.call_exception_handler(context)

    # -- running ------------------------------------------------------------

    def _step(self) -> bool:
        """Runs the ready callbacks, or sleeps until the next live timer;
        False when there is nothing left to do."""
        while self._timers and self._timers[0][2].cancelled():
            heapq.heappop(self._timers)
        if not self._ready:
            if not self._timers:
                return False
            wait = self._timers[0][0] - self.time()
            if wait > 0:
                time.sleep(wait)
            self._ready.append(heapq.heappop(self._timers)[2])
        ready, self._ready = self._ready, []
        for handle in ready:
            if not handle.cancelled():
                handle._run()
        return True

    def run(self, coro: Any) -> Any:
        """Runs `coro` to completion; refuses what outlives it."""
        asyncio.events._set_running_loop(self)
        self._running = True
        try:
            task = self.create_task(coro)
            while not task.done():
                if not self._step():
                    task.cancel()
                    while self._step():
                        pass
                    raise NotFinished(
                        "the coroutine awaits something that never finishes inside the call "
                        "(sandgraph runs a node to completion: no background I/O)"
                    )
            result = task.result()
            self._refuse_leftovers()
            if self._exception is not None:
                raise self._exception
            return result
        finally:
            self._running = False
            asyncio.events._set_running_loop(None)
            self._closed = True

    def _refuse_leftovers(self) -> None:
        pending = [t for t in asyncio.all_tasks(self) if not t.done()]
        timers = [t for _, _, t in self._timers if not t.cancelled()]
        for t in pending:
            t.cancel()
        while self._ready:
            self._step()
        if pending:
            names = ", ".join(sorted(t.get_name() for t in pending))
            raise NotFinished(
                f"{len(pending)} background task(s) were still pending when the coroutine "
                f"returned ({names}): await every task before returning (a node runs to "
                "completion inside the call)"
            )
        if timers:
            raise NotFinished(
                f"{len(timers)} timer(s) were still pending when the coroutine returned: a "
                "timer cannot outlive the call"
            )


def resolve(value: Any) -> Any:
    """`value`, or, when it is awaitable (an `async def` function's
    coroutine), what it returns, run on a loop made for this call."""
    if not inspect.isawaitable(value):
        return value
    if asyncio.events._get_running_loop() is not None:
        raise RuntimeError("an async node cannot run inside another running event loop")

    async def wrap() -> Any:
        return await value

    return _Loop().run(wrap())
