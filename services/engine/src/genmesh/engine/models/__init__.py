"""What a model is before it is loaded: where it comes from (``source``), OVMS's ``config.json``
(``ovms_config``) and ``graph.pbtxt`` (``ovms_graph`` for the LLM node, ``ovms_embeddings_graph``
for the embeddings node, on the text-format parser ``pbtxt``), and an embedding model to serve
(``embedding_spec``); and the settings OpenVINO crashes on here (``amx_guard`` on ``cpu_threads``:
one inference thread in bf16 with AMX). The CLI and genmesh-export read it without any server.
"""
