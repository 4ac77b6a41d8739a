"""The one way a job opens a client of its own (metadata, ListOffsets, the admin calls, produce,
fetch): with the TLS and SASL settings of the job's `kafka.security.protocol`, `kafka.sasl.*` and
`kafka.ssl.*` options, the same its Spark reads and writes use, so every part of a job logs in to
a secured cluster the same way (security/client.py builds the settings)."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

from broker.client import Client, open_client
from pipeline.options import SecurityProps, client_security_of

__all__ = ["open_job_client"]


def open_job_client(bootstrap: str, security: SecurityProps, *, client_id: str = "causeway-pipeline",
                    request_timeout_s: float = 30.0,
                    connect_timeout_s: float = 10.0) -> AbstractAsyncContextManager[Client]:
    """A client of `bootstrap` that logs in with `security` (ReadOptions.security: the kafka.*
    security options without their prefix; none: plaintext). Raises PipelineError naming the
    option the client cannot use, ValueError for a malformed bootstrap list."""
    return open_client(bootstrap, client_id=client_id, security=client_security_of(security),
                       request_timeout_s=request_timeout_s, connect_timeout_s=connect_timeout_s)
