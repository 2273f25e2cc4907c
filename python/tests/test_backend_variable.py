"""``BLOCKIO_BACKEND`` takes the same three values in Python as in Rust
(``uring``, ``threads``, ``auto``; unset or empty is ``auto``), and any
other value is an error naming the variable and the values it takes."""

import pytest

import blockio
from blockio import _loop


@pytest.mark.parametrize(
    "value, loop_backend",
    [("uring", "uring"), (" threads\n", "epoll"), ("auto", "auto"), ("", "auto")],
)
def test_each_accepted_value_chooses_its_backend(monkeypatch, value, loop_backend):
    monkeypatch.setenv("BLOCKIO_BACKEND", value)
    assert _loop._backend_choice() == loop_backend


@pytest.mark.parametrize("value", ["io_uring", "io-uring", "thread-pool", "threadpool", "epoll", "Threads"])
def test_any_other_value_is_an_error_naming_the_variable_and_the_values(monkeypatch, value):
    monkeypatch.setenv("BLOCKIO_BACKEND", value)
    with pytest.raises(ValueError) as caught:
        blockio.new_event_loop()
    msg = str(caught.value)
    assert f"BLOCKIO_BACKEND={value!r}" in msg
    assert msg.endswith("expected one of uring, threads, auto")


@pytest.mark.parametrize("value", ["io_uring", "io-uring", "thread-pool", "epoll", "Threads", ""])
def test_engine_backend_takes_the_variables_values_only(monkeypatch, value):
    """``Engine(backend=...)`` takes the values of ``BLOCKIO_BACKEND``
    (``uring``, ``threads``, ``auto``) and no other spelling: the
    ``ValueError`` names the argument, the value and the three."""
    monkeypatch.delenv("BLOCKIO_BACKEND", raising=False)
    with pytest.raises(ValueError) as caught:
        blockio.Engine(backend=value)
    msg = str(caught.value)
    assert f"backend={value!r}" in msg
    assert msg.endswith("expected one of uring, threads, auto")


def test_engine_backend_reports_the_variables_names(monkeypatch):
    monkeypatch.delenv("BLOCKIO_BACKEND", raising=False)
    for asked, expected in [("threads", "threads"), ("auto", None)]:
        e = blockio.Engine(backend=asked)
        try:
            assert e.backend in ("uring", "threads")
            if expected is not None:
                assert e.backend == expected
        finally:
            e.close()
