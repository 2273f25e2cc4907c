"""``aiofiles.os``: :mod:`blockio.os`, whose calls and arguments
(``loop=``, ``executor=``) are aiofiles'."""

from blockio.os import *  # noqa: F401,F403
from blockio.os import __all__, path, wrap  # noqa: F401
