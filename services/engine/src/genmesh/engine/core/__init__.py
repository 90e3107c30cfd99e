"""The engine-core process: everything that runs beside the ``ContinuousBatchingPipeline``.

The step loop (``step_loop``), what it loads for a model path (``model_loading``, ``gguf_reencode``),
how the pipeline is configured (``pipeline_config``, ``config``), the scorer (``scorer``), and the
messages it exchanges with the API process (``ipc``; the API side imports them from here). Nothing
here imports a web framework or the API side (the import contracts in pyproject.toml).
"""
