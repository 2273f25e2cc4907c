"""``aiofiles.os``: :mod:`blockio.os`, whose calls and arguments
(``loop=``, ``executor=``) are aiofiles'; ``aiofiles.os.path`` is
:mod:`aiofiles.ospath`, as in aiofiles."""

import os  # noqa: F401 (as aiofiles' ``aiofiles.os.os``)

from blockio.os import *  # noqa: F401,F403
from blockio.os import __all__, wrap  # noqa: F401

from . import ospath as path  # noqa: F401
