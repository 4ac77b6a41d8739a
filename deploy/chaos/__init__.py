"""Chaos testing: faults over emulated WAN links and on real processes, and a checker that
compares what a mirror wrote at the target with what the source holds.

- `payload`: the self-checking, numbered records the producer writes;
- `checker`: lost, tail, duplicated, reordered, corrupted, unexpected, per partition (pure);
- `workload`: the idempotent producer task and the whole-partition reader;
- `faults`: named link and process faults with bounded durations, and seeded schedules;
- `runner`: one scenario end to end (WAN emulator, two brokers, the mirror), and a matrix;
- `replication`: Kafka's replication matrix on a 3-broker ZooKeeper cluster (librdkafka clients).

`python -m deploy.chaos` runs the matrix and prints a table (see docs/operations/chaos.md).
"""
