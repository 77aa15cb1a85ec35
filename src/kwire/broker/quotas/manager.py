"""Enforcing client quotas: which quota a connection falls under, its measured rates, throttle times.

Follows Kafka's ClientQuotaManager / ClientRequestQuotaManager:

* A request is measured against the most specific quota set for its principal's user name and its
  client id, in Kafka's order: /users/<u>/clients/<c>, /users/<u>/clients/<default>, /users/<u>,
  /users/<default>/clients/<c>, /users/<default>/clients/<default>, /users/<default>,
  /clients/<c>, /clients/<default>.  Each quota key is looked up on its own.
* What is measured is shared by everyone the matching quota covers: a user's quota counts all of
  that user's clients together, a client id's all users with that client id.
* Produce counts the request's size (producer_byte_rate), Fetch the size of its answer
  (consumer_byte_rate; a throttled Fetch is answered empty and not counted, and a Fetch asks for
  no more than the quota lets through in its window), every request the time its handler ran on
  the event loop as a percentage of one second (request_percentage; a Produce with acks=0 is not
  counted there).  The throttle time of a request is the larger of its quotas'.
* connection_creation_rate (an ``ip`` entity, else the default ip) counts new connections per
  address (KIP-612); one over it is held unread and closed after its throttle time (network.py).
* Rates are sampled over ``quota.window.num`` windows of ``quota.window.size.seconds`` (11 and 1
  s, as Kafka), on ``now_ms`` (the event loop's clock; tests pass their own).
* controller_mutation_rate (KIP-599) bounds the partitions a client creates and deletes
  (``mutation_budget``, ``quotas.mutation``).
"""

from __future__ import annotations

import inspect
import ipaddress
import time
from collections.abc import Callable

from kwire.protocol.errors import ErrorCode
from kwire.protocol.quotas import CLIENT_ID, IP, USER, QuotaKey
from kwire.protocol.schema import api_key_for

from .mutation import MutationBudget, SpentCredit
from .rate import SampledRate
from .store import ClientQuotaStore

__all__ = ["ClientQuotaManager", "RequestMeter"]

WINDOW_NUM = 11  # quota.window.num
WINDOW_SIZE_S = 1  # quota.window.size.seconds
# A rate nobody recorded into for this long is dropped (Kafka expires quota sensors after an hour).
IDLE_EXPIRY_MS = 3600 * 1000
_SWEEP_ABOVE = 1024  # rates kept before idle ones are looked for

PRODUCE = api_key_for("Produce")
FETCH = api_key_for("Fetch")
_NS_TO_PERCENT = 100.0 / 1e9  # handler nanoseconds -> percent of one second (Kafka's request-time unit)
_ENFORCED = (QuotaKey.PRODUCER_BYTE_RATE, QuotaKey.CONSUMER_BYTE_RATE, QuotaKey.REQUEST_PERCENTAGE)


def _levels(user: str, client_id: str):
    """(entity, the measured rate's (user, client-id) tags) in Kafka's order of precedence."""
    yield ((CLIENT_ID, client_id), (USER, user)), (user, client_id)
    yield ((CLIENT_ID, None), (USER, user)), (user, client_id)
    yield ((USER, user),), (user, "")
    yield ((CLIENT_ID, client_id), (USER, None)), (user, client_id)
    yield ((CLIENT_ID, None), (USER, None)), (user, client_id)
    yield ((USER, None),), (user, "")
    yield ((CLIENT_ID, client_id),), ("", client_id)
    yield ((CLIENT_ID, None),), ("", client_id)


def _address(host: str | None) -> str | None:
    """An address in one spelling (an IPv4-mapped IPv6 address as IPv4), so that quotas match it."""
    if host is None:
        return None
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return str(address)


def user_of(principal: str) -> str:
    """The user name quotas know a principal by ("User:alice" -> "alice"), as Kafka's principal.getName()."""
    return principal.partition(":")[2] or principal


class ClientQuotaManager:
    """The quotas of ``store`` applied to requests; ``active`` while any quota kwire enforces is set."""

    def __init__(self, store: ClientQuotaStore, *, now_ms: Callable[[], float] | None = None,
                 samples: int = WINDOW_NUM, window_s: float = WINDOW_SIZE_S):
        self.store = store
        self.now_ms = now_ms or (lambda: time.monotonic() * 1000.0)
        self.samples = samples
        self.window_ms = window_s * 1000.0
        self._seen_version = -1
        self._resolved: dict[tuple[str, str, str], tuple[float, tuple] | None] = {}
        self._rates: dict[tuple, SampledRate] = {}
        self._active = False
        self._ip_quotas: dict[str | None, float] = {}  # normalised address (None: the default) -> connections/s
        self._credits: dict[tuple, SpentCredit] = {}  # controller_mutation_rate buckets, by the quota's tags
        self._refresh()

    @property
    def active(self) -> bool:
        """Whether any quota kwire enforces is set (else requests are not measured at all)."""
        if self._seen_version != self.store.version:
            self._refresh()
        return self._active

    def _refresh(self) -> None:
        if self._seen_version == self.store.version:
            return
        self._seen_version = self.store.version
        self._resolved.clear()
        entries = self.store.entries()
        self._active = any(key in values for values in entries.values() for key in _ENFORCED)
        self._ip_quotas = {_address(entity[0][1]): values[QuotaKey.CONNECTION_CREATION_RATE]
                           for entity, values in entries.items()
                           if entity[0][0] == IP and QuotaKey.CONNECTION_CREATION_RATE in values}

    @property
    def ip_active(self) -> bool:
        """Whether any connection_creation_rate quota is set (else new connections are not counted)."""
        if self._seen_version != self.store.version:
            self._refresh()
        return bool(self._ip_quotas)

    def connection_throttle_ms(self, host: str, now: float | None = None) -> int:
        """Count a new connection from ``host`` against its connection_creation_rate (its own, else the
        default ip's); the time to hold it before closing it when over (0: accepted).  As Kafka's
        ConnectionQuotas (KIP-612): a refused connection is not counted, and the wait is at most one
        window."""
        if self._seen_version != self.store.version:
            self._refresh()
        address = _address(host)
        bound = self._ip_quotas.get(address, self._ip_quotas.get(None))
        if bound is None:
            return 0
        now = self.now_ms() if now is None else now
        tags = (QuotaKey.CONNECTION_CREATION_RATE, address)
        rate = self._rates.get(tags) or self._rate(tags, now)
        rate.record(1.0, now)
        throttle = rate.throttle_ms(bound, now)
        if throttle:
            rate.record(-1.0, now)
            throttle = min(throttle, int(self.window_ms))
        return throttle

    def quota(self, key: str, user: str, client_id: str) -> tuple[float, tuple] | None:
        """The bound that applies to this user and client id for ``key`` and the tags of the rate it is
        measured by, or None (no quota)."""
        if self._seen_version != self.store.version:
            self._refresh()
        cache_key = (key, user, client_id)
        try:
            return self._resolved[cache_key]
        except KeyError:
            pass
        found = None
        for entity, tags in _levels(user, client_id):
            values = self.store.get(tuple(sorted(entity)))
            if values is not None and key in values:
                found = (values[key], (key, *tags))
                break
        if len(self._resolved) > 4 * _SWEEP_ABOVE:
            self._resolved.clear()
        self._resolved[cache_key] = found
        return found

    def _rate(self, tags: tuple, now: float) -> SampledRate:
        rate = self._rates.get(tags)
        if rate is None:
            if len(self._rates) >= _SWEEP_ABOVE:
                for old in [t for t, r in self._rates.items() if now - r.last_ms >= IDLE_EXPIRY_MS]:
                    del self._rates[old]
            rate = self._rates[tags] = SampledRate(self.samples, self.window_ms)
        return rate

    def record(self, key: str, user: str, client_id: str, value: float, now: float | None = None) -> int:
        """Count ``value`` against the quota for ``key``; the throttle time in ms (0: within it)."""
        found = self.quota(key, user, client_id)
        if found is None:
            return 0
        return self.record_found(found, value, self.now_ms() if now is None else now)

    def record_found(self, found: tuple[float, tuple], value: float, now: float) -> int:
        """``record`` for a quota already looked up (``quota``'s answer)."""
        bound, tags = found
        rate = self._rates.get(tags) or self._rate(tags, now)
        rate.record(value, now)
        throttle = rate.throttle_ms(bound, now)
        if throttle and tags[0] == QuotaKey.REQUEST_PERCENTAGE:
            throttle = min(throttle, int(self.window_ms))  # Kafka bounds request throttling by one window
        return throttle

    def mutation_budget(self, principal: str, client_id: str | None, *, strict: bool) -> MutationBudget | None:
        """The controller_mutation_rate budget of a CreateTopics, CreatePartitions or DeleteTopics
        request, or None when no such quota covers its client (``quotas.mutation``)."""
        found = self.quota(QuotaKey.CONTROLLER_MUTATION_RATE, user_of(principal), client_id or "")
        if found is None:
            return None
        rate, tags = found
        now = self.now_ms()
        credit = self._credits.get(tags)
        if credit is None:
            if len(self._credits) >= _SWEEP_ABOVE:  # buckets fully given back hold nothing: forget them
                for old in [t for t, c in self._credits.items() if c.settle(self._quota_rate(t), now) == 0]:
                    del self._credits[old]
            credit = self._credits[tags] = SpentCredit(now)
        return MutationBudget(credit, rate, rate * self.samples * self.window_ms / 1000.0, strict=strict,
                              now_ms=self.now_ms)

    def _quota_rate(self, tags: tuple) -> float:
        """The controller_mutation_rate a bucket's tags (key, user, client id) were made for, now."""
        found = self.quota(tags[0], tags[1], tags[2])
        return found[0] if found is not None else float("inf")

    def max_value_in_window(self, bound: float) -> float:
        """The most one request may count under ``bound`` without certainly being throttled (Kafka's
        maxValueInQuotaWindow, which bounds a Fetch's size)."""
        return bound * (self.samples - 1) * self.window_ms / 1000.0

    def meter(self, api_key: int, request, frame_size: int, principal: str, client_id: str | None) -> RequestMeter | None:
        """What measures one request, or None when no quota covers it."""
        user, client = user_of(principal), client_id or ""
        byte_key = QuotaKey.PRODUCER_BYTE_RATE if api_key == PRODUCE else \
            QuotaKey.CONSUMER_BYTE_RATE if api_key == FETCH else None
        by_bytes = self.quota(byte_key, user, client) if byte_key is not None else None
        by_time = self.quota(QuotaKey.REQUEST_PERCENTAGE, user, client)
        if by_bytes is None and by_time is None:
            return None
        if api_key == FETCH and by_bytes is not None:
            # Kafka asks for no more than the quota lets through in its window (else certainly throttled).
            most = int(self.max_value_in_window(by_bytes[0]))
            if request.max_bytes > most:
                request.max_bytes = max(most, 1)
        return RequestMeter(self, api_key, request, frame_size, byte_key, by_bytes, by_time)


class RequestMeter:
    """One request's measuring: ``call`` runs the handler timing it, ``finish`` counts the answer."""

    __slots__ = ("manager", "api_key", "request", "frame_size", "byte_key", "by_bytes", "by_time", "elapsed_ns")

    def __init__(self, manager: ClientQuotaManager, api_key: int, request, frame_size: int, byte_key: str | None,
                 by_bytes: tuple | None, by_time: tuple | None):
        """``by_bytes`` / ``by_time``: the byte-rate and request-percentage quotas (``quota``'s answers)."""
        self.manager = manager
        self.api_key = api_key
        self.request = request
        self.frame_size = frame_size
        self.byte_key = byte_key if by_bytes is not None else None
        self.by_bytes = by_bytes
        self.by_time = by_time
        self.elapsed_ns = 0

    @property
    def needs_size(self) -> bool:
        """Whether ``finish`` wants the encoded answer's size (a Fetch's byte rate counts it)."""
        return self.byte_key == QuotaKey.CONSUMER_BYTE_RATE

    def call(self, fn, ctx, request):
        """``fn(ctx, request)``, its run time counted; an awaitable result is wrapped so that its
        steps on the loop are counted too (not the time it waits)."""
        start = time.perf_counter_ns()
        try:
            result = fn(ctx, request)
        finally:
            self.elapsed_ns += time.perf_counter_ns() - start
        if self.by_time is not None and inspect.iscoroutine(result):
            return _Timed(result, self)
        return result

    def finish(self, response, size: int | None):
        """Count the request against its quotas: (the response to send, the throttle time in ms).
        ``size``: the encoded answer's size when ``needs_size``."""
        m = self.manager
        now = m.now_ms()
        by_time = self.by_time is not None and not (self.api_key == PRODUCE and self.request.acks == 0)
        time_throttle = m.record_found(self.by_time, self.elapsed_ns * _NS_TO_PERCENT, now) if by_time else 0
        if self.byte_key == QuotaKey.PRODUCER_BYTE_RATE:
            return response, max(time_throttle, m.record_found(self.by_bytes, self.frame_size, now))
        if self.byte_key == QuotaKey.CONSUMER_BYTE_RATE and response is not None:
            byte_throttle = m.record_found(self.by_bytes, size or 0, now)
            throttle = max(time_throttle, byte_throttle)
            if throttle:
                # Kafka answers a throttled Fetch with no data (and does not count what it would have sent).
                m.record_found(self.by_bytes, -(size or 0), now)
                response = type(response)(throttle_time_ms=throttle, error_code=ErrorCode.NONE, session_id=0, responses=[])
            return response, throttle
        return response, time_throttle


class _Timed:
    """Drives a coroutine, adding the time of each of its steps to a meter.  ``close()`` closes the
    coroutine (a request whose connection closed before it started)."""

    __slots__ = ("_coro", "_meter")

    def __init__(self, coro, meter: RequestMeter):
        self._coro = coro
        self._meter = meter

    def close(self) -> None:
        self._coro.close()

    def __await__(self):
        coro, meter = self._coro, self._meter
        send, thrown = None, None
        while True:
            start = time.perf_counter_ns()
            try:
                step = coro.throw(thrown) if thrown is not None else coro.send(send)
            except StopIteration as done:
                meter.elapsed_ns += time.perf_counter_ns() - start
                return done.value
            meter.elapsed_ns += time.perf_counter_ns() - start
            try:
                send, thrown = (yield step), None
            except BaseException as exc:  # noqa: BLE001 - passed on to the coroutine (cancellation too)
                send, thrown = None, exc
