"""The deterministic runtime: the virtual-time loop, SimNetwork, the ZooKeeper twin, SimCluster,
and the simulation as a failure-run backend."""
