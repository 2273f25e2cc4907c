"""A pytest plugin (``-p acc_custom_server``) for aiohttp-client-cache's
suite: its tests reach a second test server (the Flask app in its
``test/server``) at the fixed address ``http://localhost:8181/``
(``test.conftest.httpbin_custom``), where httpbin's has an environment
variable (``HTTPBIN_URL``). This points them at ``HTTPBIN_CUSTOM_URL``,
where the runner serves that app on a port it chose free.
"""

import os
import sys


def pytest_collection_modifyitems(session, config, items):
    # (their conftest, imported by pytest as a module of their ``test`` package)
    fixed = sys.modules["test.conftest"].httpbin_custom
    base = os.environ["HTTPBIN_CUSTOM_URL"]

    def httpbin_custom(path=""):
        return base + path

    # (the test modules import the function by name)
    for module in list(sys.modules.values()):
        if getattr(module, "httpbin_custom", None) is fixed:
            module.httpbin_custom = httpbin_custom
