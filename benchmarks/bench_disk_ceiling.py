"""The ceiling of a durable broker's produce path on this machine, without any Kafka logic.

    python benchmarks/bench_disk_ceiling.py [--gib 1] [--repeat 3] [--dir DIR]

A sender thread pushes bytes over loopback TCP as fast as it can; an asyncio ``BufferedProtocol``
receives them into one reusable buffer and either drops them ("receive only") or ``pwrite``s them
to a file in ``--dir`` ("receive + pwrite": what any broker that keeps a log on disk must do at
least).  Also ``dd`` writing zeros into the page cache, for the same write done by C.

Why: kwire's broker is compared with librdkafka's mock cluster, which keeps about 5 MB per
partition in memory and writes nothing.  If receiving and writing alone, in any language, runs
below the mock's produce rate on this machine, no broker with a log on disk can match the mock
here, whatever its code.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time

CHUNK = 1 << 20


class _Receiver(asyncio.BufferedProtocol):
    def __init__(self, fd: int | None, total: int, done: asyncio.Future):
        self.buf = memoryview(bytearray(CHUNK))
        self.fd = fd
        self.total = total
        self.done = done
        self.offset = 0

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.buf

    def buffer_updated(self, nbytes: int) -> None:
        if self.fd is not None:
            os.pwrite(self.fd, self.buf[:nbytes], self.offset)
        self.offset += nbytes
        if self.offset >= self.total and not self.done.done():
            self.done.set_result(time.perf_counter())


async def _one_run(total: int, directory: str, write: bool) -> float:
    path = os.path.join(directory, "ceiling.log")
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC) if write else None
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    server = await loop.create_server(lambda: _Receiver(fd, total, done), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]

    def send() -> None:
        with socket.create_connection(("127.0.0.1", port)) as s:
            chunk = b"x" * CHUNK
            for _ in range(total // CHUNK):
                s.sendall(chunk)

    started = time.perf_counter()
    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    try:
        finished = await asyncio.wait_for(done, timeout=300)
    finally:
        sender.join(timeout=60)
        server.close()
        if fd is not None:
            os.close(fd)
            os.unlink(path)
    return total / (finished - started) / 1e6


def _dd(total: int, directory: str) -> float:
    path = os.path.join(directory, "dd.out")
    started = time.perf_counter()
    subprocess.run(["dd", "if=/dev/zero", f"of={path}", f"bs={CHUNK}", f"count={total // CHUNK}"],
                   check=True, capture_output=True, timeout=300)
    elapsed = time.perf_counter() - started
    os.unlink(path)
    return total / elapsed / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0, help="bytes per run, in GiB (default 1)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each (default 3)")
    parser.add_argument("--dir", default=None, help="where the files go (default: a temp dir beside the "
                                                    "working directory, on the same disk as a broker's data)")
    args = parser.parse_args()
    total = max(1, int(args.gib * (1 << 30)) // CHUNK) * CHUNK
    directory = tempfile.mkdtemp(prefix="kwire-ceiling-", dir=args.dir or os.getcwd())
    try:
        rows = []
        for name, fn in (("receive only (asyncio)", lambda: asyncio.run(_one_run(total, directory, False))),
                         ("receive + pwrite (asyncio)", lambda: asyncio.run(_one_run(total, directory, True))),
                         ("dd zeros into a file (C)", lambda: _dd(total, directory))):
            rates = []
            for i in range(args.repeat):
                rates.append(fn())
                print(f"  {name}: run {i + 1}/{args.repeat}: {rates[-1]:,.0f} MB/s", flush=True)
            rows.append((name, max(rates), min(rates)))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    print(f"\n{total / 1e6:,.0f} MB per run, best and worst of {args.repeat}; load average "
          f"{os.getloadavg()[0]:.1f}")
    print(f"{'path':<28}{'best MB/s':>12}{'worst MB/s':>12}")
    for name, best, worst in rows:
        print(f"{name:<28}{best:>12,.0f}{worst:>12,.0f}")


if __name__ == "__main__":
    main()
