"""Every flag each service accepted before its settings moved to pydantic-settings' CLI source.

The flag lists are those of the argparse parsers (``--help``) of main at 80eeba5. ``check_flags`` gives
each a valid value and checks that the service's parser still takes it, sets the same field, and lists
it in ``--help`` (tests/engine/unit/test_config.py, tests/gateway/test_gateway_settings.py,
tests/microservice/test_microservice_units.py).
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, get_args

import pytest
from pydantic_settings import BaseSettings

Parse = Callable[[Sequence[str]], Any]


def flag_words(text: str) -> list[str]:
    """The flags of a ``--help`` listing, copied as text (one flag a word)."""
    return text.split()


# the HTTP limits, in every service
LIMIT_FLAGS = flag_words("""
--max-body-bytes --max-header-bytes --max-header-count --header-timeout-s --body-timeout-s
--keep-alive-timeout-s --max-client-connections --send-timeout-s --send-buffer-bytes --max-json-depth
--trace-batch-records --trace-flush-interval-s --trace-buffer-bytes --trace-exporter-start-timeout-s
--trace-exporter-restart-backoff-s
""")

ENGINE_FLAGS = flag_words("""
--model --config-path --served-model-name --host --port --device --cache-size --max-num-seqs
--max-num-batched-tokens --dynamic-split-fuse --no-dynamic-split-fuse --enable-prefix-caching
--no-enable-prefix-caching --plugin-config --max-tokens-limit --best-of-limit --num-kv-blocks
--max-model-len --log-level --stats-log-interval-s --startup-timeout-s --stall-timeout-s
--structured-max-depth --structured-max-grammar-bytes --structured-max-repeat --structured-max-items
--structured-free-json-max-string --structured-free-json-max-key --structured-free-json-max-items
--structured-free-json-max-depth --watchdog-timeout-s --core-restart-backoff-s
--core-restart-backoff-max-s --core-restart-limit --core-restart-window-s --core-restart-stable-s --max-prompt-tokens
--gguf-reencode --no-gguf-reencode --gguf-reencode-type --gguf-cache-dir --max-num-scoring-seqs
--scoring-chunk-tokens --scoring-queue-timeout-s --max-logprobs --draft-model --assistant-confidence-threshold
--tool-call-parser --enable-auto-tool-choice --no-enable-auto-tool-choice
""")

GATEWAY_FLAGS = flag_words("""
--host --port --config --redis-url --redis-prefix --redis-timeout-s --auth --admin-key-file
--auth-cache-s --lease-ttl-s --reclaim-interval-s --recheck-interval-s --state-ttl-s --health-interval-s
--health-timeout-s --circuit-failures --circuit-cooldown-s --progress-timeout-s --connect-timeout-s
--default-priority --responses-ttl-s --responses-max-bytes --log-level
""")

MICROSERVICE_FLAGS = flag_words("""
--llm-endpoint --model-id --host --port --connect-timeout-s --read-timeout-s --ready-cache-ttl-s
--max-connections --first-token-timeout-s --request-timeout-s --log-level
""")

# flags whose field is not named after them
FIELDS = {"--model-id": "llm_model_id"}
# values no rule below makes: (flag's argument, the field's value)
VALUES: dict[str, tuple[str, Any]] = {
    "--llm-endpoint": ("http://engine:1", "http://engine:1"),
    "--log-level": ("debug", "debug"),
    "--auth": ("on", "on"),
    "--gguf-reencode-type": ("Q8_0", "Q8_0"),
    "--assistant-confidence-threshold": ("0.4", 0.4),
    "--tool-call-parser": ("hermes", "hermes"),
    "--plugin-config": ('{"KV_CACHE_PRECISION": "u8"}', {"KV_CACHE_PRECISION": "u8"}),
}


def flag_case(settings: type[BaseSettings], flag: str) -> tuple[list[str], str, Any]:
    """``flag`` with a valid value: (argv, field, the value the field must then hold)."""
    if flag.startswith("--no-"):
        return [flag], flag[5:].replace("-", "_"), False
    field = FIELDS.get(flag, flag[2:].replace("-", "_"))
    info = settings.model_fields[field]
    if info.annotation is bool:
        return [flag], field, True
    if flag in VALUES:
        raw, value = VALUES[flag]
        return [flag, raw], field, value
    kind = next(t for t in (int, float, Path, str) if t in (info.annotation, *get_args(info.annotation)))
    value = kind((info.default or 2) + 1) if kind in (int, float) else kind(flag[2:] + "-value")
    return [flag, str(value)], field, value


def check_flags(parse: Parse, settings: type[BaseSettings], flags: list[str]) -> None:
    """Each of ``flags`` (and the limits) is in ``--help``, is accepted and sets its field."""
    flags = flags + LIMIT_FLAGS
    text = help_text(parse)
    assert not [flag for flag in flags if flag not in text], "flags missing from --help"
    for flag in flags:
        argv, field, value = flag_case(settings, flag)
        assert getattr(parse(argv), field) == value, argv


def help_text(parse: Parse) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as ended:
        parse(["--help"])
    assert ended.value.code == 0
    return out.getvalue()


def refusal(parse: Parse, argv: Sequence[str]) -> str:
    """What the parser says on stderr as it exits with status 2 (a usage error), not a traceback."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as ended:
        parse(argv)
    assert ended.value.code == 2
    return err.getvalue()
