"""Traffic analysis input: capture files to reassembled TCP streams.

Layers, each usable alone:

* ``pcap``: ``PcapReader`` streams packets out of pcap / pcapng files.
* ``packets``: ``PacketDecoder`` turns link-layer packets into ``TcpSegment``s.
* ``tcp``: ``TcpReassembler`` turns segments into ordered per-direction ``Chunk`` / ``Gap`` /
  ``End`` events per ``Connection``.
* ``streams``: ``TcpCapture`` / ``iter_tcp_events`` / ``iter_tcp_streams`` chain the three.
* ``pcapwrite``: ``PcapWriter`` / ``PcapngWriter`` and packet builders (tests, exports).
"""

from .packets import PacketDecoder, TcpSegment, format_addr
from .pcap import NotACaptureError, Packet, PcapReader, read_packets
from .streams import TcpCapture, TcpStream, iter_tcp_events, iter_tcp_streams
from .tcp import KNOWN_SERVER_PORTS, TO_CLIENT, TO_SERVER, Chunk, Connection, Direction, End, Gap, TcpReassembler

__all__ = [
    "KNOWN_SERVER_PORTS",
    "TO_CLIENT",
    "TO_SERVER",
    "Chunk",
    "Connection",
    "Direction",
    "End",
    "Gap",
    "NotACaptureError",
    "Packet",
    "PacketDecoder",
    "PcapReader",
    "TcpCapture",
    "TcpReassembler",
    "TcpSegment",
    "TcpStream",
    "format_addr",
    "iter_tcp_events",
    "iter_tcp_streams",
    "read_packets",
]
