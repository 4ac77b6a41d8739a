"""A record's identity, as Spark columns: what a copy of it must keep, hashed.

The audit pairs a mirror's source and target records by it, the copy job finds the records of a
range a target already holds by it, and the lag job pairs an mm2 copy with its source record by
it (without the timestamp: a LogAppendTime copy changes exactly that). Two xxhash64 chains with
different seeds make 128 bits of identity; null and empty keys, values and header values are
told apart by hashing their nullness too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["IDENTITY_SEED", "identity_hashes", "with_identity"]

IDENTITY_SEED = 0x5EED  # the second hash chain starts from another seed than Spark's default (42)


def identity_hashes(*, with_timestamp: bool = True) -> tuple[Column, Column]:
    """(h1, h2): the identity of a row of the `causeway` source read with includeHeaders=true:
    key, value, headers, and the timestamp unless `with_timestamp` is false."""
    from pyspark.sql import functions as F

    headers = F.transform(F.col("headers"), lambda h: F.struct(h["key"], h["value"].isNull(), h["value"]))
    parts: list[Column | str] = [F.col("key").isNull(), "key", F.col("value").isNull(), "value",
                                 *(["timestamp"] if with_timestamp else []), F.col("headers").isNull(), headers]
    return F.xxhash64(*parts), F.xxhash64(F.lit(IDENTITY_SEED), *parts)


def with_identity(df: DataFrame) -> DataFrame:
    """(topic, partition, offset, h1, h2): each record reduced to where it is and what it is."""
    h1, h2 = identity_hashes()
    return df.select("topic", "partition", "offset", h1.alias("h1"), h2.alias("h2"))
