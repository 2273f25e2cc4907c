# DEFECT: calls served from a file's own buffer (read, peek, write) count one unit of
# TURN_BUDGET whatever they copy, so far more than the documented 4 MiB is copied
# between two turns of the loop.  Counts loop turns, no timings.
import asyncio, os
import blockio

P = "/tmp/hostile-turns/rb.bin"
open(P, "wb").write(os.urandom(64 << 20)); open(P, "rb").read()
BUF = 256 << 10
N = 256
for i in range(N):
    q = f"/tmp/hostile-turns/rb{i}.bin"
    open(q, "wb").write(os.urandom(BUF)); open(q, "rb").read()

ticks = 0
async def ticker(stop):
    global ticks
    while not stop: ticks += 1; await asyncio.sleep(0)

def most_between_turns(samples):   # samples: (ticks seen after the call, bytes it moved)
    best = cur = 0; last = None
    for t, n in samples:
        cur = n if t != last else cur + n; last = t; best = max(best, cur)
    return best / 2**20

async def main():
    stop = []; tt = asyncio.ensure_future(ticker(stop)); await asyncio.sleep(0)

    # 1. 256 files with a 256 KiB buffer each (one engine), read in turn from their buffers
    files = [await blockio.open(f"/tmp/hostile-turns/rb{i}.bin", "rb", buffering=BUF) for i in range(N)]
    for f in files: await f.read(1)                      # fills each buffer
    s = []
    for f in files: c = await f.read(BUF - 1); s.append((ticks, len(c)))
    print(f"256 x read(256 KiB - 1) from 256 KiB buffers: {most_between_turns(s):.1f} MiB copied between two turns")
    for f in files: await f.close()

    # 2. one file, buffering=64 MiB, read(1 MiB) in a loop
    async with blockio.open(P, "rb", buffering=64 << 20) as f:
        s = []
        while c := await f.read(1 << 20): s.append((ticks, len(c)))
    print(f"read(1 MiB) with buffering=64 MiB: {most_between_turns(s):.1f} MiB copied between two turns")

    # 3. peek() on a 16 MiB buffer (each copies the rest of it)
    async with blockio.open(P, "rb", buffering=16 << 20) as f:
        await f.read(1); s = []
        for _ in range(200): p = await f.peek(); s.append((ticks, len(p)))
    print(f"200 x peek() of a 16 MiB buffer: {most_between_turns(s):.1f} MiB copied between two turns")

    # 4. write(1 MiB) into a 64 MiB write buffer
    async with blockio.open("/tmp/hostile-turns/rb.out", "wb", buffering=64 << 20) as f:
        s = []; chunk = os.urandom(1 << 20)
        for _ in range(128): s.append((ticks, await f.write(chunk)))
    print(f"write(1 MiB) with buffering=64 MiB: {most_between_turns(s):.1f} MiB copied between two turns")
    stop.append(1); await tt
    print("documented: a turn at least once in every 4 MiB copied (TURN_BUDGET 256 x TURN_UNIT 16 KiB)")

asyncio.run(main())
