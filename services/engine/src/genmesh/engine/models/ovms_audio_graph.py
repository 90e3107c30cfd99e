"""The audio nodes of an OVMS ``graph.pbtxt``: speech to text (``S2tCalculator``) and text to speech
(``T2sCalculator``), as OVMS's audio demos and ``export_model.py`` write them.

Both carry ``models_path`` (relative to the graph's folder), ``target_device`` and ``plugin_config``
(a JSON object in a string); genmesh serves ``models_path`` with ``audio/whisper.py`` (a Whisper
OpenVINO IR folder) and ``audio/voice.py`` (a folder holding one Piper ``.onnx`` beside its
``.onnx.json``, or that ``.onnx`` itself). ``enable_word_timestamps`` is accepted and changes
nothing: genmesh's Whisper always keeps word times ready, and a request asks for them
(``timestamp_granularities``). OVMS's ``voices`` (speaker embeddings for SpeechT5) have no meaning
for a Piper voice, which speaks with its own: naming them is an error, as is any option OVMS does
not define."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import field_validator

from .ovms_graph import GraphError, ServableNodeOptions, one_node_options

S2T_OPTIONS_TYPE = "mediapipe.S2tCalculatorOptions"
T2S_OPTIONS_TYPE = "mediapipe.T2sCalculatorOptions"
AudioKind = Literal["transcription", "speech"]


class SpeechToTextNodeOptions(ServableNodeOptions):
    enable_word_timestamps: bool | None = None


class TextToSpeechNodeOptions(ServableNodeOptions):
    voices: Any = None

    @field_validator("voices")
    @classmethod
    def _no_speaker_embeddings(cls, value: Any) -> Any:
        if value is not None:
            raise ValueError("speaker embeddings (SpeechT5) do not apply to a Piper voice, which speaks with its own")
        return value


def audio_node_options(text: str, where: str) -> tuple[AudioKind, ServableNodeOptions] | None:
    """The graph's one audio node, as its kind and options; None for a graph without one."""
    s2t = one_node_options(text, where, S2T_OPTIONS_TYPE, SpeechToTextNodeOptions)
    t2s = one_node_options(text, where, T2S_OPTIONS_TYPE, TextToSpeechNodeOptions)
    if s2t is not None and t2s is not None:
        raise GraphError(
            f"{where}: a graph serves one audio model: found both {S2T_OPTIONS_TYPE} and {T2S_OPTIONS_TYPE}"
        )
    if s2t is not None:
        return "transcription", s2t
    if t2s is not None:
        return "speech", t2s
    return None
