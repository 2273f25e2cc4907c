"""``aiofiles.ospath`` (``aiofiles.os.path``): :mod:`blockio.ospath`."""

from os import path  # noqa: F401 (aiofiles.ospath has it too)

from blockio.os import wrap  # noqa: F401
from blockio.ospath import *  # noqa: F401,F403
from blockio.ospath import __all__  # noqa: F401
