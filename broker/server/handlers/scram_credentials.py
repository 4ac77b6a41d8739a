"""DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554), as Kafka answers them in
ZooKeeper mode: credentials in ``/config/users/<user>``, or a standalone broker's users file.

With an authorizer, describing needs Describe on the cluster, altering Alter on the cluster,
checked first (CLUSTER_AUTHORIZATION_FAILED: for the request and each user named, as Kafka's
error answers; nothing read or changed)."""

from __future__ import annotations

from collections import Counter

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.messages import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)
from broker.server.context import CLUSTER_DENIED, RequestContext
from broker.server.handlers.base import ApiHandler
from security.acl import Operation
from security.scram import MAX_ITERATIONS, MECHANISMS, MIN_ITERATIONS, ScramCredential

_BY_NUMBER = {number: name for name, (number, _) in MECHANISMS.items()}
_NO_STORE = "this broker keeps no SCRAM credentials"

DescribeResult = DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult
AlterResult = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult


def _infos(configs: dict[str, str]) -> list[DescribeUserScramCredentialsResponse.CredentialInfo]:
    infos = []
    for name, (number, _) in MECHANISMS.items():
        text = configs.get(name)
        if text is None:
            continue
        try:
            iterations = ScramCredential.from_text(text).iterations
        except ValueError:
            continue  # a damaged credential authenticates nobody; described as absent
        infos.append(DescribeUserScramCredentialsResponse.CredentialInfo(mechanism=number, iterations=iterations))
    return infos


async def describe(ctx: RequestContext, request: DescribeUserScramCredentialsRequest,
                   ) -> DescribeUserScramCredentialsResponse:
    if not ctx.authorize_cluster(Operation.DESCRIBE):
        denied = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return DescribeUserScramCredentialsResponse(error_code=denied, error_message=CLUSTER_DENIED, results=[
            DescribeResult(user="", error_code=denied, error_message=CLUSTER_DENIED) for _ in request.users or ()])
    users = ctx.services.users
    if users is None:
        return DescribeUserScramCredentialsResponse(error_code=ErrorCode.UNSUPPORTED_VERSION,
                                                    error_message=_NO_STORE)
    asked = [user.name for user in request.users or []]
    counts = Counter(asked)
    results = []
    try:
        for user in dict.fromkeys(asked) if asked else await users.users_with_configs():
            if counts[user] > 1:
                results.append(DescribeResult(user=user, error_code=ErrorCode.DUPLICATE_RESOURCE, error_message=(
                    "Cannot describe SCRAM credentials for the same user twice in a single request")))
                continue
            infos = _infos(await users.user_configs(user))
            if infos:
                results.append(DescribeResult(user=user, error_code=ErrorCode.NONE, error_message=None,
                                              credential_infos=infos))
            elif asked:
                results.append(DescribeResult(user=user, error_code=ErrorCode.RESOURCE_NOT_FOUND, error_message=(
                    "Attempt to describe a user credential that does not exist")))
    except KafkaError as exc:
        return DescribeUserScramCredentialsResponse(error_code=exc.code, error_message=exc.message)
    return DescribeUserScramCredentialsResponse(error_code=ErrorCode.NONE, error_message=None, results=results)


def _refusal(request: AlterUserScramCredentialsRequest, user: str) -> tuple[ErrorCode, str] | None:
    """Kafka's checks of one user's changes, in its order."""
    deletions = [d for d in request.deletions if d.name == user]
    upsertions = [u for u in request.upsertions if u.name == user]
    if not user:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    mechanisms = [d.mechanism for d in deletions] + [u.mechanism for u in upsertions]
    if any(m not in _BY_NUMBER for m in mechanisms):
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    if len(mechanisms) != len(set(mechanisms)):
        return ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request"
    for upsertion in upsertions:
        if upsertion.iterations < MIN_ITERATIONS:
            return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
        if upsertion.iterations > MAX_ITERATIONS:
            return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
        if not upsertion.salt or not upsertion.salted_password:
            return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty"
    return None


async def alter(ctx: RequestContext, request: AlterUserScramCredentialsRequest) -> AlterUserScramCredentialsResponse:
    store = ctx.services.users
    users = list(dict.fromkeys([d.name for d in request.deletions] + [u.name for u in request.upsertions]))
    if not ctx.authorize_cluster(Operation.ALTER):
        return AlterUserScramCredentialsResponse(results=[
            AlterResult(user=user, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=CLUSTER_DENIED)
            for user in sorted(users)])
    if store is None:
        return AlterUserScramCredentialsResponse(results=[
            AlterResult(user=user, error_code=ErrorCode.UNSUPPORTED_VERSION, error_message=_NO_STORE)
            for user in users])
    results = []
    for user in users:
        refusal = _refusal(request, user)
        if refusal is not None:
            results.append(AlterResult(user=user, error_code=refusal[0], error_message=refusal[1]))
            continue
        try:
            configs = await store.user_configs(user)
            missing = [d for d in request.deletions if d.name == user and _BY_NUMBER[d.mechanism] not in configs]
            if missing:
                results.append(AlterResult(user=user, error_code=ErrorCode.RESOURCE_NOT_FOUND, error_message=(
                    "Attempt to delete a user credential that does not exist")))
                continue
            for deletion in (d for d in request.deletions if d.name == user):
                configs.pop(_BY_NUMBER[deletion.mechanism], None)
            for upsertion in (u for u in request.upsertions if u.name == user):
                mechanism = _BY_NUMBER[upsertion.mechanism]
                configs[mechanism] = ScramCredential.from_salted_password(
                    mechanism, upsertion.salt, upsertion.salted_password, upsertion.iterations).to_text()
            await store.set_user_configs(user, configs)
        except KafkaError as exc:
            results.append(AlterResult(user=user, error_code=exc.code, error_message=exc.message))
            continue
        results.append(AlterResult(user=user, error_code=ErrorCode.NONE, error_message=None))
    return AlterUserScramCredentialsResponse(results=results)


HANDLERS = (
    ApiHandler(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 0, describe),
    ApiHandler(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, 0, alter),
)
