"""One classic consumer group: its members, generation, selected protocol and committed offsets.

Pure state, no timers and no I/O: the coordinator drives it and decides when to answer whom.
The states and the transitions allowed between them are Kafka's (``GroupState``); a transition
Kafka forbids raises, because it means the coordinator lost track of the group.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

from .offsets import CommittedOffset
from .subscription import subscribed_topics

__all__ = ["CONSUMER_PROTOCOL_TYPE", "Group", "GroupState", "Member"]

# The protocol type of Kafka's consumers; only their metadata says which topics they read.
CONSUMER_PROTOCOL_TYPE = "consumer"


class GroupState(Enum):
    """Kafka's group states; the value is the name DescribeGroups and ListGroups report."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


# state -> the states it may be entered from (Kafka's GroupMetadata rules).
_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset({GroupState.STABLE, GroupState.COMPLETING_REBALANCE,
                                               GroupState.EMPTY}),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


@dataclass(eq=False)
class Member:
    """A member of a group, with the JoinGroup/SyncGroup requests it has parked (if any)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    # (name, metadata) in the member's order of preference.
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    # Futures of the member's parked JoinGroup / SyncGroup; not None means "waiting for an answer".
    join_waiter: asyncio.Future | None = None
    sync_waiter: asyncio.Future | None = None
    # Joined but never got a JoinGroup answer: it has no session yet (Kafka's isNew).
    is_new: bool = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def awaiting_join(self) -> bool:
        return self.join_waiter is not None

    @property
    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str | None) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        return b""

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """Same protocols with the same metadata in the same order: a rejoin that changes nothing."""
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among those every member supports."""
        for name in self.protocol_names:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")


@dataclass(eq=False)
class Group:
    """A group's state.  ``state_timestamp_ms`` is when it entered its state (offset expiry uses it)."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    state_timestamp_ms: int | None = None
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    # Member ids handed out with MEMBER_ID_REQUIRED whose owners have not joined with them yet.
    pending_members: set[str] = field(default_factory=set)
    # group.instance.id -> member id of static members.
    static_members: dict[str, str] = field(default_factory=dict)
    # Members of the current generation that have not sent SyncGroup yet.
    pending_sync: set[str] = field(default_factory=set)
    supported_protocols: Counter = field(default_factory=Counter)
    # Topics the members read (consumer protocol only); None when unknown.
    subscribed_topics: set[str] | None = None
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    # TxnOffsetCommit: offsets staged by each transactional producer (by producer id), which
    # become committed offsets only when its transaction commits.
    pending_txn_offsets: dict[int, dict[tuple[str, int], CommittedOffset]] = field(default_factory=dict)
    # A member joined during the initial delay of a brand-new group: wait a little longer.
    new_member_added: bool = False

    # --- state

    @property
    def pending_txn_partitions(self) -> set[tuple[str, int]]:
        """Partitions with offsets staged by a transaction still open."""
        return {tp for staged in self.pending_txn_offsets.values() for tp in staged}

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    def transition_to(self, state: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise RuntimeError(f"group {self.group_id!r}: illegal transition {self.state.value} -> {state.value}")
        self.state = state
        self.state_timestamp_ms = now_ms

    @property
    def can_rebalance(self) -> bool:
        return self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY)

    # --- membership

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def is_pending(self, member_id: str) -> bool:
        return member_id in self.pending_members

    def static_member_id(self, group_instance_id: str | None) -> str | None:
        return None if group_instance_id is None else self.static_members.get(group_instance_id)

    def is_static_member_fenced(self, group_instance_id: str | None, member_id: str) -> bool:
        """The instance id belongs to another member id: this one is a zombie of an older instance."""
        current = self.static_member_id(group_instance_id)
        return current is not None and current != member_id

    def add(self, member: Member) -> None:
        if not self.members:
            # The first member sets the group's protocol type; the others were checked against it.
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self.supported_protocols.update(member.protocol_names)
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        self.pending_members.discard(member.member_id)

    def restore_stable(self, members: Iterable[Member], protocol_name: str | None, leader_id: str | None,
                       state_timestamp_ms: int) -> None:
        """Put back a stored generation's members (a load after a restart): the group is Stable
        with them, as Kafka loads a group whose record has members.  Set directly, not by a
        transition: nothing happened, the group is as it was."""
        for member in members:
            self.add(member)
        self.protocol_name = protocol_name
        if leader_id in self.members:
            self.leader_id = leader_id
        self.subscribed_topics = self._compute_subscribed_topics()
        self.state = GroupState.STABLE
        self.state_timestamp_ms = state_timestamp_ms

    def remove(self, member_id: str) -> Member:
        member = self.members.pop(member_id)
        self.supported_protocols.subtract(member.protocol_names)
        self.supported_protocols += Counter()  # drop the zero counts
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_sync.discard(member_id)
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        return member

    def update_protocols(self, member: Member, protocols: list[tuple[str, bytes]]) -> None:
        self.supported_protocols.subtract(member.protocol_names)
        member.protocols = list(protocols)
        self.supported_protocols.update(member.protocol_names)
        self.supported_protocols += Counter()

    def replace_static_member(self, group_instance_id: str, old_member_id: str, new_member_id: str) -> Member:
        """Give a static member a new member id (its restarted instance joined without one)."""
        member = self.members.pop(old_member_id)
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        self.static_members[group_instance_id] = new_member_id
        if old_member_id in self.pending_sync:
            self.pending_sync.discard(old_member_id)
            self.pending_sync.add(new_member_id)
        return member

    @property
    def rebalance_timeout_ms(self) -> int:
        """How long a rebalance waits for members to rejoin: the longest any member asked for."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # --- protocols

    def supports_protocols(self, protocol_type: str, protocol_names: Iterable[str]) -> bool:
        """Whether a member with these protocols may join (else INCONSISTENT_GROUP_PROTOCOL)."""
        names = set(protocol_names)
        if self.is_(GroupState.EMPTY) or not self.members:
            return bool(protocol_type) and bool(names)
        return protocol_type == self.protocol_type and bool(names & self.candidate_protocols())

    def candidate_protocols(self) -> set[str]:
        """Protocols every member supports."""
        n = len(self.members)
        return {name for name, count in self.supported_protocols.items() if count == n}

    def select_protocol(self) -> str:
        """Each member votes for its preferred candidate; the most votes win.

        Ties go to the protocol the leader prefers most (Kafka leaves ties unspecified), so the
        choice is deterministic.
        """
        if not self.members:
            raise RuntimeError(f"group {self.group_id!r}: no members to select a protocol for")
        candidates = self.candidate_protocols()
        votes = Counter(m.vote(candidates) for m in self.members.values())
        leader = self.members.get(self.leader_id) if self.leader_id else None
        preference = leader.protocol_names if leader is not None else sorted(votes)
        rank = {name: i for i, name in enumerate(preference)}
        return max(votes, key=lambda name: (votes[name], -rank.get(name, len(rank))))

    # --- rebalance

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if not m.awaiting_join]

    def has_all_members_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def maybe_elect_new_joined_leader(self) -> bool:
        """Make sure the leader is a member that rejoined; False if no member rejoined."""
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.awaiting_join:
            return True
        for member in self.members.values():
            if member.awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    def init_next_generation(self, now_ms: int) -> None:
        """End the join phase: a new generation, with a protocol if there are members."""
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self._compute_subscribed_topics()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = None
            self.transition_to(GroupState.EMPTY, now_ms)
        self.pending_sync = set(self.members)

    def _compute_subscribed_topics(self) -> set[str] | None:
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None or not self.members:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            found = subscribed_topics(member.metadata(self.protocol_name))
            if found is None:
                return None
            topics |= found
        return topics

    def is_subscribed_to(self, topic: str) -> bool:
        """Whether a member reads the topic; unknown subscriptions count as subscribed (safe side)."""
        return self.subscribed_topics is None or topic in self.subscribed_topics

    def current_member_metadata(self) -> list[tuple[str, str | None, bytes]]:
        """(member id, group instance id, metadata of the selected protocol): what the leader assigns from."""
        return [(m.member_id, m.group_instance_id, m.metadata(self.protocol_name)) for m in self.members.values()]
