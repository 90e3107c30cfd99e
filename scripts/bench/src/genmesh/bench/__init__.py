"""genmesh benchmarks (``genmesh-bench``)."""
