"""FrameSplitter's buffer API in two kwire trees, alternated in one run: is a change slower?

What a broker connection does per read (``get_buffer``, the kernel's copy, ``buffer_updated``):
- small: 16 KiB reads of back-to-back 100-byte frames (many frames per read, split from the stage);
- large: 1 MiB frames received in 64 KiB reads (a frame of its own, filled read by read).

Each round runs this file's ``--child`` once per tree (its ``src`` first on ``PYTHONPATH``),
alternating which goes first (ab_trees.py); the table gives the best rate per case over the
rounds (on a loaded machine the best is the least disturbed), after/before and the before tree's
own spread.

    git archive HEAD~1 | tar -x -C /tmp/kwire-before
    python benchmarks/bench_framing_ab.py --before /tmp/kwire-before [--rounds 5] [--seconds 0.5]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import ab_trees


def _rate(step, seconds: float) -> float:
    """Calls of ``step`` per second, best of repeated batches within ``seconds``."""
    best = 0.0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        t0 = time.perf_counter()
        for _ in range(20):
            step()
        best = max(best, 20 / (time.perf_counter() - t0))
    return best


def child(seconds: float) -> dict[str, float]:
    from kwire.protocol.framing import FrameSplitter

    frame = (96).to_bytes(4, "big") + bytes(96)
    small = (frame * (16 * 1024 // len(frame) + 1))[:16 * 1024]  # a read ends inside a frame
    splitter = FrameSplitter()

    def read_small() -> None:
        view = splitter.get_buffer()
        n = min(len(view), len(small))
        view[:n] = small[:n]
        splitter.buffer_updated(n)

    large = (1 << 20).to_bytes(4, "big") + bytes(1 << 20)
    big_splitter = FrameSplitter(reuse_frames=2)
    chunk = 64 * 1024

    def read_large() -> None:
        pos = 0
        while pos < len(large):
            view = big_splitter.get_buffer()
            n = min(len(view), chunk, len(large) - pos)
            view[:n] = large[pos:pos + n]
            big_splitter.buffer_updated(n)
            pos += n

    return {"small frames, 16 KiB reads (reads/s)": _rate(read_small, seconds),
            "1 MiB frames, 64 KiB reads (frames/s)": _rate(read_large, seconds)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ab_trees.add_arguments(ap, rounds=5, before_required=False)
    ap.add_argument("--seconds", type=float, default=0.5, help="time budget per case per run")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.seconds)))
        return 0
    if args.before is None:
        ap.error("--before is required")
    srcs = ab_trees.trees(args)

    def measure(tree: str) -> dict[str, float]:
        out = subprocess.run([sys.executable, __file__, "--child", "--seconds", str(args.seconds)],
                             env=ab_trees.tree_env(srcs[tree], args.malloc), check=True, capture_output=True,
                             text=True).stdout
        result: dict[str, float] = json.loads(out)
        return result

    ab_trees.print_table(ab_trees.alternate(measure, args.rounds), pick=max)
    return 0


if __name__ == "__main__":
    sys.exit(main())
