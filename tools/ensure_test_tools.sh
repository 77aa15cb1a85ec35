#!/usr/bin/env bash
# The Debian tools the test suite drives as real peers, installed when missing:
#   kcat     librdkafka's command-line client (the CLI and broker tests compare with it)
#   tcpdump  the analyzer's tests capture real client traffic on loopback
#   dumpcap  the same, through Wireshark's capture tool (package wireshark-common, with tshark)
#   tshark   the analyzer's field-by-field oracle
#   chromium the analyzer's HTML report is checked in a real browser (headless)
# Used by `make test` and by .ci/run, so a fresh machine needs nothing installed by hand.  Where
# apt-get can't run (not root and no sudo, or not Debian), it names the packages and fails.
set -euo pipefail

need=()
for tool in kcat tcpdump dumpcap tshark chromium; do
    command -v "$tool" >/dev/null 2>&1 || need+=("$tool")
done
[ ${#need[@]} -eq 0 ] && exit 0

packages="kcat tcpdump tshark chromium"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO="sudo"
    else
        echo "the tests need ${need[*]}: install the Debian packages $packages (apt-get install -y $packages)" >&2
        exit 1
    fi
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "the tests need ${need[*]}: install the Debian packages $packages (no apt-get on this machine)" >&2
    exit 1
fi
echo "installing the test tools (${need[*]}) from Debian: $packages"
$SUDO apt-get update -qq
# dumpcap ships in wireshark-common; the non-interactive answer keeps it root-only
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $packages >/dev/null
