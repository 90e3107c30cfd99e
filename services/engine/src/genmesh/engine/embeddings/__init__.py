"""Embedding models (a BERT sentence encoder such as all-MiniLM-L6-v2) served beside the LLMs.

The OpenVINO model is built here from the checkpoint's ``model.safetensors`` and ``config.json``
with OpenVINO's opset API (``ir``; no torch), cached as IR, compiled once and run in the API
process on a worker thread (OpenVINO's infer releases the GIL). Concurrent requests are batched
(``batcher``); texts are tokenised with the checkpoint's own ``tokenizer.json`` (``tokenizer``),
pooled and normalised as its sentence-transformers modules say (``checkpoint``).
"""
