"""Runs tornado's own tests (``tornado.test.runtests.all()``, from the
unpacked sdist in the working directory) with ``loop_choice``'s loop as the
policy's, but for the tests whose ids follow the report's file name (or
only those, after ``--only``), and writes the report as
``websockets_main.py`` does. Tornado's ``IOLoop`` wraps the loop that
``asyncio.new_event_loop()`` makes, and drives its streams with
``add_reader``/``add_writer``.

Usage (cwd holds tornado's source tree, ``tornado`` with its ``test``
package)::

    LOOP_SUITES_LOOP=blockio LOOP_SUITES_MADE=made.json python tornado_main.py REPORT.json [TEST_ID...]
    ... python tornado_main.py REPORT.json --only TEST_ID...   (those tests alone)
"""

import json
import logging
import sys
import unittest
import warnings

import loop_choice
from websockets_main import Outcomes, tests


def main():
    loop_choice.install()
    # (as tornado.test.runtests.main sets them: warnings are errors but
    # for other projects' deprecations; no access log)
    warnings.filterwarnings("error")
    warnings.filterwarnings("ignore", category=ImportWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("error", category=DeprecationWarning, module=r"tornado\..*")
    warnings.filterwarnings("ignore", category=PendingDeprecationWarning)
    warnings.filterwarnings("error", category=PendingDeprecationWarning, module=r"tornado\..*")
    logging.getLogger("tornado.access").setLevel(logging.CRITICAL)
    import tornado.test.runtests

    only = sys.argv[2:3] == ["--only"]
    named = set(sys.argv[3:] if only else sys.argv[2:])
    loader = unittest.TestLoader()
    found = list(tests(loader.loadTestsFromNames(tornado.test.runtests.TEST_MODULES)))
    missing = named - {t.id() for t in found}
    if missing:
        sys.exit(f"tornado_main: no such test: {sorted(missing)}")
    suite = unittest.TestSuite(t for t in found if (t.id() in named) == only)
    result = unittest.TextTestRunner(resultclass=Outcomes, verbosity=0, warnings=None).run(suite)
    tracebacks = {t.id(): text for t, text in result.failures + result.errors}
    with open(sys.argv[1], "w") as f:
        json.dump({"outcomes": result.outcomes, "tracebacks": tracebacks, "collection_errors": loader.errors}, f)


if __name__ == "__main__":
    main()
