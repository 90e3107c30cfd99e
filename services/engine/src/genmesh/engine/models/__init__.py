"""What a model is before it is loaded: where it comes from (``source``), OVMS's ``config.json``
(``ovms_config``) and ``graph.pbtxt`` (``ovms_graph`` for the LLM node, ``ovms_embeddings_graph``
for the embeddings node, on the text-format parser ``pbtxt``), and an embedding model to serve
(``embedding_spec``). The CLI and genmesh-export read it without any server.
"""
