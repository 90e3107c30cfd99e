"""Messages between the API process and the engine-core process (msgpack over ZeroMQ).

API → core: ``AddRequest``, ``Abort``, ``Shutdown``; for scoring (prompt log-probabilities and
top-k, ``scorer.py``) ``ScoreOpen``, ``ScoreAppend``, ``ScoreClose``.
core → API: ``Ready`` once the pipeline is loaded, ``LoadFailed`` if it cannot be, then one
``StepOutputs`` per engine step (new tokens of every request that produced any, the scored
positions of every scoring session that made progress, plus the scheduler gauges and the core's
progress counters), an idle ``StepOutputs`` whenever the engine runs dry, and a ``Heartbeat``
every second while idle.
"""

from __future__ import annotations

from typing import Literal

import msgspec


class StructuralTag(msgspec.Struct, array_like=True, frozen=True):
    begin: str
    grammar: str  # EBNF (written by ``genmesh.engine.grammar``) of what lies between begin and end
    end: str


class Constraint(msgspec.Struct, frozen=True):
    """Grammar the output must follow (OpenVINO GenAI structured output): a whole-output EBNF
    grammar, or free text in which a trigger opens one of the tags (tool calls).

    Every grammar here was written by ``genmesh.engine.grammar``: one the engine cannot compile
    fails inside a batched step and ends the engine core."""

    grammar: str | None = None
    tags: list[StructuralTag] = msgspec.field(default_factory=list)
    triggers: list[str] = msgspec.field(default_factory=list)


class SamplingParams(msgspec.Struct, frozen=True):
    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    ignore_eos: bool = False
    min_new_tokens: int = 0
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    stop_token_ids: list[int] = msgspec.field(default_factory=list)
    logprobs: bool = False
    # Beam search (``best_of``): outputs only at the end, the ``num_return_sequences`` best.
    num_beams: int = 1
    num_return_sequences: int = 1
    length_penalty: float = 1.0
    constraint: Constraint | None = None
    # Prompt-lookup decoding (0: off; the core's pipeline must have it on, and then every request does).
    num_assistant_tokens: int = 0
    max_ngram_size: int = 0

    @property
    def beam_search(self) -> bool:
        return self.num_beams > 1


class AddRequest(msgspec.Struct, tag="add", frozen=True):
    request_id: int
    prompt_ids: list[int]
    params: SamplingParams


class Abort(msgspec.Struct, tag="abort", frozen=True):
    request_ids: list[int]


class Shutdown(msgspec.Struct, tag="shutdown", frozen=True):
    pass


class Sequence(msgspec.Struct, array_like=True, frozen=True):
    """One finished beam-search sequence."""

    token_ids: list[int]
    logprobs: list[float]
    score: float
    finish_reason: str


class RequestError(msgspec.Struct, array_like=True, frozen=True):
    """Why a request ended without a reply: ``rejected`` for the request's own fault (its
    parameters, e.g. an invalid JSON schema, or a prompt the KV cache cannot hold: a 400),
    ``engine`` for the engine's (a failed step, a dead core: a 500, or a 503 while the core is down)."""

    kind: Literal["rejected", "engine"]
    message: str


class RequestOutput(msgspec.Struct, array_like=True, frozen=True):
    request_id: int
    token_ids: list[int]
    # None while running; "stop" | "length" | "abort" when done. A request that failed ends with
    # ``error`` set instead (and no finish reason).
    finish_reason: str | None = None
    error: RequestError | None = None
    # The log-probability of each token in ``token_ids``, when the request asked for them.
    logprobs: list[float] | None = None
    # Beam search: every returned sequence, best first, in the final output only.
    sequences: list[Sequence] | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None or self.error is not None


class Stats(msgspec.Struct, array_like=True, frozen=True):
    running: int
    waiting: int
    cache_usage: float
    # Progress since the core started, for the API process's watchdog: engine steps done, tokens out.
    steps: int = 0
    tokens: int = 0
    # Drafting (a draft model or prompt lookup), since the core started: request-steps that gave tokens
    # (each gives the served model's own token plus the drafted ones it accepted), and tokens drafted.
    token_steps: int = 0
    drafted: int = 0


class ScoreOpen(msgspec.Struct, tag="score_open", frozen=True):
    """Feed ``token_ids`` to a new scoring session; report positions from ``report_from`` on
    (1: every prompt token but the first; ``len(token_ids)``: none of them) with ``top`` most
    likely tokens each. ``keep``: more tokens will follow (``ScoreAppend``)."""

    session_id: int
    token_ids: list[int]
    top: int
    report_from: int
    keep: bool = False


class ScoreAppend(msgspec.Struct, tag="score_append", frozen=True):
    """More tokens for an open session, each reported; ``last``: the session ends after them."""

    session_id: int
    token_ids: list[int]
    last: bool = False


class ScoreClose(msgspec.Struct, tag="score_close", frozen=True):
    session_ids: list[int]


class ScoredToken(msgspec.Struct, array_like=True, frozen=True):
    """One position of a scored sequence: the token there, its log-probability given every token
    before it, its rank (1: the most likely), and the ``top`` most likely tokens, best first."""

    token_id: int
    logprob: float
    rank: int
    top_ids: list[int]
    top_logprobs: list[float]


class ScoreOutput(msgspec.Struct, array_like=True, frozen=True):
    session_id: int
    tokens: list[ScoredToken]
    done: bool = False  # every token fed so far is reported (and the session is over unless kept)
    error: str | None = None


class StepOutputs(msgspec.Struct, tag="step", frozen=True):
    outputs: list[RequestOutput]
    stats: Stats
    scored: list[ScoreOutput] = msgspec.field(default_factory=list)


class Ready(msgspec.Struct, tag="ready", frozen=True):
    pid: int


class LoadFailed(msgspec.Struct, tag="load_failed", frozen=True):
    error: str


class Heartbeat(msgspec.Struct, tag="heartbeat", frozen=True):
    """Sent while idle, so the API process can tell a live idle loop from a stuck one."""


ToCore = AddRequest | Abort | Shutdown | ScoreOpen | ScoreAppend | ScoreClose
FromCore = StepOutputs | Ready | LoadFailed | Heartbeat

_encoder = msgspec.msgpack.Encoder()
_to_core = msgspec.msgpack.Decoder(ToCore)
_from_core = msgspec.msgpack.Decoder(FromCore)


def encode(message: ToCore | FromCore) -> bytes:
    return _encoder.encode(message)


def decode_to_core(data: bytes) -> ToCore:
    msg: ToCore = _to_core.decode(data)
    return msg


def decode_from_core(data: bytes) -> FromCore:
    msg: FromCore = _from_core.decode(data)
    return msg
