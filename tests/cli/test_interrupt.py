"""Ctrl-C at any moment of a ``kwire`` command: one line on stderr, exit status 130, never a
traceback (consume and broker stop cleanly instead, with their usual last words)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

import pytest

from kwire.broker import EmbeddedBroker

KWIRE = [sys.executable, "-m", "kwire.cli.main"]


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker() as b:
        yield b


def interrupted(args: list[str], after_s: float) -> tuple[int, str]:
    """Start kwire with stdin held open, SIGINT it after ``after_s``, and return (code, stderr)."""
    proc = subprocess.Popen([*KWIRE, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(after_s)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    return proc.returncode, err


def test_while_the_command_is_still_importing():
    # A SIGINT right after kwire.cli.main's own first lines, before main(): what a Ctrl-C during
    # a slow start-up meets.  (Sleeping before the signal cannot aim at that moment reliably.)
    code = ("import os, signal, sys; sys.argv = ['kwire', '--version']; import kwire.cli.main; "
            "os.kill(os.getpid(), signal.SIGINT); import time; time.sleep(5); print('not interrupted')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert (result.returncode, result.stdout, result.stderr) == (130, "", "kwire: interrupted\n")


def test_a_program_importing_the_cli_keeps_its_own_handler():
    code = "import signal, kwire.cli.main; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert result.stdout == "True\n", result.stderr


# Connected to the broker and waiting for input; then once the records began to flow.
@pytest.mark.parametrize("after_s", [1.5, 3.0])
def test_produce_waiting_for_input(broker, after_s):
    code, err = interrupted(["produce", "t", "-b", broker.bootstrap], after_s)
    assert (code, err) == (130, "kwire: interrupted\n")


@pytest.mark.parametrize("after_s", [1.0, 2.5])
def test_a_command_waiting_for_a_silent_broker(after_s):
    # A port that accepts connections (the kernel's backlog) and never answers: the command
    # sits in its first request.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        code, err = interrupted(["topics", "list", "-b", f"127.0.0.1:{port}", "--timeout", "20"], after_s)
    assert (code, err) == (130, "kwire: interrupted\n")


def test_consume_stops_cleanly_with_its_summary(broker):
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    producer.produce("one", b"first")
    assert producer.flush(30) == 0
    proc = subprocess.Popen([*KWIRE, "consume", "one", "-o", "beginning", "-b", broker.bootstrap],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "first\n"  # consuming now, waiting for more
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert (proc.returncode, out, err) == (0, "", "1 record read from one\n")
