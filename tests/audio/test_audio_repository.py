"""The audio models in an OVMS model repository (issue 43 item 6): a ``config.json`` whose two graphs
are an ``S2tCalculator`` (Whisper tiny.en's IR) and a ``T2sCalculator`` (the Piper voice), as OVMS's
audio demos write them, served by one real engine that speaks and transcribes through them; and the
loader's checks of such entries (no engine)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from genmesh.engine.models import ovms_config
from genmesh.engine.settings import EngineSettings
from support.audio import SENTENCES, VOICE, WHISPER_MODEL, wer
from support.servers import start_repository_engine

pytestmark = pytest.mark.timeout(300)

GRAPH = """input_stream: "HTTP_REQUEST_PAYLOAD:input"
output_stream: "HTTP_RESPONSE_PAYLOAD:output"
node {{
  name: "{name}Executor"
  input_side_packet: "{resources}_NODE_RESOURCES:{servable}_servable"
  calculator: "{name}Calculator"
  input_stream: "HTTP_REQUEST_PAYLOAD:input"
  output_stream: "HTTP_RESPONSE_PAYLOAD:output"
  node_options: {{
    [type.googleapis.com / mediapipe.{name}CalculatorOptions]: {{
      models_path: "{models_path}",
      plugin_config: '{{"NUM_STREAMS": "1"}}',
      target_device: "CPU"{extra}
    }}
  }}
}}
"""


def s2t_graph(models_path: Path, extra: str = "") -> str:
    return GRAPH.format(name="S2t", resources="STT", servable="s2t", models_path=models_path, extra=extra)


def t2s_graph(models_path: Path, extra: str = "") -> str:
    return GRAPH.format(name="T2s", resources="TTS", servable="t2s", models_path=models_path, extra=extra)


def write_repository(root: Path, graphs: dict[str, str]) -> Path:
    """A config.json with one mediapipe_config_list entry per graph (a folder of the entry's name)."""
    for name, graph in graphs.items():
        (root / name).mkdir()
        (root / name / "graph.pbtxt").write_text(graph)
    config = root / "config.json"
    config.write_text(json.dumps({"mediapipe_config_list": [{"name": n, "base_path": n} for n in graphs]}))
    return config


def test_one_repository_engine_speaks_and_transcribes(tmp_path: Path) -> None:
    graphs = {"stt": s2t_graph(WHISPER_MODEL), "tts": t2s_graph(VOICE.parent)}
    server = start_repository_engine(write_repository(tmp_path, graphs), tmp_path)
    try:
        cards = httpx.get(server.url + "/v1/models", timeout=10).json()["data"]
        assert {c["id"]: c["kind"] for c in cards} == {"stt": "transcription", "tts": "speech"}
        text = " ".join(SENTENCES[:2])
        speech = httpx.post(
            server.url + "/v3/audio/speech",
            json={"model": "tts", "input": text, "voice": "alloy", "response_format": "wav"},
            timeout=120,
        )
        assert speech.status_code == 200, speech.text
        got = httpx.post(
            server.url + "/v3/audio/transcriptions",
            data={"model": "stt"},
            files={"file": ("s.wav", speech.content, "audio/wav")},
            timeout=120,
        )
        assert got.status_code == 200, got.text
        assert wer(text, got.json()["text"]) <= 0.2, got.json()["text"]
    finally:
        server.stop()


def _load(config: Path, **flags: str) -> ovms_config.Repository:
    return ovms_config.load(EngineSettings(config_path=str(config), **flags))  # type: ignore[arg-type]


def test_graphs_and_bare_folders_become_audio_specs(tmp_path: Path) -> None:
    (tmp_path / "voice").symlink_to(VOICE.parent)  # a folder without a graph: the folder is the model
    config = write_repository(tmp_path, {"stt": s2t_graph(WHISPER_MODEL, ",\n      enable_word_timestamps: true")})
    entries = json.loads(config.read_text())
    entries["mediapipe_config_list"].append({"name": "voice"})
    config.write_text(json.dumps(entries))
    repo = _load(config)
    assert repo.models == ()
    assert repo.embeddings == ()
    stt, voice = repo.audio
    assert (stt.name, stt.kind, stt.path, stt.device, dict(stt.plugin_config)) == (
        "stt",
        "transcription",
        WHISPER_MODEL,
        "CPU",
        {"NUM_STREAMS": "1"},
    )
    assert (voice.name, voice.kind, voice.path.name, voice.device) == ("voice", "speech", VOICE.name, None)


@pytest.mark.parametrize(
    ("graph", "message"),
    [
        (t2s_graph(VOICE.parent, ',\n      voices: [{name: "a", path: "a.bin"}]'), "speaker embeddings"),
        (t2s_graph(WHISPER_MODEL), "must hold one Piper voice"),
        (s2t_graph(VOICE.parent), "not a Whisper OpenVINO IR folder: missing openvino_encoder_model.xml"),
        (s2t_graph(WHISPER_MODEL, ",\n      beam_size: 2"), "beam_size"),
    ],
)
def test_a_bad_audio_graph_stops_the_engine_before_it_starts(tmp_path: Path, graph: str, message: str) -> None:
    with pytest.raises(ovms_config.RepositoryError, match=message):
        _load(write_repository(tmp_path, {"bad": graph}))


def test_an_engine_serves_one_model_of_each_kind(tmp_path: Path) -> None:
    config = write_repository(tmp_path, {"stt": s2t_graph(WHISPER_MODEL)})
    with pytest.raises(ovms_config.RepositoryError, match="one transcription model, 2 are named: stt, whisper"):
        _load(config, whisper_model=str(WHISPER_MODEL), whisper_model_name="whisper")
