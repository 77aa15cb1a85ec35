"""The orders Java's assignors sort by, so a kwire leader lays out members and partitions as Java does.

Java compares strings by UTF-16 code units, Python by code points; the two disagree when one
string has a character above U+FFFF (a surrogate pair, 0xD800-0xDFFF) where the other has one in
U+E000-U+FFFF.  Member ids embed the client.id, which may be any text, so the difference is real.
"""

from __future__ import annotations

from ..types import TopicPartition

__all__ = ["java_string_key", "member_key", "partition_key"]


def java_string_key(s: str) -> bytes:
    """A key ordering strings as Java's ``String.compareTo`` does.

    Big-endian UTF-16 compares byte by byte in code-unit order, and a shorter prefix sorts
    first, exactly like compareTo.  ``surrogatepass`` lets lone surrogates through, as Java
    strings may hold them.
    """
    return s.encode("utf-16-be", "surrogatepass")


def member_key(member_id: str, group_instance_id: str | None) -> tuple[int, bytes, bytes]:
    """Java's ``MemberInfo`` order: static members first by group.instance.id, then the rest by member id.

    Sorting static members by instance id keeps their assignment stable across restarts, when
    the broker hands them a new member id.  (Java compares two static members by instance id
    alone; instance ids are unique in a group, so the member id here only breaks impossible ties.)
    """
    if group_instance_id is not None:
        return 0, java_string_key(group_instance_id), java_string_key(member_id)
    return 1, java_string_key(member_id), b""


def partition_key(tp: TopicPartition) -> tuple[bytes, int]:
    """Java's topic-then-partition order of TopicPartitions."""
    return java_string_key(tp.topic), tp.partition
