# Each kind of call served without suspending, made exactly when its turn is due, is
# cancelled at that turn: nothing may move (position, buffer), and the next calls must
# give what the built-in open gives.
import asyncio, os, sys, random
import blockio
from blockio._blockio import TURN_BUDGET
P = "/tmp/hostile-turns/ct.bin"
rng = random.Random(1)
data = b"".join(rng.randbytes(rng.randrange(1, 120)) + b"\n" for _ in range(20000))
open(P, "wb").write(data); open(P, "rb").read()

CALLS = {
    "read(100)": lambda f: f.read(100),
    "read(300000)": lambda f: f.read(300000),
    "readline()": lambda f: f.readline(),
    "readline(5)": lambda f: f.readline(5),
    "peek(1)": lambda f: f.peek(1),
    "tell()": lambda f: f.tell(),
    "readlines(500)": lambda f: f.readlines(500),
    "readinto(100)": lambda f: f.readinto(bytearray(100)),
    "read1(100)": lambda f: f.read1(100),
    "anext": lambda f: f.__anext__(),
    "seek(3,1)": lambda f: f.seek(3, 1),
}

async def check(name, buffering, mode, which):
    e = blockio.Engine()
    async with blockio.open(P, mode, buffering=buffering, engine=e) as f:
        ref = open(P, mode, buffering=buffering if buffering else (-1 if "b" not in mode else 0))
        # warm up: a few reads so the buffer holds bytes
        for _ in range(3):
            a = await f.readline(); b = ref.readline()
            assert a == b
        if which == "file":
            e._core.cached_streak = TURN_BUDGET - 1
        else:
            e._inline_streak = TURN_BUDGET - 1
            e._core.cached_streak = 0
        t = asyncio.ensure_future(CALLS[name](f))
        await asyncio.sleep(0)
        yielded = not t.done()
        t.cancel()
        try:
            await t
            cancelled = False
        except asyncio.CancelledError:
            cancelled = True
        if not cancelled:
            # it ran to its end: apply it to the reference too
            if name == "anext": ref.readline()
            elif name == "read1(100)": ref.read(len(t.result()))
            elif name == "peek(1)": pass
            elif name == "readinto(100)": ref.readinto(bytearray(100))
            else: eval("ref." + name.replace("anext", "readline()"))
        bt = await f.tell(); rt = ref.tell()
        nxt = [await f.readline() for _ in range(3)] + [await f.read(5000)]
        rnx = [ref.readline() for _ in range(3)] + [ref.read(5000)]
        ok = bt == rt and nxt == rnx
        ref.close()
    e.close()
    return yielded, cancelled, ok, (bt, rt)

async def main():
    bad = 0
    for mode in ("rb",):
        for buffering in (-1, 0, 256 << 10):
            for which in ("file", "engine"):
                for name in CALLS:
                    y, c, ok, pos = await check(name, buffering, mode, which)
                    if not ok:
                        bad += 1
                        print(f"FAIL {name} buffering={buffering} counter={which}: yielded={y} cancelled={c} tell blockio/builtin={pos}")
    print("failures:", bad)

asyncio.run(main())
