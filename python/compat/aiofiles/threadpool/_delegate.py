"""Methods of the classes in :mod:`aiofiles.threadpool` when they are
made around a synchronous file, as :func:`aiofiles.threadpool.wrap` makes
them (for a file given by a replaced ``sync_open``, as in tests that mock
the file): each named call runs the synchronous file's method on the
loop's executor, or calls it (or reads the attribute) directly."""

import functools
from typing import Any, Callable, TypeVar

C = TypeVar("C")


def _in_executor(name: str) -> Callable[..., Any]:
    async def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        call = functools.partial(getattr(self._file, name), *args, **kwargs)
        return await self._loop.run_in_executor(self._executor, call)

    method.__name__ = name
    method.__doc__ = f"The file's ``{name}``, run on the loop's executor."
    return method


def _direct(name: str) -> Callable[..., Any]:
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(self._file, name)(*args, **kwargs)

    method.__name__ = name
    method.__doc__ = f"The file's ``{name}``, called on the caller's thread."
    return method


def _attribute(name: str) -> property:
    return property(lambda self: getattr(self._file, name), doc=f"The file's ``{name}``.")


def delegate(in_executor: str = "", direct: str = "", attributes: str = "") -> Callable[[C], C]:
    """Gives the class the methods named in ``in_executor`` (awaitable),
    ``direct`` and the properties named in ``attributes`` (each a
    space-separated list), over its ``_file``. A name in both
    ``in_executor`` and ``direct`` is awaitable, as in aiofiles."""

    def build(cls: C) -> C:
        for name in attributes.split():
            setattr(cls, name, _attribute(name))
        for name in direct.split():
            setattr(cls, name, _direct(name))
        for name in in_executor.split():
            setattr(cls, name, _in_executor(name))
        return cls

    return build
