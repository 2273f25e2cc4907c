"""``aiofiles.threadpool.utils``: the class decorators that code written
for aiofiles uses to make its own wrappers of a synchronous file.

Each takes attribute names and gives the decorated class, whose instances
hold the synchronous file as ``_file``, the loop as ``_loop`` and the
executor as ``_executor`` (as the classes of :mod:`aiofiles.threadpool`
do when made around a synchronous file: :class:`aiofiles.base.OverFile`),
one member per name over that file:

* :func:`delegate_to_executor`: a coroutine method that runs the file's
  method with the call's arguments on ``_executor`` of ``_loop`` (the
  default executor when it is ``None``) and returns its result;
* :func:`cond_delegate_to_executor`: the same once the file has rolled
  over to disk (its ``_rolled``, as ``tempfile.SpooledTemporaryFile``'s),
  and before that a call of the file's method on the caller's thread; the
  method is a coroutine method either way;
* :func:`proxy_method_directly`: a method that calls the file's method on
  the caller's thread;
* :func:`proxy_property_directly`: a read-only property that is the
  file's attribute.

The file's attribute is looked up at each call, as aiofiles does."""

import functools
from typing import Any, Callable, TypeVar

from ._delegate import _attribute, _direct, _in_executor

__all__ = ["delegate_to_executor", "cond_delegate_to_executor", "proxy_method_directly", "proxy_property_directly"]

C = TypeVar("C")


def _giving(names: tuple, make: Callable[[str], Any]) -> Callable[[C], C]:
    """A class decorator setting ``make(name)`` on the class for each name."""

    def build(cls: C) -> C:
        for name in names:
            setattr(cls, name, make(name))
        return cls

    return build


def _when_rolled(name: str) -> Callable[..., Any]:
    in_executor = _in_executor(name)

    @functools.wraps(in_executor)
    async def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self._file._rolled:
            return await in_executor(self, *args, **kwargs)
        return getattr(self._file, name)(*args, **kwargs)

    method.__doc__ = f"The file's ``{name}``, run on the loop's executor once the file has rolled over to disk."
    return method


def delegate_to_executor(*names: str) -> Callable[[C], C]:
    """Gives the class a coroutine method per name, running the file's
    method of that name on the loop's executor."""
    return _giving(names, _in_executor)


def cond_delegate_to_executor(*names: str) -> Callable[[C], C]:
    """Gives the class a coroutine method per name, running the file's
    method of that name on the loop's executor once the file has rolled
    over to disk, and on the caller's thread before."""
    return _giving(names, _when_rolled)


def proxy_method_directly(*names: str) -> Callable[[C], C]:
    """Gives the class a method per name, calling the file's method of
    that name on the caller's thread."""
    return _giving(names, _direct)


def proxy_property_directly(*names: str) -> Callable[[C], C]:
    """Gives the class a read-only property per name, the file's
    attribute of that name."""
    return _giving(names, _attribute)
