"""``seek`` past the largest file offset (2**63 - 1) is refused at the
seek, with the built-in's exception (naming the offset where it is not
the kernel's ``EINVAL``), and the position does not move (as the built-in
file refuses it), rather than failing a later call.
(An offset below it that the file system refuses is the file system's
``OSError``, as for the built-in: test_file_compat.py.)"""

import asyncio

import pytest

import blockio

LARGEST = (1 << 63) - 1


@pytest.mark.parametrize("buffering", [-1, 0])
@pytest.mark.parametrize("target", [1 << 63, 1 << 64, (1 << 65) + 5])
def test_seek_past_the_largest_offset_is_refused(tmp_path, buffering, target):
    """A seek past the largest offset raises the built-in's exception (an
    offset that is no 64-bit file offset: the buffered file's
    ``ValueError``, FileIO's ``OverflowError``; a position computed past it
    from ``SEEK_CUR``: ``OSError(EINVAL)``) and leaves the position."""
    p = tmp_path / "s.bin"
    p.write_bytes(b"0123456789")
    with open(p, "r+b", buffering=buffering) as f:
        f.read(3)
        with pytest.raises(Exception) as absolute:
            f.seek(target)
        f.seek(1 << 40)
        with pytest.raises(Exception) as relative:
            f.seek(target - (1 << 40), 1)

    async def main():
        async with blockio.open(p, "r+b", buffering=buffering) as f:
            assert await f.read(3) == b"012"
            with pytest.raises(type(absolute.value), match="offset"):
                await f.seek(target)
            assert await f.tell() == 3
            assert await f.seek(1 << 40) == 1 << 40  # (every file system here takes 1 TiB)
            with pytest.raises(type(relative.value)) as got:
                await f.seek(target - (1 << 40), 1)
            assert getattr(got.value, "errno", None) == getattr(relative.value, "errno", None)
            assert await f.tell() == 1 << 40
            assert await f.seek(4) == 4
            assert await f.read(2) == b"45"

    asyncio.run(main())
