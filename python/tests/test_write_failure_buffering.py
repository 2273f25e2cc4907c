"""Buffered writes past ``RLIMIT_FSIZE`` (``EFBIG``) as the built-in
buffered file makes them: which write raises, which returns its count with
its bytes kept in the buffer, where ``tell()`` is, and whether ``close()``
raises, call for call, for the default buffer size (the built-in's: the
file system's preferred I/O size) and for given ones. Each case runs in a
child process, whose file size limit is its own."""

import json
import os
import subprocess
import sys

import pytest

BACKENDS = pytest.mark.parametrize("backend", ["uring", "threads"])

_CHILD = r"""
import asyncio, json, os, resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, resource.RLIM_INFINITY))
impl, path, mode, buffering, chunks = json.loads(sys.argv[1])
chunks = [c.encode() if "b" in mode else c for c in chunks]
kw = {} if "b" in mode else {"encoding": "utf-8"}

async def call(step):
    try:
        return await step()
    except OSError as e:
        return "errno %d" % e.errno

async def main(opn):
    log = []
    f = await opn(path, mode, buffering=buffering, **kw)
    for c in chunks:
        log.append(await call(lambda: f.write(c)))
    log.append(await call(f.tell))
    log.append(await call(f.close) or "closed")
    return log

if impl == "builtin":
    async def opn(*a, **k):
        f = open(*a, **k)
        class F:
            async def write(self, b): return f.write(b)
            async def tell(self): return f.tell()
            async def close(self): return f.close()
        return F()
else:
    import blockio
    opn = blockio.open
log = asyncio.run(main(opn))
log.append(os.path.getsize(path))
print(json.dumps(log))
"""


#: The built-in's logs, by case: the same on either backend.
_BUILTIN = {}


def _run(tmp_path, impl, mode, buffering, chunks, backend):
    if impl == "builtin":
        key = (mode, buffering, tuple(chunks))
        if key not in _BUILTIN:
            _BUILTIN[key] = _run_child(tmp_path, impl, mode, buffering, chunks, backend)
        return _BUILTIN[key]
    return _run_child(tmp_path, impl, mode, buffering, chunks, backend)


def _run_child(tmp_path, impl, mode, buffering, chunks, backend):
    path = str(tmp_path / impl)
    env = dict(os.environ, BLOCKIO_BACKEND=backend)
    out = subprocess.run([sys.executable, "-c", _CHILD, json.dumps([impl, path, mode, buffering, chunks])],
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


BIG = ["a" * 30_000, "b" * 30_000, "c" * 30_000, "d" * 30_000, "e" * 5000]
SMALL = ["x" * 1000] * 103
#: A write too long for the buffer stopped short with less than a buffer's
#: worth left: kept in the buffer, it succeeds, and close raises.
CUT = ["a" * 96_000, "b" * 6000]


@BACKENDS
@pytest.mark.parametrize("mode, buffering, chunks", [
    ("wb", -1, BIG),  # (a 5,000-byte write past the default buffer's room: written through, it fails)
    ("wb", -1, SMALL),
    ("wb", 100_000, BIG),  # (a write that fits the emptied buffer is kept there: close raises)
    ("w+b", 4096, BIG),
    ("wb", -1, CUT),
])
def test_binary_writes_past_the_size_limit_as_the_builtin(tmp_path, backend, mode, buffering, chunks):
    want = _run(tmp_path, "builtin", mode, buffering, chunks, backend)
    assert _run(tmp_path, "blockio", mode, buffering, chunks, backend) == want


@BACKENDS
@pytest.mark.parametrize("buffering", [100_000])
@pytest.mark.parametrize("chunks", [BIG, SMALL], ids=["30k", "1k"])
def test_text_writes_past_the_size_limit_as_the_builtin(tmp_path, backend, buffering, chunks):
    want = _run(tmp_path, "builtin", "w", buffering, chunks, backend)
    assert _run(tmp_path, "blockio", "w", buffering, chunks, backend) == want


@BACKENDS
def test_text_close_after_a_failed_write_closes_as_the_builtin(tmp_path, backend):
    # (which text write raises may differ: the built-in text file holds up
    # to 8 KiB of encoded text before its buffered file sees it)
    want = _run(tmp_path, "builtin", "w", -1, BIG, backend)
    got = _run(tmp_path, "blockio", "w", -1, BIG, backend)
    assert got[-2:] == want[-2:] == ["closed", 100_000]
