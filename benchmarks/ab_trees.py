"""Two kwire trees side by side in one run: what the A/B benchmarks share.

A change is judged against the tree before it by running the same measurement in child
processes with each tree's ``src`` first on ``PYTHONPATH``, alternating which tree goes first
each round, so that load on the machine falls on both; the table gives, per case, the rate each
tree reached over the rounds, after/before, and the spread of the before tree's own rounds (a
ratio inside it is noise).  Used by bench_protocol_ab.py, bench_framing_ab.py and
bench_clients.py ``--before``.

Children run with a fixed malloc policy (``FIXED_MALLOC``): by default glibc moves its mmap
threshold as large blocks are freed and returns the heap's top to the kernel past a trim
threshold, so whether a case's megabyte buffers come from fresh mappings (a page fault per
4 KiB written, ~2.6 us each on this VM: 650 faults cost a 10,000-record lz4 encode ~1.7 ms)
or from reused heap depends on what ran earlier in the process and how many rounds it ran, not
on the code measured.  Fixed thresholds give both trees the same steady state; ``--malloc
default`` runs with glibc's own policy.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# mmap only past 32 MiB (glibc's largest threshold) and never trim the heap below 128 MiB:
# setting them also turns off glibc's dynamic threshold.
FIXED_MALLOC = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=134217728"

#: per tree ("before", "after"), per case, the value of each round
Rates = dict[str, dict[str, list[float]]]


def add_arguments(ap: argparse.ArgumentParser, *, rounds: int, before_required: bool = True) -> None:
    """The options every A/B run takes: the two trees, the rounds, the malloc policy."""
    ap.add_argument("--before", type=Path, required=before_required, help="a kwire checkout (its src/ is used)")
    ap.add_argument("--after", type=Path, default=ROOT, help="the kwire checkout to compare (default: this one)")
    ap.add_argument("--rounds", type=int, default=rounds, help="runs of each tree, alternated")
    ap.add_argument("--malloc", choices=("fixed", "default"), default="fixed",
                    help="the children's malloc policy: fixed thresholds (default), or glibc's dynamic one")


def trees(args: argparse.Namespace) -> dict[str, Path]:
    """The ``src`` directory of each tree, by name."""
    return {"before": args.before / "src", "after": args.after / "src"}


def tree_env(src: Path, malloc: str = "fixed") -> dict[str, str]:
    """The environment of a child that imports kwire from ``src``."""
    env = dict(os.environ, PYTHONPATH=str(src))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # else every child recompiles the 475 KB schema module
    if malloc == "fixed":
        env["GLIBC_TUNABLES"] = FIXED_MALLOC
    else:
        env.pop("GLIBC_TUNABLES", None)
    return env


def alternate(measure: Callable[[str], dict[str, float]], rounds: int,
              names: Iterable[str] = ("before", "after")) -> Rates:
    """``measure(tree)`` (case -> value) for each tree, ``rounds`` times, the order swapped each round."""
    order = list(names)
    rates: Rates = {name: {} for name in order}
    for i in range(rounds):
        for name in (order if i % 2 == 0 else order[::-1]):
            for case, value in measure(name).items():
                rates[name].setdefault(case, []).append(value)
    return rates


def print_table(rates: Rates, *, pick: Callable[[list[float]], float] = max, unit: str = "/s",
                notes: dict[str, str] | None = None) -> None:
    """One row a case: the value each tree reached (``pick`` of its rounds), after/before, and the
    before tree's own spread (its worst round over its best: ratios above it are within noise).
    ``notes``: an extra column by case."""
    label = "best" if pick is max else "median"
    print(f"{'case':42} {'before' + unit:>12} {'after' + unit:>12} {'after/before':>13} {'before spread':>14}"
          f"  ({label} of rounds)")
    for case, before in rates["before"].items():
        after = rates["after"].get(case)
        if not after:
            continue
        b, a = pick(before), pick(after)
        spread = min(before) / max(before)
        note = f"  {notes[case]}" if notes and case in notes else ""
        print(f"{case:42} {b:12.0f} {a:12.0f} {a / b:12.2f}x {spread:13.2f}x{note}")
