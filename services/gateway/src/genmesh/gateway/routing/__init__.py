"""Where a request goes: the routing config, the upstream pools and their circuits, affinity and failover."""
