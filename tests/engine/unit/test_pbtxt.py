"""The protobuf-text parser and the LLM node options, on the graphs OVMS documents and exports."""

from __future__ import annotations

import pytest

from genmesh.engine.models import pbtxt
from genmesh.engine.models.ovms_graph import GraphError, LLMNodeOptions, llm_node_options, render
from genmesh.engine.openai import tools
from genmesh.engine.settings import EngineSettings

# The graph of the OVMS LLM calculator reference (seed 003), verbatim apart from indentation.
REFERENCE_GRAPH = """
input_stream: "HTTP_REQUEST_PAYLOAD:input"
output_stream: "HTTP_RESPONSE_PAYLOAD:output"
node: {
  name: "LLMExecutor"
  calculator: "HttpLLMCalculator"
  input_stream: "LOOPBACK:loopback"
  input_stream: "HTTP_REQUEST_PAYLOAD:input"
  input_side_packet: "LLM_NODE_RESOURCES:llm"
  output_stream: "LOOPBACK:loopback"
  output_stream: "HTTP_RESPONSE_PAYLOAD:output"
  input_stream_info: {
    tag_index: 'LOOPBACK:0',
    back_edge: true
  }
  node_options: {
    [type.googleapis.com / mediapipe.LLMCalculatorOptions]: {
      models_path: "./"
    }
  }
  input_stream_handler {
    input_stream_handler: "SyncSetInputStreamHandler",
    options {
      [mediapipe.SyncSetInputStreamHandlerOptions.ext] {
        sync_set {
          tag_index: "LOOPBACK:0"
        }
      }
    }
  }
}
"""

# What OVMS's export_model.py writes: single-quoted JSON, no blanks after ':', a trailing comma.
EXPORTED_OPTIONS = """
      [type.googleapis.com / mediapipe.LLMCalculatorOptions]: {
          max_num_seqs:256,
          device: "GPU",
          models_path: "./",
          plugin_config: '{"KV_CACHE_PRECISION":"f16" }',
          enable_prefix_caching: true,
          reasoning_parser: "qwen3",
          tool_parser: "hermes3",
          cache_size: 3,
          max_num_batched_tokens: 1024, dynamic_split_fuse: false
          best_of_limit: 4
          max_tokens_limit: 100,
      }
"""


def graph_with(options: str) -> str:
    start = REFERENCE_GRAPH.index("[type.googleapis.com")
    end = REFERENCE_GRAPH.index("}", start) + 1
    return REFERENCE_GRAPH[:start] + options + REFERENCE_GRAPH[end:]


def test_reference_graph_structure() -> None:
    graph = pbtxt.parse(REFERENCE_GRAPH)
    assert graph.get("input_stream") == "HTTP_REQUEST_PAYLOAD:input"
    (node,) = graph.messages("node")
    assert node.get("calculator") == "HttpLLMCalculator"
    assert node.get_all("input_stream") == ["LOOPBACK:loopback", "HTTP_REQUEST_PAYLOAD:input"]
    info = node.messages("input_stream_info")[0]
    assert info.to_dict() == {"tag_index": "LOOPBACK:0", "back_edge": True}
    options = node.messages("node_options")[0]
    llm = options.messages("[type.googleapis.com/mediapipe.LLMCalculatorOptions]")[0]
    assert llm.to_dict() == {"models_path": "./"}
    handler = node.messages("input_stream_handler")[0].messages("options")[0]
    ext = handler.messages("[mediapipe.SyncSetInputStreamHandlerOptions.ext]")[0]
    assert ext.messages("sync_set")[0].get("tag_index") == "LOOPBACK:0"


def test_scalars_lists_comments_and_angle_brackets() -> None:
    msg = pbtxt.parse(
        """
        # a comment
        i: -42  f: 2.5e3  h: 0x1F  g: 1.5f  b: false  e: ENUM_VALUE  n: -inf
        s: "a\\"b\\n" 'c' "\\101"   # adjacent strings concatenate; octal escape
        xs: [1, 2, 3]  xs: 4
        empty: []
        sub < k: "v" >;
        sub { k: "w" }
        """
    )
    assert msg.to_dict()["i"] == -42
    assert msg.get("f") == 2500.0
    assert msg.get("h") == 31
    assert msg.get("g") == 1.5
    assert msg.get("b") is False
    assert msg.get("e") == "ENUM_VALUE"
    assert msg.get("n") == float("-inf")
    assert msg.get("s") == 'a"b\ncA'
    assert msg.get_all("xs") == [1, 2, 3, 4]
    assert msg.get_all("empty") == []
    assert [m.get("k") for m in msg.messages("sub")] == ["v", "w"]


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('node: {\n  name: "x"\n', "line 2: unexpected end"),
        ('a: "unterminated\n', "line 1: unexpected character"),
        ("a 5", "line 1: expected ':' or '{'"),
        ("a: }", "line 1: expected a value"),
        ("\n\n[]: 1", "line 3: empty extension name"),
        ('a: "\\q"', "unknown escape"),
    ],
)
def test_errors_say_where(text: str, where: str) -> None:
    with pytest.raises(pbtxt.PbtxtError, match=where):
        pbtxt.parse(text)


def test_exported_node_options_are_typed() -> None:
    opts = llm_node_options(graph_with(EXPORTED_OPTIONS))
    assert opts.models_path == "./"
    assert opts.settings_overrides() == {
        "cache_size": 3,
        "max_num_seqs": 256,
        "max_num_batched_tokens": 1024,
        "dynamic_split_fuse": False,
        "enable_prefix_caching": True,
        "device": "GPU",
        "plugin_config": {"KV_CACHE_PRECISION": "f16"},
        "best_of_limit": 4,
        "max_tokens_limit": 100,
        "tool_call_parser": "hermes3",  # OVMS's tool_parser: the engine's --tool-call-parser
    }
    assert opts.ignored == ["reasoning_parser"]


def llm_options(fields: str) -> str:
    return graph_with("[type.googleapis.com / mediapipe.LLMCalculatorOptions]: {" + fields + "}")


def test_draft_model_options_become_engine_settings() -> None:
    opts = llm_node_options(
        llm_options('models_path: "./", draft_models_path: "draft", num_assistant_tokens: 4, tool_parser: "hermes3",')
    )
    assert opts.settings_overrides() == {
        "draft_model": "draft",
        "num_assistant_tokens": 4,
        "tool_call_parser": "hermes3",
    }
    assert llm_node_options(
        llm_options('models_path: "./", assistant_confidence_threshold: 0.4,')
    ).settings_overrides() == {"assistant_confidence_threshold": 0.4}
    with pytest.raises(GraphError, match="tool_parser"):
        llm_node_options(llm_options('models_path: "./", tool_parser: "phi4",'))


def test_the_qwen3coder_tool_parser_becomes_the_engine_setting() -> None:
    overrides = llm_node_options(llm_options('models_path: "./", tool_parser: "qwen3coder",')).settings_overrides()
    assert overrides == {"tool_call_parser": "qwen3coder"}
    settings = EngineSettings.model_validate(overrides)  # the value the engine's flag takes, too
    assert tools.PARSERS[settings.tool_call_parser or ""] == "qwen3coder"


def test_reference_graph_sets_only_the_models_path() -> None:
    opts = llm_node_options(REFERENCE_GRAPH)
    assert (opts.models_path, opts.settings_overrides(), opts.ignored) == ("./", {}, [])


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ("[type.googleapis.com / mediapipe.LLMCalculatorOptions]: { cache_size: 2 }", "models_path: Field required"),
        (
            '[type.googleapis.com / mediapipe.LLMCalculatorOptions]: { models_path: "./", cache_size: "8" }',
            "cache_size: Input should be a valid integer",
        ),
        (
            "[type.googleapis.com / mediapipe.LLMCalculatorOptions]: { models_path: \"./\", plugin_config: '{bad' }",
            "plugin_config is not valid JSON",
        ),
        (
            '[type.googleapis.com / mediapipe.LLMCalculatorOptions]: { models_path: "./", max_num_seqs: 0 }',
            "max_num_seqs: Input should be greater than or equal to 1",
        ),
        ('[type.googleapis.com / mediapipe.OtherOptions]: { models_path: "./" }', "found 0"),
        (
            '[type.googleapis.com / mediapipe.LLMCalculatorOptions]: { models_path: "./", cache_sise: 2 }',
            r"unknown option\(s\) cache_sise",
        ),
        (
            '[type.googleapis.com / mediapipe.LLMCalculatorOptions]: { models_path: "./", pipeline_type: VLM_CB }',
            "pipeline_type: Input should be 'LM_CB' or 'AUTO'",
        ),
    ],
)
def test_bad_node_options_are_explained(options: str, error: str) -> None:
    with pytest.raises(GraphError, match=error) as info:
        llm_node_options(graph_with(options), "m/graph.pbtxt")
    assert str(info.value).startswith("m/graph.pbtxt: ")


def test_unparsable_graph_is_a_graph_error() -> None:
    with pytest.raises(GraphError, match=r"^g\.pbtxt: line 1: "):
        llm_node_options("node: {", "g.pbtxt")


def test_rendered_graph_reads_back_as_written() -> None:
    options = LLMNodeOptions(
        models_path="./",
        cache_size=3,
        enable_prefix_caching=True,
        device="CPU",
        plugin_config={"KV_CACHE_PRECISION": "u8"},
        max_num_seqs=64,
        pipeline_type="LM_CB",
    )
    text = render(options)
    assert llm_node_options(text) == options
    assert 'plugin_config: \'{"KV_CACHE_PRECISION":"u8"}\',' in text  # as export_model.py writes it
    assert "pipeline_type: LM_CB," in text  # an enum value, unquoted
    assert pbtxt.parse(text).messages("node")[0].get("calculator") == "HttpLLMCalculator"
