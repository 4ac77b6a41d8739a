"""ZooKeeper mode (Kafka 2.8-3.x's layout): a cluster of brokers coordinated through ZooKeeper.

client.py (the trio client over kazoo), znodes.py (paths and Kafka's JSON), registration.py
(top-level paths, cluster id, broker registration), producer_ids.py (producer id blocks); the
elected controller and its helpers live beside them. Only client.py imports kazoo.
"""
