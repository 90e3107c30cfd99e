"""Test support: start real genmesh servers as subprocesses and wait for them properly."""
