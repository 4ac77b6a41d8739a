"""Config administration: DescribeConfigs, AlterConfigs, IncrementalAlterConfigs.

Topic configs are per-topic overrides kept by the controller. Group configs (Kafka 4.x's GROUP
resource) are per-group overrides kept beside it (broker.server.group_configs). Broker configs are
described with their source (this broker's dynamic value, the cluster-wide dynamic default, the
properties file, the default). In ZooKeeper mode the keys Kafka updates at run time can be changed
for one broker or for all (broker.server.broker_configs; kept in ZooKeeper by the controller
object); a standalone broker refuses changes. Synonyms are listed as Kafka lists them: the
override, then the broker keys behind it.

With an authorizer, as Kafka's ConfigHelper and controller: describing a resource needs
DescribeConfigs, changing it AlterConfigs, on the topic for a topic (else
TOPIC_AUTHORIZATION_FAILED), on the group for a group (GROUP_AUTHORIZATION_FAILED), on the cluster
for a broker, a broker's loggers or client metrics (CLUSTER_AUTHORIZATION_FAILED); each resource
is decided alone, before anything else is looked at, and one refused is left unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from broker.config import BROKER_KEYS, DYNAMIC_BROKER_KEYS, IGNORED_DYNAMIC_KEYS, BrokerConfig
from broker.controller.base import ZooKeeperSupport
from broker.controller.zk.znodes import DEFAULT_ENTITY
from broker.protocol.api import ApiKey
from broker.protocol.constants import (
    MIRROR_NAME_CONFIG,
    MIRROR_STATE_CONFIG,
    AlterConfigOp,
    ConfigResourceType,
    ConfigSource,
)
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from broker.server.broker_configs import LIST_BROKER_KEYS, check_broker_update
from broker.server.context import CLUSTER_DENIED, RequestContext
from broker.server.group_configs import GROUP_CONFIGS, store_for, validate_group_configs
from broker.server.handlers.base import ApiHandler
from broker.server.topic_configs import (
    Synonym,
    broker_source,
    broker_synonyms,
    check_mirror_name_change,
    describe_topic_configs,
    mirror_name,
    topic_config_synonyms,
)
from broker.storage.topic_configs import TOPIC_CONFIG_NAMES, validate_topic_configs
from security.acl import CLUSTER_NAME, Operation, ResourceType

log = logging.getLogger(__name__)

_LIST_CONFIGS = frozenset({"cleanup.policy", "follower.replication.throttled.replicas",
                           "leader.replication.throttled.replicas"})

# The ACL resource a config resource is authorized on, and the error when it is not (Kafka's).
_ACL_RESOURCES: dict[int, tuple[ResourceType, ErrorCode, str]] = {
    ConfigResourceType.TOPIC: (ResourceType.TOPIC, ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed."),
    ConfigResourceType.GROUP: (ResourceType.GROUP, ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed."),
    **{kind: (ResourceType.CLUSTER, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED)
       for kind in (ConfigResourceType.BROKER, ConfigResourceType.BROKER_LOGGER, ConfigResourceType.CLIENT_METRICS)},
}


def _authorize(ctx: RequestContext, operation: Operation, resource_type: int, name: str) -> None:
    """Raise the resource's authorization error unless the principal may do ``operation`` on it
    (a resource type Kafka does not know is left to the checks after, which refuse it)."""
    acl = _ACL_RESOURCES.get(resource_type)
    if acl is None:
        return
    kind, code, message = acl
    if not ctx.authorize(operation, kind, CLUSTER_NAME if kind is ResourceType.CLUSTER else name):
        raise KafkaError(code, message)


Entry = DescribeConfigsResponse.DescribeConfigsResourceResult
# (name, value, source, synonyms): one described config.
Row = tuple[str, str | None, int, list[Synonym]]


def _broker_rows(config: BrokerConfig) -> list[Row]:
    rows: list[Row] = []
    for key in BROKER_KEYS:
        rows.append((key, config.value_text(key), broker_source(key, config), broker_synonyms(key, config)))
    # Kafka's dynamic keys that Causeway ignores are listed once set dynamically, as stored.
    for layer, source in ((config.dynamic_broker, ConfigSource.DYNAMIC_BROKER_CONFIG),
                          (config.dynamic_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)):
        for key in sorted(IGNORED_DYNAMIC_KEYS & set(layer)):
            if all(row[0] != key for row in rows):
                rows.append((key, layer[key], source, [(key, layer[key], source)]))
    return rows


def _default_rows(config: BrokerConfig) -> list[Row]:
    """The cluster-wide default resource (empty name): only what is set there, as Kafka lists it."""
    source = int(ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    rows: list[Row] = []
    for key, value in sorted(config.dynamic_default.items()):
        # Kafka leaves the per-broker layer out of the default resource's synonyms.
        synonyms: list[Synonym] = [(key, value, source)]
        if key in BROKER_KEYS:
            synonyms = [s for s in broker_synonyms(key, config) if s[2] != ConfigSource.DYNAMIC_BROKER_CONFIG]
        rows.append((key, value, source, synonyms))
    return rows


def _topic_rows(overrides: Mapping[str, str], config: BrokerConfig) -> list[Row]:
    return [(name, value, source, topic_config_synonyms(name, overrides, config))
            for name, value, source in describe_topic_configs(overrides, config)]


def _group_rows(overrides: Mapping[str, str]) -> list[Row]:
    rows: list[Row] = []
    for name in sorted(GROUP_CONFIGS):
        key = GROUP_CONFIGS[name]
        synonyms: list[Synonym] = [(key.broker_key, key.default, ConfigSource.DEFAULT_CONFIG)]
        if name in overrides:
            synonyms.insert(0, (name, overrides[name], ConfigSource.GROUP_CONFIG))
        rows.append((name, overrides.get(name, key.default), synonyms[0][2], synonyms))
    return rows


async def _describe_one(
    ctx: RequestContext,
    resource: DescribeConfigsRequest.DescribeConfigsResource,
    include_synonyms: bool,
) -> DescribeConfigsResponse.DescribeConfigsResult:
    config = ctx.config
    result = DescribeConfigsResponse.DescribeConfigsResult(
        error_code=ErrorCode.NONE,
        resource_type=resource.resource_type,
        resource_name=resource.resource_name,
        configs=[],
    )
    rows: list[Row]
    read_only = False
    try:
        _authorize(ctx, Operation.DESCRIBE_CONFIGS, resource.resource_type, resource.resource_name)
    except KafkaError as exc:
        result.error_code, result.error_message = exc.code, exc.message or None
        return result
    if resource.resource_type == ConfigResourceType.TOPIC:
        topic = ctx.services.controller.topics().get(resource.resource_name)
        if topic is None:
            result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            result.error_message = f"Topic '{resource.resource_name}' does not exist."
            return result
        rows = _topic_rows(topic.configs, config)
    elif resource.resource_type == ConfigResourceType.BROKER:
        if resource.resource_name not in ("", str(config.broker_id)):
            result.error_code = ErrorCode.INVALID_REQUEST
            result.error_message = f"Unexpected broker id {resource.resource_name}"
            return result
        rows = _broker_rows(config) if resource.resource_name else _default_rows(config)
    elif resource.resource_type == ConfigResourceType.GROUP:
        # As Kafka: a group's configs are described whether or not the group exists.
        if not resource.resource_name:
            result.error_code = ErrorCode.INVALID_REQUEST
            result.error_message = "Group name must not be empty"
            return result
        try:
            overrides = await store_for(ctx.services.controller, config).get(resource.resource_name)
        except KafkaError as exc:
            result.error_code, result.error_message = exc.code, exc.message or None
            return result
        rows = _group_rows(overrides)
    else:
        result.error_code = ErrorCode.INVALID_REQUEST
        result.error_message = f"Unsupported resource type {resource.resource_type}"
        return result
    keys = resource.configuration_keys
    wanted = None if keys is None else set(keys)
    for name, value, source, synonyms in rows:
        if wanted is not None and name not in wanted:
            continue
        entry = Entry(
            name=name,
            value=value,
            read_only=read_only or (resource.resource_type == ConfigResourceType.BROKER
                                    and name not in DYNAMIC_BROKER_KEYS and name not in IGNORED_DYNAMIC_KEYS),
            is_default=source == ConfigSource.DEFAULT_CONFIG,
            config_source=source,
            is_sensitive=False,
            synonyms=[],
        )
        if include_synonyms:
            entry.synonyms = [DescribeConfigsResponse.DescribeConfigsSynonym(name=n, value=v, source=src)
                              for n, v, src in synonyms]
        result.configs.append(entry)
    return result


async def describe_configs(ctx: RequestContext, request: DescribeConfigsRequest) -> DescribeConfigsResponse:
    synonyms = ctx.version >= 1 and request.include_synonyms
    return DescribeConfigsResponse(results=[await _describe_one(ctx, r, synonyms) for r in request.resources])


async def _apply_topic_configs(
    ctx: RequestContext, name: str, new_overrides: Mapping[str, str], validate_only: bool
) -> None:
    current = _topic_overrides(ctx, name)
    check_mirror_name_change(name, current, new_overrides)
    validated = validate_topic_configs(new_overrides, ctx.config)
    if not validate_only:
        await ctx.services.controller.set_topic_configs(name, validated)
        owner = mirror_name(current)
        if owner is not None and mirror_name(validated) is None:
            log.info("topic %s promoted: no longer the mirror topic of mirror %s (%s deleted); producers may "
                     "write to it", name, owner, MIRROR_NAME_CONFIG)


def _topic_overrides(ctx: RequestContext, name: str) -> dict[str, str]:
    topic = ctx.services.controller.topics().get(name)
    if topic is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
    return dict(topic.configs)


def _broker_store(ctx: RequestContext) -> ZooKeeperSupport:
    """Where dynamic broker configs live: ZooKeeper (``/config/brokers``)."""
    zk = ctx.services.controller.zookeeper()
    if zk is None:
        # Standalone: no shared store to keep them in, and nothing else would apply them.
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Broker configs are static in Causeway; restart with new values")
    return zk


def _broker_entity(ctx: RequestContext, name: str) -> str:
    """The znode name under /config/brokers of a BROKER resource: its id, or <default> for ""."""
    if name == "":
        return DEFAULT_ENTITY
    if name != str(ctx.config.broker_id):
        # Clients send a broker's configs to that broker (Kafka's admin client does).
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         f"Unexpected broker id, expected {ctx.config.broker_id}, but received {name}")
    return name


def _refuse_unalterable(ctx: RequestContext, resource_type: int) -> None:
    if resource_type == ConfigResourceType.BROKER:
        _broker_store(ctx)
        return
    if resource_type not in (ConfigResourceType.TOPIC, ConfigResourceType.GROUP):
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type {resource_type}")


async def _current(ctx: RequestContext, resource_type: int, name: str) -> dict[str, str]:
    """The resource's overrides now (a topic must exist; a group need not, as in Kafka)."""
    if resource_type == ConfigResourceType.BROKER:
        return await _broker_store(ctx).broker_configs(_broker_entity(ctx, name))
    if resource_type == ConfigResourceType.GROUP:
        if not name:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Group name must not be empty")
        return await store_for(ctx.services.controller, ctx.config).get(name)
    return _topic_overrides(ctx, name)


async def _apply(ctx: RequestContext, resource_type: int, name: str, overrides: Mapping[str, str | None],
                 validate_only: bool) -> None:
    if resource_type == ConfigResourceType.GROUP:
        validated = validate_group_configs(overrides)
        if not validate_only:
            await store_for(ctx.services.controller, ctx.config).set(name, validated)
    elif resource_type == ConfigResourceType.BROKER:
        store, entity = _broker_store(ctx), _broker_entity(ctx, name)
        # The other dynamic layer, as ZooKeeper has it now: the value is checked as it will run.
        other = await store.broker_configs(str(ctx.config.broker_id) if entity == DEFAULT_ENTITY else DEFAULT_ENTITY)
        checked = check_broker_update(name, overrides, ctx.config, other)
        if not validate_only:
            await store.set_broker_configs(entity, checked)
    else:
        await _apply_topic_configs(ctx, name, overrides, validate_only)  # type: ignore[arg-type]


async def alter_configs(ctx: RequestContext, request: AlterConfigsRequest) -> AlterConfigsResponse:
    responses = []
    for resource in request.resources:
        response = AlterConfigsResponse.AlterConfigsResourceResponse(
            error_code=ErrorCode.NONE, resource_type=resource.resource_type, resource_name=resource.resource_name
        )
        try:
            _authorize(ctx, Operation.ALTER_CONFIGS, resource.resource_type, resource.resource_name)
            _refuse_unalterable(ctx, resource.resource_type)
            await _current(ctx, resource.resource_type, resource.resource_name)  # existence check
            # AlterConfigs replaces the whole set of overrides; but a mirror topic stays one unless
            # its causeway.mirror.name is deleted explicitly (IncrementalAlterConfigs DELETE): a tool
            # that rewrites every override must not promote it by leaving the key out.
            new = {c.name: c.value for c in resource.configs}
            if resource.resource_type == ConfigResourceType.TOPIC and MIRROR_NAME_CONFIG not in new:
                current = _topic_overrides(ctx, resource.resource_name)
                owner = mirror_name(current)
                if owner is not None:
                    new[MIRROR_NAME_CONFIG] = owner
                    # Nor resume a paused one: only `causeway mirror resume` (a DELETE) does.
                    if MIRROR_STATE_CONFIG in current and MIRROR_STATE_CONFIG not in new:
                        new[MIRROR_STATE_CONFIG] = current[MIRROR_STATE_CONFIG]
            await _apply(ctx, resource.resource_type, resource.resource_name, new, request.validate_only)
        except KafkaError as exc:
            response.error_code = exc.code
            response.error_message = exc.message or None
        responses.append(response)
    return AlterConfigsResponse(responses=responses)


async def incremental_alter_configs(
    ctx: RequestContext, request: IncrementalAlterConfigsRequest
) -> IncrementalAlterConfigsResponse:
    responses = []
    for resource in request.resources:
        response = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse(
            error_code=ErrorCode.NONE, resource_type=resource.resource_type, resource_name=resource.resource_name
        )
        try:
            kind, name = resource.resource_type, resource.resource_name
            _authorize(ctx, Operation.ALTER_CONFIGS, kind, name)
            _refuse_unalterable(ctx, kind)
            overrides = await _current(ctx, kind, name)
            lists = _LIST_CONFIGS
            known: frozenset[str] | None
            if kind == ConfigResourceType.GROUP:
                known, what = frozenset(GROUP_CONFIGS), "group"
                effective = {k: overrides.get(k, key.default) for k, key in GROUP_CONFIGS.items()}
            elif kind == ConfigResourceType.BROKER:
                known, what, lists = None, "broker", LIST_BROKER_KEYS  # names checked with the values
                effective = {k: ctx.config.value_text(k) or "" for k in LIST_BROKER_KEYS}
            else:
                known, what = TOPIC_CONFIG_NAMES, "topic"
                effective = {n: value for n, value, _ in describe_topic_configs(overrides, ctx.config)}
            for op in resource.configs:
                if known is not None and op.name not in known:
                    raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown {what} config name: {op.name}")
                if op.config_operation == AlterConfigOp.SET:
                    if op.value is None:
                        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Null value for {op.name}")
                    overrides[op.name] = op.value
                elif op.config_operation == AlterConfigOp.DELETE:
                    overrides.pop(op.name, None)
                elif op.config_operation in (AlterConfigOp.APPEND, AlterConfigOp.SUBTRACT):
                    if kind == ConfigResourceType.GROUP or op.name not in lists:
                        raise KafkaError(ErrorCode.INVALID_CONFIG, f"{op.name} is not a list config")
                    items = [x for x in overrides.get(op.name, effective.get(op.name, "")).split(",") if x]
                    change = [x for x in (op.value or "").split(",") if x]
                    if op.config_operation == AlterConfigOp.APPEND:
                        items += [x for x in change if x not in items]
                    else:
                        items = [x for x in items if x not in change]
                    overrides[op.name] = ",".join(items)
                else:
                    raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown config operation {op.config_operation}")
            await _apply(ctx, kind, name, overrides, request.validate_only)
        except KafkaError as exc:
            response.error_code = exc.code
            response.error_message = exc.message or None
        responses.append(response)
    return IncrementalAlterConfigsResponse(responses=responses)


HANDLERS = (
    ApiHandler(ApiKey.DESCRIBE_CONFIGS, 0, 4, describe_configs),
    ApiHandler(ApiKey.ALTER_CONFIGS, 0, 2, alter_configs),
    ApiHandler(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, 1, incremental_alter_configs),
)
