"""kwire analyze: captured Kafka and MongoDB traffic decoded, paired and diagnosed.

Layers, each usable alone, from the file up:

* ``pcap``: ``PcapReader`` streams packets out of pcap / pcapng files.
* ``packets``: ``PacketDecoder`` turns link-layer packets into ``TcpSegment``s.
* ``tcp``: ``TcpReassembler`` turns segments into ordered per-direction ``Chunk`` / ``Gap`` /
  ``End`` events per ``Connection``.
* ``streams``: ``TcpCapture`` / ``iter_tcp_events`` / ``iter_tcp_streams`` chain the three.
* ``kafka`` / ``mongo``: one flow per connection, stream events in, ``exchange.Exchange``s out.
* ``analyzer``: ``CaptureDecoder`` picks each connection's protocol and drives its flow.
* ``tables`` / ``findings`` / ``rules`` / ``engines``: the rows every output shares; the findings,
  each rule defined once as SQL, run by DuckDB on one machine and by Spark SQL with ``--spark``.
* ``session``: ``analyze_captures`` (what ``kwire analyze`` runs), with ``summary``,
  ``export`` (JSON lines, Parquet) and ``report_html``; ``spark_job`` does the same on Spark.
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
