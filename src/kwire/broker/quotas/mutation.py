"""controller_mutation_rate (KIP-599): how fast a client may create and delete partitions.

Follows Kafka's ControllerMutationQuotaManager:

* Each partition a CreateTopics, CreatePartitions or DeleteTopics request creates or deletes is
  one mutation, counted against the client's controller_mutation_rate (the same user / client-id
  precedence as the other client quotas).
* The count is a token bucket: a client may spend a burst of ``rate * quota.window.num *
  quota.window.size.seconds`` mutations at once, and credit comes back at ``rate`` per second
  (Kafka's TokenBucket stat: the credit spent, less what the rate has given back since).
* Strict (CreateTopics v6+, CreatePartitions v3+, DeleteTopics v5+, which know the error): a topic
  is refused with THROTTLING_QUOTA_EXCEEDED when the bucket is already overdrawn, and the answer
  carries the time until it no longer is as its throttle time; otherwise the topic is done and
  counted even if that overdraws the bucket (the client learns it at its next request).
  Permissive (older versions): every topic is done and counted, and an answer that leaves the
  bucket overdrawn carries the throttle time.  The connection is muted for it (KIP-219).
"""

from __future__ import annotations

from kwire.protocol.errors import ThrottlingQuotaExceededError

__all__ = ["MutationBudget", "SpentCredit"]

_MAX_THROTTLE_MS = 2**31 - 1  # throttle_time_ms is an int32


class SpentCredit:
    """Mutations spent and not yet given back by the rate (never below 0), as of ``at_ms``."""

    __slots__ = ("spent", "at_ms")

    def __init__(self, now_ms: float):
        self.spent = 0.0
        self.at_ms = now_ms

    def settle(self, rate: float, now_ms: float) -> float:
        """The credit still spent at ``now_ms``: what the rate gave back since the last look is gone."""
        if now_ms > self.at_ms:
            self.spent = max(0.0, self.spent - rate * (now_ms - self.at_ms) / 1000.0)
            self.at_ms = now_ms
        return self.spent


class MutationBudget:
    """One request's view of its client's controller_mutation_rate quota."""

    __slots__ = ("credit", "rate", "burst", "strict", "_now_ms", "throttle_ms")

    def __init__(self, credit: SpentCredit, rate: float, burst: float, *, strict: bool, now_ms):
        self.credit = credit
        self.rate = rate
        self.burst = burst
        self.strict = strict
        self._now_ms = now_ms
        self.throttle_ms = 0  # the answer's throttle time, the largest seen while recording

    def _overdraft_ms(self, spent: float) -> int:
        """How long until the rate has given back what ``spent`` is over the burst (0: not over)."""
        over = spent - self.burst
        if over <= 0:
            return 0
        if self.rate <= 0:  # nothing is ever given back
            return _MAX_THROTTLE_MS
        return min(round(over / self.rate * 1000.0), _MAX_THROTTLE_MS)

    def record(self, mutations: int) -> None:
        """Count ``mutations``; ThrottlingQuotaExceededError (strict only) when the bucket is already
        overdrawn, in which case nothing is counted and the topic must not be changed."""
        now = self._now_ms()
        spent = self.credit.settle(self.rate, now)
        if self.strict and spent > self.burst:
            self.throttle_ms = max(self.throttle_ms, self._overdraft_ms(spent))
            raise ThrottlingQuotaExceededError(
                f"the controller mutation quota ({self.rate:g} partition mutations/s) is exceeded; "
                f"retry after {self.throttle_ms} ms")
        self.credit.spent = spent + mutations
        if not self.strict:
            self.throttle_ms = max(self.throttle_ms, self._overdraft_ms(self.credit.spent))
