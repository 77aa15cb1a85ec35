"""The broker's start time: the current tree against a previous commit, side by side in one run.

    python benchmarks/bench_broker_start.py                  # --base 1ef9ef2, 10 runs of each; ~1 minute
    python benchmarks/bench_broker_start.py --base HEAD~5 --runs 20 --json
    python benchmarks/bench_broker_start.py --current HEAD   # a commit instead of the working tree
    python benchmarks/bench_broker_start.py --base HEAD --current HEAD --cases restart --groups 50 \
        --base-set kwire.broker.coordinator.loader.INLINE_BYTES=-1  # one tree, a setting against its default

The base's ``src`` is extracted with ``git archive REV src`` into a temp dir; the current tree is
this repository's ``src`` as it is on disk (``--current worktree``, the default, uncommitted
changes included) or another commit extracted the same way.  A compiled extension of the
working tree (``*.so``) is copied into an extracted tree when its C source there is the same,
else built from that tree's C source.
Every measurement runs in a fresh ``python`` subprocess with ``PYTHONPATH`` pointing at one tree
or the other, the trees alternating (the order swapped every run), N runs each, after one
warm-up run per tree and case that is not counted (it writes the ``.pyc`` files).  Cases:

- **embedded, empty data dir**: in the child, ``import kwire.broker`` (the import time), then
  ``EmbeddedBroker(data_dir).start()`` until it returns, ready to accept connections (the start
  time), then one ApiVersions request answered over TCP (start + first answer).
- **embedded, after a restart**: the same on a copy of a data dir that already holds a topic
  (``--partitions`` partitions, a few records each) and ``--groups`` groups' committed offsets,
  written beforehand by the same tree's broker; then the time until one group's committed offset
  is answered (OffsetFetch asked again at once while the broker answers
  COORDINATOR_LOAD_IN_PROGRESS, its coordinators loading in the background since 2026-11-27; the
  group is the one in the highest ``__consumer_offsets`` partition, which the loader takes last
  unless a client asks for it first, as this request does; since the third session of that day
  a small partition asked for is loaded inside the request; since the fourth session the
  background reads wait until the first requests are answered, see coordinator.loader), how many
  OffsetFetch requests that took (1: the first was served), and the time until every group is
  loaded (a tree that loads them inside ``start()`` has them by then; the current tree's
  background load comes after the first answers by design).  Once per tree,
  a consumer then checks that the restarted broker still answers every committed offset.
- **kwire broker process**: ``python -m kwire.cli.main broker --port 0 --json`` started, until
  its first ApiVersions answer (interpreter start and imports included).

Printed: median and min of each figure per tree, and the ratio current/base (below 1: the
current tree starts faster).  Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import platform
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Runs in the child with PYTHONPATH=<tree>/src: argv[1] = "embedded" | "prepare", argv[2] = data dir.
CHILD = r"""
import json, os, socket, struct, sys, time
t0 = time.perf_counter()
import kwire.broker
from kwire.broker import EmbeddedBroker
t1 = time.perf_counter()
if os.environ.get("KWIRE_BENCH_SET"):  # --base-set: one module constant of this tree changed
    import importlib
    target, value = os.environ["KWIRE_BENCH_SET"].split("=", 1)
    module, attr = target.rsplit(".", 1)
    setattr(importlib.import_module(module), attr, int(value))
mode, data_dir = sys.argv[1], sys.argv[2]


def api_versions(host, port):
    body = struct.pack(">hhih", 18, 0, 1, 5) + b"bench"
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        head = b""
        while len(head) < 4:
            chunk = s.recv(4 - len(head))
            if not chunk:
                raise SystemExit("connection closed before the ApiVersions answer")
            head += chunk
        need = struct.unpack(">i", head)[0]
        got = b""
        while len(got) < need:
            chunk = s.recv(need - len(got))
            if not chunk:
                raise SystemExit("connection closed in the ApiVersions answer")
            got += chunk
    corr, error = struct.unpack(">ih", got[:6])
    if corr != 1 or error != 0:
        raise SystemExit(f"ApiVersions answered correlation {corr}, error {error}")


def committed_offset(host, port, group):
    # OffsetFetch v1 of the group's events-0, asked again at once while the broker answers
    # COORDINATOR_LOAD_IN_PROGRESS (its coordinator still loading): (offset, tries).
    from kwire.protocol import encode_request, messages
    from kwire.protocol.frames import decode_response
    R = messages.OffsetFetchRequest
    request = R(group_id=group, topics=[R.OffsetFetchRequestTopic(name="events", partition_indexes=[0])])
    deadline = time.monotonic() + 30
    with socket.create_connection((host, port), timeout=10) as s:
        for tries in range(1, 100_000):
            s.sendall(encode_request(request, 1, tries, client_id="bench"))
            head = b""
            while len(head) < 4:
                head += s.recv(4 - len(head))
            need, got = struct.unpack(">i", head)[0], b""
            while len(got) < need:
                got += s.recv(need - len(got))
            _, response = decode_response(got, 9, 1)
            p = response.topics[0].partitions[0]
            if p.error_code == 0:
                return p.committed_offset, tries
            if p.error_code != 14 or time.monotonic() > deadline:
                raise SystemExit(f"OffsetFetch of {group} answered error {p.error_code}")
            time.sleep(0.0005)
    raise SystemExit("no committed offset")


if mode == "embedded":
    t2 = time.perf_counter()
    b = EmbeddedBroker(data_dir)
    b.start()
    t3 = time.perf_counter()
    host, port = b.bootstrap.rsplit(":", 1)
    api_versions(host, int(port))
    t4 = time.perf_counter()
    out = {"import_ms": (t1 - t0) * 1e3, "start_ms": (t3 - t2) * 1e3, "answer_ms": (t4 - t2) * 1e3,
           "kwire": kwire.__file__}
    if len(sys.argv) > 3:  # after a restart: until a group's offsets are served
        offset, tries = committed_offset(host, int(port), sys.argv[3])
        out.update(offsets_ms=(time.perf_counter() - t2) * 1e3, offset_fetch_tries=tries)
        loader = getattr(b.broker.state, "loader", None)  # (none in trees that load inside start())
        if loader is not None and not loader.done.wait(30):
            raise SystemExit("the coordinators did not finish loading within 30 s")
        out.update(loaded_ms=(time.perf_counter() - t2) * 1e3)
    b.stop()
    print(json.dumps(out))
elif mode == "prepare":
    # A topic with a few records per partition and groups' committed offsets, then a clean stop.
    from confluent_kafka import Consumer, Producer, TopicPartition
    partitions, groups = int(sys.argv[3]), int(sys.argv[4])
    b = EmbeddedBroker(data_dir, default_partitions=partitions)
    b.start()
    p = Producer({"bootstrap.servers": b.bootstrap, "log_level": 3})
    for i in range(partitions * 20):
        p.produce("events", b"value-%d" % i, partition=i % partitions)
    assert p.flush(30) == 0
    del p
    for g in range(groups):
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": f"group-{g}", "enable.auto.commit": False,
                      "log_level": 3})
        c.commit(offsets=[TopicPartition("events", i, 1 + (g + i) % 20) for i in range(partitions)],
                 asynchronous=False)
        c.close()
    b.stop()
    print(json.dumps({"kwire": kwire.__file__}))
elif mode == "check":
    # The committed offsets of the groups, read back after a restart.
    from confluent_kafka import Consumer, TopicPartition
    partitions, groups = int(sys.argv[3]), int(sys.argv[4])
    b = EmbeddedBroker(data_dir)
    b.start()
    wrong = []
    for g in range(groups):
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": f"group-{g}", "enable.auto.commit": False,
                      "log_level": 3})
        got = c.committed([TopicPartition("events", i) for i in range(partitions)], timeout=15)
        for tp in got:
            if tp.offset != 1 + (g + tp.partition) % 20:
                wrong.append(f"group-{g} events-{tp.partition}: {tp.offset}")
        c.close()
    b.stop()
    print(json.dumps({"wrong": wrong}))
"""


def last_loaded_group(groups: int, partitions: int = 50) -> str:
    """Of group-0..group-N-1, the one in the highest __consumer_offsets partition (Kafka's
    abs(String.hashCode) % 50): the loader takes the partitions in order, except one a client
    asked for."""
    def partition(name: str) -> int:
        h = 0
        for ch in name:  # ASCII names: Java's hashCode over the characters, in int32
            h = (31 * h + ord(ch)) & 0xFFFFFFFF
        h = h - (1 << 32) if h >= 1 << 31 else h
        return (0 if h == -(1 << 31) else abs(h)) % partitions

    return max((f"group-{g}" for g in range(groups)), key=partition)


def log(msg: str) -> None:
    print(f"[bench_broker_start {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], check=True, capture_output=True, text=True).stdout.strip()


def extract(rev: str, into: Path) -> Path:
    """``git archive rev src`` into ``into``; the working tree's built extensions copied beside
    identical C sources, and built from the tree's own C source where it differs (else that tree
    would run without its compiled helper, slower than it is).  Returns the tree's src dir."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "src"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    src = into / "src"
    for so in (REPO / "src").rglob("*.so"):
        rel = so.relative_to(REPO / "src")
        c_source = so.parent / (so.name.split(".", 1)[0] + ".c")
        theirs = src / rel.parent / c_source.name
        if c_source.is_file() and theirs.is_file() and filecmp.cmp(c_source, theirs, shallow=False):
            shutil.copy2(so, src / rel)
        elif theirs.is_file():
            build_extension(theirs, src / rel)
    return src


def build_extension(c_source: Path, so: Path) -> None:
    """Compile one C file into the extension module ``so`` (as setup.py's optional Extension
    does); on failure the tree runs without it, which is logged."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()
    flags = (sysconfig.get_config_var("CFLAGSFORSHARED") or "-fPIC").split()
    include = sysconfig.get_paths()["include"]
    out = subprocess.run([*cc, "-shared", "-O2", *flags, f"-I{include}", str(c_source), "-o", str(so)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        log(f"could not build {so.name} from {c_source}: {out.stderr[-300:]}; that tree runs without it")
    else:
        log(f"built {so.name} from that tree's {c_source.name} (it differs from the working tree's)")


def run_child(src: Path, args: list[str], cwd: Path, timeout: float = 120, setting: str | None = None) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src)}
    env.pop("KWIRE_BENCH_SET", None)
    if setting:
        env["KWIRE_BENCH_SET"] = setting
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # the warm-up run writes the .pyc files
    out = subprocess.run([sys.executable, "-c", CHILD, *args], cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"child {args[0]} with {src} exited {out.returncode}: {out.stderr[-1500:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if "kwire" in result and not result["kwire"].startswith(str(src)):
        raise RuntimeError(f"the child imported kwire from {result['kwire']}, not from {src}")
    return result


def api_versions(host: str, port: int) -> None:
    body = struct.pack(">hhih", 18, 0, 1, 5) + b"bench"
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
            chunk = s.recv(65536)
            if not chunk:
                raise RuntimeError("connection closed before the ApiVersions answer")
            data += chunk
    corr, error = struct.unpack(">ih", data[4:10])
    if corr != 1 or error != 0:
        raise RuntimeError(f"ApiVersions answered correlation {corr}, error {error}")


def process_run(src: Path, data_dir: Path, cwd: Path, timeout: float = 60) -> dict:
    """``kwire broker`` started until its first ApiVersions answer."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "kwire.cli.main", "broker", "--host", "127.0.0.1", "--port", "0",
                             "--data-dir", str(data_dir), "--log-level", "warning", "--json"],
                            cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = proc.stdout.readline()  # the --json line comes once it listens
        if not line:
            raise RuntimeError(f"kwire broker with {src} did not start: {proc.stderr.read()[-1500:]!r}")
        t1 = time.perf_counter()
        host, port = json.loads(line)["bootstrap"].rsplit(":", 1)
        api_versions(host, int(port))
        t2 = time.perf_counter()
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        proc.stdout.close()
        proc.stderr.close()
    return {"listening_ms": (t1 - t0) * 1e3, "answer_ms": (t2 - t0) * 1e3}


CASES = {
    "embedded": "embedded, empty data dir",
    "restart": "embedded, after a restart",
    "process": "kwire broker process",
}
FIGURES = {
    "embedded": [("import_ms", "import kwire.broker"), ("start_ms", "EmbeddedBroker(...).start()"),
                 ("answer_ms", "start + first ApiVersions answer")],
    "restart": [("start_ms", "EmbeddedBroker(...).start()"), ("answer_ms", "start + first ApiVersions answer"),
                ("offsets_ms", "start + a group's committed offset (OffsetFetch)"),
                ("offset_fetch_tries", "OffsetFetch requests sent until then (count)"),
                ("loaded_ms", "start + every group loaded (after that answer)")],
    "process": [("listening_ms", "exec to listening (--json line)"), ("answer_ms", "exec to first ApiVersions answer")],
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[1:]))
    parser.add_argument("--base", default="1ef9ef2", help="the commit to compare with (default 1ef9ef2, the "
                                                          "commit before log compaction and the internal topics)")
    parser.add_argument("--current", default="worktree",
                        help="'worktree' (this repository's src as it is on disk, the default) or a commit")
    parser.add_argument("--runs", type=int, default=10, help="runs of each case per tree (default 10)")
    parser.add_argument("--groups", type=int, default=5, help="groups with committed offsets in the restart "
                                                              "case's data dir (default 5)")
    parser.add_argument("--partitions", type=int, default=4, help="partitions of its topic (default 4)")
    parser.add_argument("--cases", default="embedded,restart,process", help="cases to run (default all)")
    parser.add_argument("--base-set", metavar="MODULE.NAME=INT",
                        help="in the base's embedded runs, set this integer constant after the import (to "
                             "compare one setting of a tree with its default: --base REV --current REV)")
    parser.add_argument("--json", action="store_true", help="every run's figures as JSON instead of the table")
    args = parser.parse_args(argv)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    if set(cases) - set(CASES):
        parser.error(f"--cases: unknown {', '.join(sorted(set(cases) - set(CASES)))}")
    work = Path(tempfile.mkdtemp(prefix="kwire-bench-start-"))
    meta = {"python": platform.python_version(), "cpus": os.cpu_count(), "load_start": os.getloadavg()[0],
            "base": git("rev-parse", "--short", args.base), "runs": args.runs, "groups": args.groups,
            "partitions": args.partitions, "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    if args.base_set:
        meta["base"] += f" with {args.base_set}"
    try:
        trees: dict[str, Path] = {"base": extract(args.base, work / "base")}
        if args.current == "worktree":
            trees["current"] = REPO / "src"
            changed = [row for row in git("status", "--porcelain", "--", "src").splitlines() if row.strip()]
            meta["current"] = f"working tree at {git('rev-parse', '--short', 'HEAD')}" + (
                f" with {len(changed)} uncommitted change(s) under src/" if changed else "")
        else:
            trees["current"] = extract(args.current, work / "current")
            meta["current"] = git("rev-parse", "--short", args.current)
        log(f"base {meta['base']} in {trees['base']}; current: {meta['current']}")
        runs: dict[str, dict[str, list[dict]]] = {c: {t: [] for t in trees} for c in cases}
        templates: dict[str, Path] = {}
        checks: dict[str, list[str]] = {}
        if "restart" in cases:
            for name, src in trees.items():
                templates[name] = work / f"offsets-{name}"
                run_child(src, ["prepare", str(templates[name]), str(args.partitions), str(args.groups)], work)
                dirs = sorted(d.name for d in templates[name].iterdir() if d.is_dir() and "-" in d.name)
                meta[f"partition_dirs_{name}"] = len(dirs)
                meta[f"offsets_partition_dirs_{name}"] = sum(d.startswith("__consumer_offsets-") for d in dirs)
                log(f"{name}: data dir with {args.groups} groups' committed offsets on {args.partitions} partitions "
                    f"written by its own broker: {len(dirs)} partition dirs, "
                    f"{meta[f'offsets_partition_dirs_{name}']} of them __consumer_offsets")
        scratch = work / "scratch"

        def one(case: str, name: str) -> dict:
            shutil.rmtree(scratch, ignore_errors=True)
            if case == "restart":
                shutil.copytree(templates[name], scratch)
            if case == "process":
                return process_run(trees[name], scratch, work)
            extra = [last_loaded_group(args.groups)] if case == "restart" and args.groups else []
            return run_child(trees[name], ["embedded", str(scratch), *extra], work,
                             setting=args.base_set if name == "base" else None)

        for case in cases:
            for name in trees:
                one(case, name)  # warm-up: .pyc files written, page cache filled; not counted
            for i in range(args.runs):
                order = list(trees) if i % 2 == 0 else list(trees)[::-1]
                for name in order:
                    runs[case][name].append(one(case, name))
                key = FIGURES[case][0][0] if case != "embedded" else "start_ms"
                log(f"{CASES[case]}: run {i + 1}/{args.runs}: " + ", ".join(
                    f"{name} {runs[case][name][-1][key]:.1f} ms" for name in trees) + f" ({key})")
            if case == "restart":
                for name in trees:
                    shutil.rmtree(scratch, ignore_errors=True)
                    shutil.copytree(templates[name], scratch)
                    checks[name] = run_child(trees[name], ["check", str(scratch), str(args.partitions),
                                                           str(args.groups)], work,
                                             setting=args.base_set if name == "base" else None)["wrong"]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    meta["load_end"] = os.getloadavg()[0]
    summary: dict = {}
    for case in cases:
        summary[case] = {}
        for key, _label in FIGURES[case]:
            cell = {}
            for name in ("base", "current"):
                values = [r[key] for r in runs[case][name]]
                cell[name] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
            cell["ratio_median"] = cell["current"]["median"] / cell["base"]["median"]
            cell["ratio_min"] = cell["current"]["min"] / cell["base"]["min"]
            summary[case][key] = cell
    if args.json:
        print(json.dumps({"meta": meta, "summary": summary, "runs": runs, "offset_checks": checks}, indent=1))
    else:
        print(f"kwire broker start time: base {meta['base']} vs current ({meta['current']}); Python {meta['python']}, "
              f"{meta['cpus']} CPUs; {args.runs} runs of each, alternated; load average {meta['load_start']:.1f} "
              f"at the start, {meta['load_end']:.1f} at the end")
        print(f"{'ms':<52}{'base med':>10}{'base min':>10}{'cur med':>10}{'cur min':>10}{'cur/base med':>14}"
              f"{'cur/base min':>14}")
        for case in cases:
            print(CASES[case] + (f" ({args.groups} groups' offsets on a topic of {args.partitions} partitions; "
                                 f"partition dirs: base {meta['partition_dirs_base']}, current "
                                 f"{meta['partition_dirs_current']} of which {meta['offsets_partition_dirs_current']}"
                                 f" __consumer_offsets)" if case == "restart" else ""))
            for key, label in FIGURES[case]:
                c = summary[case][key]
                print(f"  {label:<50}{c['base']['median']:>10.1f}{c['base']['min']:>10.1f}"
                      f"{c['current']['median']:>10.1f}{c['current']['min']:>10.1f}"
                      f"{c['ratio_median']:>13.2f}x{c['ratio_min']:>13.2f}x")
        if checks:
            print("committed offsets after a restart: " + "; ".join(
                f"{name} {'all as committed' if not wrong else 'WRONG ' + ', '.join(wrong[:5])}"
                for name, wrong in checks.items()))
    return 1 if any(checks.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
