"""The batch runner: in every replica, it claims batch lines with leases, lends them in fair turns, and sends
each through the interactive path. docs/batch.md is the manual."""
