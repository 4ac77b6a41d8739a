"""Config administration: DescribeConfigs, AlterConfigs, IncrementalAlterConfigs.

Topic configs are per-topic overrides kept by the controller. Broker configs are static (from
the properties file and flags) and described read-only; changing them at run time is refused.
"""

from __future__ import annotations

from collections.abc import Mapping

from broker.config import BrokerConfig
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from broker.server.context import RequestContext
from broker.server.handlers.base import ApiHandler
from broker.server.topic_configs import (
    TOPIC_CONFIG_NAMES,
    ConfigSource,
    describe_topic_configs,
    validate_topic_configs,
)

# ConfigResource.Type ids.
TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8

# IncrementalAlterConfigs operations.
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_LIST_CONFIGS = frozenset({"cleanup.policy", "follower.replication.throttled.replicas",
                           "leader.replication.throttled.replicas"})

Entry = DescribeConfigsResponse.DescribeConfigsResourceResult


def _broker_rows(config: BrokerConfig) -> list[tuple[str, str | None, int]]:
    from broker.config import _KEYS  # the one table of broker keys

    rows = []
    for spec in _KEYS:
        source = ConfigSource.STATIC_BROKER_CONFIG if spec.name in config.explicit else ConfigSource.DEFAULT_CONFIG
        rows.append((spec.name, config.value_text(spec.name), source))
    return rows


def _describe_one(
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
    rows: list[tuple[str, str | None, int]]
    read_only = False
    if resource.resource_type == TOPIC:
        topic = ctx.services.controller.topics().get(resource.resource_name)
        if topic is None:
            result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            result.error_message = f"Topic '{resource.resource_name}' does not exist."
            return result
        rows = list(describe_topic_configs(topic.configs, config))
    elif resource.resource_type == BROKER:
        if resource.resource_name not in ("", str(config.broker_id)):
            result.error_code = ErrorCode.INVALID_REQUEST
            result.error_message = f"Unexpected broker id {resource.resource_name}"
            return result
        rows = _broker_rows(config)
        read_only = True
    else:
        result.error_code = ErrorCode.INVALID_REQUEST
        result.error_message = f"Unsupported resource type {resource.resource_type}"
        return result
    keys = resource.configuration_keys
    wanted = None if keys is None else set(keys)
    for name, value, source in rows:
        if wanted is not None and name not in wanted:
            continue
        entry = Entry(
            name=name,
            value=value,
            read_only=read_only,
            is_default=source == ConfigSource.DEFAULT_CONFIG,
            config_source=source,
            is_sensitive=False,
            synonyms=[],
        )
        if include_synonyms:
            entry.synonyms = [DescribeConfigsResponse.DescribeConfigsSynonym(name=name, value=value, source=source)]
        result.configs.append(entry)
    return result


async def describe_configs(ctx: RequestContext, request: DescribeConfigsRequest) -> DescribeConfigsResponse:
    synonyms = ctx.version >= 1 and request.include_synonyms
    return DescribeConfigsResponse(results=[_describe_one(ctx, r, synonyms) for r in request.resources])


async def _apply_topic_configs(
    ctx: RequestContext, name: str, new_overrides: Mapping[str, str], validate_only: bool
) -> None:
    validated = validate_topic_configs(new_overrides, ctx.config)
    if not validate_only:
        await ctx.services.controller.set_topic_configs(name, validated)


def _topic_overrides(ctx: RequestContext, name: str) -> dict[str, str]:
    topic = ctx.services.controller.topics().get(name)
    if topic is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
    return dict(topic.configs)


def _refuse_non_topic(resource_type: int) -> None:
    if resource_type == BROKER:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Broker configs are static in Causeway; restart with new values")
    if resource_type != TOPIC:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type {resource_type}")


async def alter_configs(ctx: RequestContext, request: AlterConfigsRequest) -> AlterConfigsResponse:
    responses = []
    for resource in request.resources:
        response = AlterConfigsResponse.AlterConfigsResourceResponse(
            error_code=ErrorCode.NONE, resource_type=resource.resource_type, resource_name=resource.resource_name
        )
        try:
            _refuse_non_topic(resource.resource_type)
            _topic_overrides(ctx, resource.resource_name)  # existence check
            # AlterConfigs replaces the whole set of overrides.
            new = {c.name: c.value for c in resource.configs}
            await _apply_topic_configs(ctx, resource.resource_name, new, request.validate_only)  # type: ignore[arg-type]
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
            _refuse_non_topic(resource.resource_type)
            overrides = _topic_overrides(ctx, resource.resource_name)
            effective = {name: value for name, value, _ in describe_topic_configs(overrides, ctx.config)}
            for op in resource.configs:
                if op.name not in TOPIC_CONFIG_NAMES:
                    raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {op.name}")
                if op.config_operation == SET:
                    if op.value is None:
                        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Null value for {op.name}")
                    overrides[op.name] = op.value
                elif op.config_operation == DELETE:
                    overrides.pop(op.name, None)
                elif op.config_operation in (APPEND, SUBTRACT):
                    if op.name not in _LIST_CONFIGS:
                        raise KafkaError(ErrorCode.INVALID_CONFIG, f"{op.name} is not a list config")
                    items = [x for x in overrides.get(op.name, effective.get(op.name, "")).split(",") if x]
                    change = [x for x in (op.value or "").split(",") if x]
                    if op.config_operation == APPEND:
                        items += [x for x in change if x not in items]
                    else:
                        items = [x for x in items if x not in change]
                    overrides[op.name] = ",".join(items)
                else:
                    raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown config operation {op.config_operation}")
            await _apply_topic_configs(ctx, resource.resource_name, overrides, request.validate_only)
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
