"""HTTP routes of the engine, one module per endpoint family."""
