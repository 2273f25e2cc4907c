"""Descriptor numbers in tests. A new descriptor takes the lowest free
number, and another thread (or another test's garbage) may free a lower
one at any moment: a test that needs a file on a given number puts it
there with dup2 (``move_to``), and tells files apart by inode
(``names``), never by which number a new descriptor got."""

import os


def names(fd, inode):
    """Whether descriptor ``fd`` is open on the file with inode ``inode``
    (False once it is closed, or names another file)."""
    try:
        return os.fstat(fd).st_ino == inode
    except OSError:
        return False


def move_to(fd, number):
    """Moves descriptor ``fd`` to ``number`` (dup2, then ``fd`` closed;
    what ``number`` held is closed by the dup2) and returns ``number``."""
    if fd != number:
        os.dup2(fd, number)
        os.close(fd)
    return number
