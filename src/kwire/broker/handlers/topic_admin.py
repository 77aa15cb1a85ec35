"""CreateTopics, DeleteTopics, CreatePartitions, and the topic creation used by auto-create."""

from __future__ import annotations

from kwire.protocol import ApiKey, messages
from kwire.protocol.errors import (
    ErrorCode,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicException,
    KafkaError,
    TopicAlreadyExistsError,
    TopicAuthorizationFailedError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from kwire.protocol.quotas import mutation_quota_is_strict

from ..auth.acls import AclOperation, ResourceType
from ..quotas.mutation import MutationBudget
from ..storage import validate_topic_name
from ..topics import is_internal
from .common import storage_error
from .configs import check_topic_configs, topic_config_entries
from .registry import handler

CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.CREATE_PARTITIONS
MAX_PARTITIONS = 100_000  # a sanity bound: each partition is a directory with open files


def _check_partitions(broker, name: str, count: int, replication: int, assignments: list[list[int]]) -> None:
    if count < 1 or count > MAX_PARTITIONS:
        raise InvalidPartitionsError(f"number of partitions must be 1-{MAX_PARTITIONS}, got {count}")
    if replication not in (-1, 1):
        raise InvalidReplicationFactorError(
            f"replication factor {replication} is larger than the number of brokers (1)")
    node = broker.config.node_id
    for replicas in assignments:
        if replicas != [node]:
            raise InvalidReplicaAssignmentError(f"replica assignment {replicas} for {name!r}: "
                                                f"the only broker is {node}")


def create_topic(broker, name: str, partitions: int, configs: dict[str, str], *, validate_only: bool = False,
                 budget: MutationBudget | None = None):
    """Create a topic and its partition logs (all checks first: nothing changes on refusal).
    ``budget``: the client's controller_mutation_rate, charged once the topic passed every check."""
    validate_topic_name(name)
    if name in broker.topics:
        raise TopicAlreadyExistsError(f"topic {name!r} already exists")
    if is_internal(name):
        # As Kafka refuses __cluster_metadata: a reserved name is never a plain topic.
        raise InvalidRequestError(f"Creation of internal topic {name} is prohibited.")
    _check_partitions(broker, name, partitions, -1, [])
    clean = check_topic_configs(broker, configs)
    if validate_only:
        return None
    if budget is not None:
        budget.record(partitions)
    try:
        info = broker.topics.add(name, partitions, clean)
    except OSError as exc:
        raise storage_error(exc, f"creating topic {name!r}", broker.topics.path) from None
    cfg = broker.log_config_for(info)
    try:
        for p in range(partitions):
            broker.logs.create_partition(name, p, cfg, exist_ok=True)
    except OSError as exc:
        failure = storage_error(exc, f"creating topic {name!r}", broker.data_dir)
        _undo_create(broker, name)
        raise failure from None
    return info


def _undo_create(broker, name: str) -> None:
    """Take back a topic whose partitions could not all be made.  If even that cannot be
    written, the broker's start-up check creates the missing partitions from the topic list."""
    try:
        broker.logs.delete_topic(name)
        broker.topics.remove(name)
    except OSError as exc:
        storage_error(exc, f"removing half-created topic {name!r}")


def _mutation_budget(ctx):
    """This request's share of its client's controller_mutation_rate (KIP-599), or None without one."""
    manager = getattr(ctx.broker, "quota_manager", None)
    if manager is None:
        return None
    return manager.mutation_budget(ctx.principal, ctx.client_id,
                                   strict=mutation_quota_is_strict(ctx.api_key, ctx.api_version))


def _authorize(ctx, operation: AclOperation, topic: str) -> None:
    if not ctx.allowed(operation, ResourceType.TOPIC, topic):
        raise TopicAuthorizationFailedError(f"{ctx.principal} may not {operation.name} topic {topic!r}")


@handler(CREATE_TOPICS, 0)
def handle_create_topics(ctx, request):
    R = messages.CreateTopicsResponse
    broker = ctx.broker
    results = []
    seen: set[str] = set()
    cluster_create = ctx.allowed(AclOperation.CREATE, ResourceType.CLUSTER)
    budget = _mutation_budget(ctx)
    for t in request.topics:
        result = R.CreatableTopicResult(name=t.name, error_code=ErrorCode.NONE, error_message=None, num_partitions=-1,
                                        replication_factor=-1, configs=None, topic_config_error_code=ErrorCode.NONE)
        try:
            if t.name in seen:
                raise InvalidRequestError(f"topic {t.name!r} appears more than once in the request")
            seen.add(t.name)
            if not cluster_create:
                _authorize(ctx, AclOperation.CREATE, t.name)
            validate_topic_name(t.name)
            if t.assignments:
                if t.num_partitions != -1 or t.replication_factor != -1:
                    raise InvalidRequestError("give either assignments or partitions and replication factor")
                indexes = sorted(a.partition_index for a in t.assignments)
                if indexes != list(range(len(indexes))):
                    raise InvalidReplicaAssignmentError(f"assignment partitions {indexes} are not 0..n-1")
                count = len(indexes)
                _check_partitions(broker, t.name, count, -1, [list(a.broker_ids) for a in t.assignments])
            else:
                count = broker.config.default_partitions if t.num_partitions == -1 else t.num_partitions
                _check_partitions(broker, t.name, count, t.replication_factor, [])
            configs = {c.name: c.value for c in t.configs}
            info = create_topic(broker, t.name, count, configs, validate_only=request.validate_only, budget=budget)
            result.num_partitions, result.replication_factor = count, 1
            if info is not None:
                result.topic_id = info.topic_id
            result.configs = [R.CreatableTopicResult.CreatableTopicConfigs(
                name=e.name, value=e.value, read_only=e.read_only, config_source=e.source,
                is_sensitive=e.sensitive) for e in topic_config_entries(broker, info.configs if info else configs)]
        except KafkaError as exc:
            result.error_code, result.error_message = exc.code, exc.message
        results.append(result)
    return R(throttle_time_ms=budget.throttle_ms if budget is not None else 0, topics=results)


@handler(DELETE_TOPICS, 0)
def handle_delete_topics(ctx, request):
    R = messages.DeleteTopicsResponse
    broker = ctx.broker
    wanted = ([(t.name, t.topic_id) for t in request.topics] if ctx.api_version >= 6
              else [(n, None) for n in request.topic_names])
    budget = _mutation_budget(ctx)
    results = []
    for name, topic_id in wanted:
        result = R.DeletableTopicResult(name=name, error_code=ErrorCode.NONE, error_message=None)
        if topic_id is not None and topic_id.int:
            result.topic_id = topic_id
        try:
            if name is None:
                info = broker.topics.by_id(topic_id)
                if info is None:
                    raise UnknownTopicIdError(f"no topic with id {topic_id}")
                name = result.name = info.name
            _authorize(ctx, AclOperation.DELETE, name)
            info = broker.topics.get(name)
            if info is None:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            result.topic_id = info.topic_id
            if info.internal:
                raise InvalidTopicException(f"topic {name!r} is internal: the broker's coordinators keep their "
                                            "state in it, so it cannot be deleted")
            if budget is not None:
                budget.record(info.partitions)
            # Registry first: a crash between the two leaves orphan logs, which startup removes.
            broker.topics.remove(name)
            broker.logs.delete_topic(name)
            broker.coordinator.on_topic_deleted(name)  # a new topic of that name starts without offsets
        except KafkaError as exc:
            result.error_code, result.error_message = exc.code, exc.message
        results.append(result)
    return R(throttle_time_ms=budget.throttle_ms if budget is not None else 0, responses=results)


@handler(CREATE_PARTITIONS, 0)
def handle_create_partitions(ctx, request):
    R = messages.CreatePartitionsResponse
    broker = ctx.broker
    budget = _mutation_budget(ctx)
    results = []
    for t in request.topics:
        result = R.CreatePartitionsTopicResult(name=t.name, error_code=ErrorCode.NONE, error_message=None)
        try:
            _authorize(ctx, AclOperation.ALTER, t.name)
            info = broker.topics.get(t.name)
            if info is None:
                raise UnknownTopicOrPartitionError(f"topic {t.name!r} does not exist")
            if info.internal:
                # Its keys are placed by hash modulo the partition count: more partitions would
                # lose the coordinators' state.
                raise InvalidTopicException(f"topic {t.name!r} is internal: its partition count cannot change")
            if t.count <= info.partitions:
                raise InvalidPartitionsError(f"topic {t.name!r} has {info.partitions} partitions; "
                                             f"the new count {t.count} must be larger")
            new = t.count - info.partitions
            assignments = [list(a.broker_ids) for a in (t.assignments or [])]
            if assignments and len(assignments) != new:
                raise InvalidReplicaAssignmentError(f"{len(assignments)} assignments for {new} new partitions")
            _check_partitions(broker, t.name, t.count, -1, assignments)
            if not request.validate_only:
                if budget is not None:
                    budget.record(new)
                cfg = broker.log_config_for(info)
                for p in range(info.partitions, t.count):
                    broker.logs.create_partition(t.name, p, cfg, exist_ok=True)
                broker.topics.set_partitions(t.name, t.count)
        except KafkaError as exc:
            result.error_code, result.error_message = exc.code, exc.message
        results.append(result)
    return R(throttle_time_ms=budget.throttle_ms if budget is not None else 0, results=results)
