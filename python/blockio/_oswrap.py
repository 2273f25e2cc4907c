"""The ``wrap`` of :mod:`blockio.os` and :mod:`blockio.ospath`."""

from __future__ import annotations

import asyncio
import functools
from typing import Any, Callable, Optional, TypeVar

from ._aio import run_in_thread

T = TypeVar("T")


async def _run(func: Callable[..., T], args: Any, kwargs: Any, loop: Optional[asyncio.AbstractEventLoop],
               executor: Any) -> T:
    """``func(*args, **kwargs)`` on ``executor`` (the loop's default when
    None), awaited on ``loop`` (the running one when None)."""
    if loop is None and executor is None:
        return await run_in_thread(functools.partial(func, *args, **kwargs))
    if loop is None:
        loop = asyncio.get_running_loop()
    return await loop.run_in_executor(executor, functools.partial(func, *args, **kwargs))


def wrap(func: Callable[..., T]) -> Callable[..., Any]:
    """A coroutine function running ``func`` on a thread; it takes
    ``func``'s arguments, and ``loop=`` and ``executor=`` as aiofiles'
    ``wrap`` does."""

    @functools.wraps(func)
    async def run(*args: Any, loop: Optional[asyncio.AbstractEventLoop] = None, executor: Any = None,
                  **kwargs: Any) -> T:
        return await _run(func, args, kwargs, loop, executor)

    return run
