"""OVMS model repositories: config.json entries, graph.pbtxt options, several models at once.

The live tests share one engine serving a repository of four entries: two names for the
default GGUF (``limited`` with a graph.pbtxt, which also names Qwen3-Coder's tool-call format,
``templated`` without one but with a template.jinja), and one whose graph asks for a device that
does not exist (its load fails in the core while the others serve). An entry that can be seen to
be wrong without loading it (a missing path, a bad graph) stops the server before it starts:
tests/engine/server/test_ir_serving.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from genmesh.engine.grammar import GrammarLimits
from genmesh.engine.models.ovms_config import RepositoryError, from_config, load
from genmesh.engine.openai import tools
from genmesh.engine.openai.registry import ModelRegistry
from genmesh.engine.settings import EngineSettings, parse_settings
from genmesh.protocol import ChatCompletionRequest, OpenAIError
from support.servers import DEFAULT_MODEL, GENMESH_ENGINE_ONLY, Server, start_repository_engine

pytestmark = GENMESH_ENGINE_ONLY

LLM_GRAPH = """
input_stream: "HTTP_REQUEST_PAYLOAD:input"
output_stream: "HTTP_RESPONSE_PAYLOAD:output"
node: {{
  name: "LLMExecutor"
  calculator: "HttpLLMCalculator"
  input_side_packet: "LLM_NODE_RESOURCES:llm"
  node_options: {{
    [type.googleapis.com / mediapipe.LLMCalculatorOptions]: {{
      {options}
    }}
  }}
}}
"""
TEMPLATE = "[[{{ messages[0]['content'] }}]]"


def write_graph(folder: Path, options: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "graph.pbtxt").write_text(LLM_GRAPH.format(options=options))


def write_config(path: Path, mediapipe: list[dict[str, Any]], models: list[dict[str, Any]] | None = None) -> Path:
    path.write_text(json.dumps({"model_config_list": models or [], "mediapipe_config_list": mediapipe}))
    return path


def link_model(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.gguf").symlink_to(DEFAULT_MODEL)


# -- config.json and graph.pbtxt, without an engine --------------------------------------------


def test_entries_resolve_against_the_config_folder(tmp_path: Path) -> None:
    link_model(tmp_path / "plain")
    write_graph(
        tmp_path / "tuned",
        'models_path: "../plain", cache_size: 5, max_num_seqs: 3, max_num_batched_tokens: 512, '
        'dynamic_split_fuse: false, enable_prefix_caching: true, device: "GPU.1", '
        'plugin_config: \'{"KV_CACHE_PRECISION": "u8"}\', best_of_limit: 2, max_tokens_limit: 64',
    )
    config = write_config(
        tmp_path / "config.json",
        [{"name": "org/tuned", "base_path": "tuned"}],
        [{"config": {"name": "plain"}}],  # OVMS's wrapped form; base_path defaults to the name
    )
    server_wide = EngineSettings(cache_size=1, max_num_seqs=8, best_of_limit=20)
    repo = from_config(config, server_wide)
    assert repo.names == ["plain", "org/tuned"]
    plain, tuned = repo.models
    assert (plain.source.kind, plain.source.served_name) == ("gguf", "plain")
    assert plain.source.template_dir == tmp_path / "plain"
    assert (plain.settings.cache_size, plain.settings.max_num_seqs, plain.settings.best_of_limit) == (1, 8, 20)
    s = tuned.settings
    assert (s.cache_size, s.max_num_seqs, s.max_num_batched_tokens) == (5, 3, 512)
    assert (s.dynamic_split_fuse, s.enable_prefix_caching, s.device) == (False, True, "GPU.1")
    assert s.plugin_config == {"KV_CACHE_PRECISION": "u8"}
    assert (s.best_of_limit, s.max_tokens_limit) == (2, 64)
    assert tuned.source.template_dir == tmp_path / "tuned" / ".." / "plain"
    assert server_wide.cache_size == 1, "the server-wide settings are not changed"


@pytest.mark.parametrize(
    ("entry", "error"),
    [
        ({"name": "missing", "base_path": "absent"}, "absent' is not a folder"),
        ({"name": "nomodel"}, "holds neither openvino_model.xml"),
        ({"name": "badgraph"}, r"badgraph/graph\.pbtxt: line"),
        ({"name": "notgguf"}, "not a GGUF file"),
        ({"name": "nograph", "base_path": "nomodel", "graph_path": "other.pbtxt"}, "other.pbtxt' does not exist"),
    ],
)
def test_an_entry_that_cannot_be_served_stops_the_server(tmp_path: Path, entry: dict[str, Any], error: str) -> None:
    write_graph(tmp_path / "nomodel", 'models_path: "./"')
    write_graph(tmp_path / "badgraph", "models_path: ")
    (tmp_path / "notgguf").mkdir()
    (tmp_path / "notgguf" / "model.gguf").write_bytes(b"not a gguf at all")
    link_model(tmp_path / "good")
    config = write_config(tmp_path / "c.json", [{"name": "good"}, entry])
    with pytest.raises(RepositoryError, match=error) as info:
        from_config(config, EngineSettings())
    assert str(info.value).startswith(f"{config}: model {entry['name']!r} cannot be served: ")


@pytest.mark.parametrize(
    ("content", "error"),
    [
        (None, "cannot read config file"),
        ("{not json", "is not valid JSON"),
        ("[]", "must hold a JSON object"),
        ('{"mediapipe_config_list": {}}', "'mediapipe_config_list' must be a list"),
        ('{"mediapipe_config_list": [{"base_path": "x"}]}', r"mediapipe_config_list\[0\] needs a 'name'"),
        ('{"model_config_list": []}', "no models"),
        ('{"mediapipe_config_list": [{"name": "a"}, {"name": "a"}]}', "repeated: a"),
    ],
)
def test_unusable_config_files_are_fatal(tmp_path: Path, content: str | None, error: str) -> None:
    path = tmp_path / "config.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(RepositoryError, match=error):
        from_config(path, EngineSettings())


def test_config_path_flag_and_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    link_model(tmp_path / "m")
    config = write_config(tmp_path / "config.json", [{"name": "m"}])
    monkeypatch.setenv("GENMESH_ENGINE_CONFIG_PATH", str(config))
    monkeypatch.setenv("GENMESH_ENGINE_BEST_OF_LIMIT", "7")
    settings = parse_settings([])
    assert settings.best_of_limit == 7
    assert load(settings).names == ["m"]
    assert parse_settings(["--best-of-limit", "3"]).best_of_limit == 3
    single = load(EngineSettings(model=str(DEFAULT_MODEL), config_path=None))
    assert single.config_path is None
    assert single.names == ["SmolLM2-135M-Instruct"]


def test_registry_before_loading(tmp_path: Path) -> None:
    link_model(tmp_path / "a")
    link_model(tmp_path / "b")
    config = write_config(tmp_path / "config.json", [{"name": "a"}, {"name": "b"}])
    models = ModelRegistry(from_config(config, EngineSettings()))
    a, b = models.all()
    assert (a.status().state, a.status().error_code) == ("LOADING", "OK")
    assert a.unavailable_reason() == "engine is loading the model"
    b.error = "no such device"  # what a failed load leaves
    assert (b.status().state, b.status().error_code) == ("LOADING", "FAILED_PRECONDITION")
    with pytest.raises(OpenAIError) as loading:
        models.serving("a")
    assert (loading.value.status, loading.value.code) == (503, "engine_unavailable")
    with pytest.raises(OpenAIError) as unnamed:
        models.lookup(None)
    assert (unnamed.value.status, unnamed.value.param) == (400, "model")
    with pytest.raises(OpenAIError) as unknown:
        models.lookup(str(DEFAULT_MODEL))  # paths name a model only in single-model mode
    assert unknown.value.code == "model_not_found"
    single = ModelRegistry(load(EngineSettings(model=str(DEFAULT_MODEL), config_path=None)))
    assert single.lookup(None).name == single.lookup(str(DEFAULT_MODEL)).name == "SmolLM2-135M-Instruct"


# -- a live repository ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def repo_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("repository")
    link_model(root / "limited")
    options = 'models_path: "./", cache_size: 1, max_tokens_limit: 16, best_of_limit: 2, tool_parser: "qwen3coder"'
    write_graph(root / "limited", options)
    link_model(root / "templated")
    (root / "templated" / "template.jinja").write_text(TEMPLATE)
    write_graph(root / "nodevice", f'models_path: "{DEFAULT_MODEL}", device: "NO_SUCH_DEVICE"')
    config = write_config(
        root / "config.json",
        [
            {"name": "limited", "base_path": "limited"},
            {"name": "nodevice", "base_path": "nodevice"},
        ],
        [{"config": {"name": "templated", "base_path": str(root / "templated")}}],
    )
    server = start_repository_engine(config, root, timeout_s=180)
    yield server
    server.stop()


def post(server: Server, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=120)


def status_of(server: Server) -> dict[str, dict[str, Any]]:
    cfg = httpx.get(server.url + "/v1/config", timeout=5).json()
    return {name: entry["model_version_status"][0] for name, entry in cfg.items()}


def test_config_reports_each_model(repo_engine: Server) -> None:
    status = status_of(repo_engine)
    assert set(status) == {"limited", "templated", "nodevice"}
    for name in ("limited", "templated"):
        assert status[name]["state"] == "AVAILABLE"
        assert status[name]["status"] == {"error_code": "OK", "error_message": "OK"}
    assert status["nodevice"]["state"] == "LOADING"
    assert status["nodevice"]["status"]["error_code"] == "FAILED_PRECONDITION"
    assert "NO_SUCH_DEVICE" in status["nodevice"]["status"]["error_message"], "the graph's device reached the core"
    models = httpx.get(repo_engine.url + "/v1/models", timeout=5).json()
    assert sorted(m["id"] for m in models["data"]) == ["limited", "nodevice", "templated"]


def test_requests_route_by_model(repo_engine: Server) -> None:
    for name in ("limited", "templated"):
        r = post(repo_engine, "/v1/completions", {"model": name, "prompt": "Hi", "max_tokens": 4, "ignore_eos": True})
        assert r.status_code == 200, r.text
        assert r.json()["model"] == name
        assert r.json()["usage"]["completion_tokens"] == 4
    r = post(repo_engine, "/v1/completions", {"model": "unknown", "prompt": "Hi", "max_tokens": 4})
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "model_not_found"
    r = post(repo_engine, "/v1/completions", {"prompt": "Hi", "max_tokens": 4})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "model"
    r = post(repo_engine, "/v1/chat/completions", {"model": "nodevice", "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 503
    assert r.json()["error"]["code"] == "engine_unavailable"
    assert "nodevice" in r.json()["error"]["message"]


def test_max_tokens_limit_is_per_model(repo_engine: Server) -> None:
    body: dict[str, Any] = {"prompt": "Hi", "max_tokens": 17, "ignore_eos": True}
    r = post(repo_engine, "/v1/completions", {**body, "model": "limited"})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "max_tokens"
    assert "16" in r.json()["error"]["message"]
    r = post(repo_engine, "/v1/completions", {**body, "model": "templated"})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 17


def test_template_jinja_takes_precedence(repo_engine: Server) -> None:
    chat = [{"role": "user", "content": "What is OpenVINO?"}]
    templated = post(repo_engine, "/tokenize", {"model": "templated", "messages": chat}).json()
    expected = post(repo_engine, "/tokenize", {"model": "templated", "prompt": "[[What is OpenVINO?]]"}).json()
    assert templated["tokens"] == expected["tokens"]
    r = post(repo_engine, "/v1/chat/completions", {"model": "templated", "messages": chat, "max_tokens": 1})
    assert r.json()["usage"]["prompt_tokens"] == templated["count"]
    # no template.jinja beside the other name's GGUF: the GGUF's own ChatML template
    own = post(repo_engine, "/tokenize", {"model": "limited", "messages": chat}).json()
    text = post(repo_engine, "/detokenize", {"model": "limited", "tokens": own["tokens"]}).json()["prompt"]
    assert "<|im_start|>user\nWhat is OpenVINO?<|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\n")


def test_health_covers_every_model_and_one_that_failed_to_load_is_skipped(repo_engine: Server) -> None:
    """Issue 54: a model that failed to load fails alone: /health stays 200 while the others serve, and
    names it under ``failed``; its own readiness (``?model=``, KServe's /v2/models/NAME/ready) is 503."""
    r = httpx.get(repo_engine.url + "/health", timeout=5)
    assert r.status_code == 200, r.text
    body = r.json()
    available, failed = "AVAILABLE", "FAILED"
    assert body["models"] == {"limited": available, "templated": available, "nodevice": failed}
    assert list(body["failed"]) == ["nodevice"]
    assert "NO_SUCH_DEVICE" in body["failed"]["nodevice"]
    assert httpx.get(repo_engine.url + "/v2/health/ready", timeout=5).status_code == 200
    ready = httpx.get(repo_engine.url + "/v2/models/nodevice/ready", timeout=5)
    assert ready.status_code == 503
    assert "nodevice" in ready.json()["error"]
    assert httpx.get(repo_engine.url + "/v2/models/limited/ready", timeout=5).status_code == 200
    one = httpx.get(repo_engine.url + "/health", params={"model": "limited"}, timeout=5)
    assert (one.status_code, one.json()["status"]) == (200, "ok")
    assert httpx.get(repo_engine.url + "/health", params={"model": "nodevice"}, timeout=5).status_code == 503
    assert httpx.get(repo_engine.url + "/health", params={"model": "unknown"}, timeout=5).status_code == 404


def sample(server: Server, name: str, model: str) -> float:
    for line in httpx.get(server.url + "/metrics", timeout=5).text.splitlines():
        if line.startswith(f'{name}{{model="{model}"}} '):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} for {model} not found")


def test_metrics_are_labelled_by_model(repo_engine: Server) -> None:
    before = {m: sample(repo_engine, "genmesh_engine_generation_tokens_total", m) for m in ("limited", "templated")}
    body = {"model": "templated", "prompt": "Hi", "max_tokens": 5, "ignore_eos": True}
    r = post(repo_engine, "/v1/completions", body)
    assert r.status_code == 200
    assert sample(repo_engine, "genmesh_engine_generation_tokens_total", "templated") == before["templated"] + 5
    assert sample(repo_engine, "genmesh_engine_generation_tokens_total", "limited") == before["limited"]
    assert sample(repo_engine, "genmesh_engine_requests_running", "limited") == 0


PING = {"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}}


def test_the_graphs_tool_parser_writes_the_prompt_and_forced_calls_stay_json(repo_engine: Server) -> None:
    """``tool_parser: "qwen3coder"`` reaches the chat route: SmolLM2's template cannot render tools,
    so the system message describes Qwen3-Coder's XML calls (the prompt is that history, token for
    token); a forced call is still one JSON object (grammar), returned as a call."""
    ask = [{"role": "user", "content": "Ping the server."}]
    req = ChatCompletionRequest.model_validate({"messages": ask, "tools": [PING], "tool_choice": "auto"})
    counts: dict[str, int] = {}
    for parser in ("qwen3coder", "hermes"):
        plan = tools.plan_tools(req, "", GrammarLimits(), parser=parser)
        turns = tools.history(req.messages, plan)
        counts[parser] = post(repo_engine, "/tokenize", {"model": "limited", "messages": turns}).json()["count"]
    assert counts["qwen3coder"] != counts["hermes"]  # the two prompts differ, so the check below tells them apart
    r = post(
        repo_engine, "/v1/chat/completions", {"model": "limited", "messages": ask, "tools": [PING], "max_tokens": 1}
    )
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] == counts["qwen3coder"]
    # greedy: the grammar fixes the call's tokens but for its whitespace, which a sampled reply could
    # stretch past the 16 tokens this model allows on another CPU's numerics
    body = {"model": "limited", "messages": ask, "tools": [PING], "tool_choice": "required", "max_tokens": 16}
    body["temperature"] = 0
    r = post(repo_engine, "/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls", choice
    assert [
        (c["function"]["name"], json.loads(c["function"]["arguments"])) for c in choice["message"]["tool_calls"]
    ] == [("ping", {})]
