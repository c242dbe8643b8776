"""Local clusters of real processes: a ZooKeeper and N brokers on loopback."""
