"""Session-wide real servers shared by the test packages."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from genmesh.engine.openai.prompts import PromptTokenizer
from support.exports import GGUF_NAME, IR_NAME, run_export
from support.servers import (
    DEFAULT_MODEL,
    EMBEDDING_MODEL,
    EMBEDDING_NAME,
    EXTERNAL_ENGINE_URL,
    MODEL_NAME,
    Server,
    start_engine,
    start_repository_engine,
)

# Fixtures shared across packages, registered once for the whole suite: Redis, the fake upstream and
# gateway processes (tests/gateway, tests/e2e, tests/hostile).
pytest_plugins = ["support.gateway_helpers", "support.embeddings_mesh", "support.audio"]

# The heavier cases make test leaves to make test-long (marker ``long``; docs/development.md): each feature
# keeps a lighter case in make test, or a make target of its own runs it (chaos, bench, test-qwen).
LONG = (
    "tests/gateway/test_gateway_batch.py::test_sdk_batch_of_200_chat_lines",
    "tests/gateway/test_gateway_batch.py::test_an_interactive_request_preempts_a_batch_line_holding_its_slot[no-preempt]",
    "tests/audio/test_audio_engine.py::test_round_trip_of_twenty_sentences_is_within_ten_percent_wer",
    "tests/engine/server/test_speculative.py::",
    "tests/chaos/test_chaos_recovery.py::",
    "tests/bench/test_bench_levers.py::test_a_sweep_on_the_real_engine",
    "tests/bench/test_bench_tracing.py::test_the_tracing_benchmark_measures_three_configurations",
    "tests/bench/test_bench_embeddings.py::test_embeddings_rows_count_what_was_served",
    "tests/bench/test_bench_real_engine.py::test_serve_against_the_engine_writes_sane_results",
    "tests/e2e/test_launcher_replicas.py::test_two_replicas_serve_behind_one_gateway",
    "tests/e2e/test_replicas.py::test_prefix_affinity_through_two_engines",
    "tests/e2e/test_replicas.py::test_mid_stream_failover_continues_one_stream[/v1/completions]",
    "tests/chaos/test_chaos_engine.py::test_engine_core_sigstop_hang_under_load",
    # the core killed under load (test_engine_death replaces a killed core in make test; make chaos repeats it)
    "tests/chaos/test_chaos_engine.py::test_engine_core_sigkill_under_load",
    "tests/chaos/test_chaos_services.py::test_gateway_kill_mid_stream",
    "tests/engine/server/test_one_cpu.py::",
    "tests/engine/server/test_prompt_lookup.py::",
    "tests/engine/server/test_stream_interval.py::",
    "tests/engine/server/test_kv_pressure.py::test_many_long_requests_all_finish",
    "tests/observability/test_prometheus_mesh.py::test_a_scrape_during_a_core_restart_answers_and_the_alert_fires",
    "tests/gateway/test_gateway_structured.py::test_every_structured_reply_through_the_gateway_parses[streamed]",
    "tests/microservice/test_microservice_structured.py::test_every_structured_reply_through_the_microservice_parses[streamed]",
    "tests/engine/server/test_structured_and_tools.py::test_every_sampled_structured_reply_parses_and_validates[streamed]",
    "tests/gateway/test_gateway_console.py::test_replicas_publish_only_while_a_console_is_open",
    "tests/gateway/test_gateway_console.py::test_every_replica_shows_the_same_charts",
    "tests/gateway/test_gateway_responses.py::test_a_conversation_across_two_replicas",
    "tests/gateway/test_gateway_batch.py::test_a_key_at_its_rate_limit_has_its_lines_wait",
    "tests/engine/server/test_concurrency.py::test_sixteen_simultaneous_streams",
    "tests/microservice/test_microservice_engine_loss.py::test_engine_killed_mid_stream",
    "tests/engine/server/test_core_signals.py::test_a_replacement_core_that_dies_of_sigfpe_while_loading_is_not_started_again",
    "tests/engine/server/test_responses.py::test_an_error_mid_stream_is_an_error_event_then_response_failed",
    "tests/export/test_export_embeddings.py::test_embeddings_export_is_served_beside_the_chat_model",
    "tests/gateway/test_gateway_recovery.py::test_a_redis_restart_waits_for_other_gateways_to_re_register",
    # CI took 1,915 s at 76767b2 (budget 30 min): these move to make test-long, each covered in make test by
    # a cheaper case named beside it.
    # the API process killed (make chaos; test_engine_death kills and replaces the core in make test)
    "tests/chaos/test_chaos_engine.py::",
    # a hung core (make chaos's SIGSTOP case too; test_a_failed_step_ends_every_request_and_the_core_loop stays)
    "tests/engine/server/test_engine_death.py::test_a_hung_core_is_detected_killed_and_replaced",
    # int8 greedy text (test_gguf_reference_answers_are_the_int8_model_s_most_likely_tokens checks its numerics)
    "tests/engine/server/test_ir_serving.py::test_int8_greedy_answers_agree_with_the_gguf",
    # structured replies at the middle hop (the engine and the gateway parse every one in make test)
    "tests/microservice/test_microservice_structured.py::test_every_structured_reply_through_the_microservice_parses",
    # the benchmark harness's chat-cost rounds (make bench-embeddings runs them)
    "tests/bench/test_bench_embeddings.py::",
    # A fresh make test at 5d6d54e still took 1,929 s (pytest 1,697 s), so more follow:
    # the rest of the chaos suite (make chaos; the gateway's and the batch runner's Redis restarts stay)
    "tests/chaos/",
    # the property-based requests (make fuzz; the hostile corpus, limits, slow readers and tenancy stay)
    "tests/hostile/test_hostile_fuzz.py::",
    # a 16 MB embeddings reply metered (test_a_batch_of_wide_lines_is_charged_each_line_once: 4.8 MB ones)
    "tests/gateway/test_gateway_embeddings.py::test_a_reply_of_any_size_is_metered_by_its_usage",
    # structured output through the gateway (the engine parses every one; instructor and pydantic-ai
    # through the gateway stay)
    "tests/gateway/test_gateway_structured.py::test_every_structured_reply_through_the_gateway_parses",
    # a slow and an erroring OTLP collector (the collector that is down stays)
    "tests/observability/test_tracing_mesh.py::test_a_bad_collector_changes_nothing_for_clients[error]",
    "tests/observability/test_tracing_mesh.py::test_a_bad_collector_changes_nothing_for_clients[slow]",
    # the int8 IR and its GGUF in one config (the IR folder served on its own, the refusals and
    # test_repository's configs of several models stay)
    "tests/engine/server/test_ir_serving.py::test_both_models_listed_available_and_routed",
    "tests/engine/server/test_ir_serving.py::test_chat_template_comes_from_the_ir_tokenizer",
    "tests/engine/server/test_ir_serving.py::test_gguf_reference_answers_are_the_int8_model_s_most_likely_tokens",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.startswith(LONG):
            item.add_marker(pytest.mark.long)


@pytest.fixture(scope="session")
def engine_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The real engine on the real default model, started once per test session."""
    if EXTERNAL_ENGINE_URL:
        yield EXTERNAL_ENGINE_URL
        return
    assert DEFAULT_MODEL.is_file(), "run 'make model' first (make test does it)"
    server = start_engine(tmp_path_factory.mktemp("engine-logs"))
    yield server.url
    server.stop()


@pytest.fixture(scope="session")
def embedding_engine_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The real engine serving the default chat model and the real embedding model (all-MiniLM-L6-v2)
    side by side, started once per test session."""
    assert (EMBEDDING_MODEL / "model.safetensors").is_file(), "run 'make model' first (make test does it)"
    # each model answers an alias too, as OPEA's clients name them (tgi, tei: test_microservice_opea_shapes.py)
    names = ["--served-model-name", f"{MODEL_NAME},tgi", "--embedding-model-name", f"{EMBEDDING_NAME},tei"]
    server = start_engine(
        tmp_path_factory.mktemp("embedding-engine-logs"), "--embedding-model", str(EMBEDDING_MODEL), *names
    )
    yield server.url
    server.stop()


@pytest.fixture(scope="session")
def engine_tokenizer() -> PromptTokenizer:
    return PromptTokenizer(DEFAULT_MODEL)


@pytest.fixture(scope="session")
def int8_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default model exported to int8 IR by the real genmesh-export: ``repo/smol-int8`` and
    ``repo/config.json`` (graph: 1 GB KV cache). The engine's GGUF cache keeps the fp16 IR and
    the compressed model, so only a fresh machine pays the whole export."""
    repo = tmp_path_factory.mktemp("ir-repo")
    started = time.monotonic()
    done = run_export(repo, IR_NAME, "--weight-format", "int8", "--cache_size", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    print(f"\n[int8 export: {time.monotonic() - started:.1f} s]")
    return repo / IR_NAME


@pytest.fixture(scope="session")
def two_models(int8_export: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One engine serving an OVMS config.json of two models: the int8 export and the GGUF it came
    from (each with its engine core), once both have loaded or failed to."""
    root = int8_export.parent
    (root / "gguf").mkdir()
    (root / "gguf" / "model.gguf").symlink_to(DEFAULT_MODEL)
    config = root / "two-models.json"
    entries = [{"name": IR_NAME, "base_path": IR_NAME}, {"name": GGUF_NAME, "base_path": "gguf"}]
    config.write_text(json.dumps({"mediapipe_config_list": entries}))
    server = start_repository_engine(config, tmp_path_factory.mktemp("two-models"))
    yield server
    server.stop()
