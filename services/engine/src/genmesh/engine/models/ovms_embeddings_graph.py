"""The embeddings node of an OVMS ``graph.pbtxt`` (``EmbeddingsCalculatorOV``): its options.

OVMS serves an embedding model as a MediaPipe graph whose node carries
``[type.googleapis.com / mediapipe.EmbeddingsCalculatorOVOptions]``: ``models_path``,
``target_device``, ``plugin_config`` (a JSON object in a string), ``normalize_embeddings``,
``pooling`` (``CLS``, ``LAST`` or ``MEAN``) and ``truncate`` (cut inputs longer than the model
takes instead of refusing them). Unlike OVMS, whose ``pooling`` defaults to ``CLS``, a graph that
names no pooling (or no normalisation) gets the checkpoint's own sentence-transformers
configuration. ``render`` writes such a graph (genmesh-export's ``embeddings_ov`` task)."""

from __future__ import annotations

from typing import Literal

from .ovms_graph import ServableNodeOptions, one_node_options, render_servable

OPTIONS_TYPE = "mediapipe.EmbeddingsCalculatorOVOptions"
OVMS_POOLING = {"CLS": "cls", "LAST": "last", "MEAN": "mean"}


class EmbeddingsNodeOptions(ServableNodeOptions):
    normalize_embeddings: bool | None = None
    pooling: Literal["CLS", "LAST", "MEAN"] | None = None
    truncate: bool = False


def embeddings_node_options(text: str, where: str) -> EmbeddingsNodeOptions | None:
    """The options of the graph's embeddings node; None for a graph without one (an LLM graph)."""
    return one_node_options(text, where, OPTIONS_TYPE, EmbeddingsNodeOptions)


def render(options: EmbeddingsNodeOptions) -> str:
    return render_servable("Embeddings", options)
