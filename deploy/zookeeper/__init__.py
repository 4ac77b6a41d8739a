"""Apache ZooKeeper, managed: ensembles of 1 or 3 nodes on this machine (Debian's package).

`ensemble.open_ensemble` / `ensemble.run_ensemble` (trio) start one and report it ready;
`node.ZkNode` is one node for blocking code (the test fixture in tests/support/zookeeper.py);
`four_letter.srvr` asks a node whether and how it serves; `config` writes zoo.cfg. `causeway
zookeeper` (deploy/cli/zookeeper.py) runs an ensemble in the foreground.

Nothing is imported here: `causeway status` reads `four_letter` without loading trio.
"""
