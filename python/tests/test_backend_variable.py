"""``BLOCKIO_BACKEND`` takes the same three values in Python as in Rust
(``uring``, ``threads``, ``auto``; unset or empty is ``auto``), and any
other value is an error naming the variable and the values it takes."""

import pytest

import blockio
from blockio import _loop


@pytest.mark.parametrize(
    "value, loop_backend",
    [("uring", "io_uring"), (" threads\n", "epoll"), ("auto", "auto"), ("", "auto")],
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
