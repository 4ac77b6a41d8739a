"""A protocol fuzzer for a running broker: mutated Kafka frames in, a verdict out.

`corpus` builds valid requests of every API at every version, `trace` maps where their lengths
and counts lie, `mutate` turns a seed into a hostile frame, `plan` decides what one connection
sends (from the run's seed and the connection's index alone), `engine` drives many pipelined
connections, `proc` and `wire` watch the broker, `roundtrip` has a real client use it afterwards,
and `run` puts it together; `python -m deploy.fuzz` is the command (see docs/operations/fuzzing.md).
"""
