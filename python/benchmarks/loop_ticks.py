#!/usr/bin/env python3
"""Loop ticks (10 ms sleeps) during an open that takes 1 s (a FIFO whose
writer comes after 1 s): blockio.open against aiofiles.open."""
import asyncio, os, sys, tempfile, threading
import aiofiles, blockio

async def measure(opener, fifo):
    ticks, stop = 0, False
    async def ticker():
        nonlocal ticks
        while not stop:
            ticks += 1
            await asyncio.sleep(0.01)
    t = asyncio.ensure_future(ticker())
    w = threading.Timer(1.0, lambda: os.close(os.open(fifo, os.O_WRONLY)))
    w.start()
    f = await opener(fifo, "rb")
    await f.close()
    stop = True
    await t
    w.join()
    return ticks

d = tempfile.mkdtemp()
fifo = os.path.join(d, "fifo"); os.mkfifo(fifo)
for name, op in (("blockio", blockio.open), ("aiofiles", aiofiles.open)) * 2:
    print(name, asyncio.run(measure(op, fifo)))
