"""Each engine step's core outputs, turned into per-request deltas (vLLM v1's ``OutputProcessor``).

The core sends token ids; a request's consumer wants text. Per step, for every request that
produced anything, the processor

* detokenises the new ids of all requests in one batched call (``detokenizer.StepDecoder``);
* applies the request's stop strings, holding back text that may begin one; a request that hit
  one is finished here, and its id returned so that the core is told to abort it;
* keeps the tokens' log-probabilities beside them, when the request asked for them;
* counts the completion tokens (usage) and decodes beam search's finished sequences;
* hands the result to the request's ``Collector``, bounded and coalescing (``collector.py``).

Errors from the core arrive typed (``messages.RequestError``) and are handed over as such. The
processor also routes the scorer's outputs to their sessions. It does no I/O and holds no
event loop of its own: its unit tests feed it fake core outputs (tests/engine/unit/test_output_processor.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..core import ipc as m
from .collector import Collector
from .detokenizer import StepDecoder
from .stop_strings import StopMatcher


@dataclass(frozen=True)
class TextOptions:
    """How generated tokens become the reply's text."""

    stops: Sequence[str] = ()
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True


@dataclass(frozen=True)
class BeamResult:
    text: str
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str


@dataclass(frozen=True)
class RequestDelta:
    """What a request's consumer receives: everything since its last ``get``."""

    text: str = ""
    num_tokens: int = 0  # tokens generated since the last delta
    completion_tokens: int = 0  # tokens generated so far (the usage, once finished)
    prompt_tokens: int = 0
    # Only when the request asked for logprobs: the new tokens and their log-probabilities.
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    finish_reason: str | None = None  # "stop" (an end token or a stop string), "length", "abort"
    error: m.RequestError | None = None  # the request failed; no finish reason then
    beams: list[BeamResult] | None = None  # beam search: every returned sequence, best first

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None or self.error is not None


def _concat(a: list[Any] | None, b: list[Any] | None) -> list[Any] | None:
    if a is None:
        return b
    return a if b is None else a + b


def merge_deltas(earlier: RequestDelta, later: RequestDelta) -> RequestDelta:
    """Two deltas a slow consumer has not taken yet, as one."""
    return replace(
        later,
        text=earlier.text + later.text,
        num_tokens=earlier.num_tokens + later.num_tokens,
        token_ids=_concat(earlier.token_ids, later.token_ids),
        logprobs=_concat(earlier.logprobs, later.logprobs),
    )


def merge_scored(earlier: m.ScoreOutput, later: m.ScoreOutput) -> m.ScoreOutput:
    return m.ScoreOutput(later.session_id, earlier.tokens + later.tokens, later.done, earlier.error or later.error)


@dataclass(frozen=True)
class RequestHandle:
    """A submitted request: its id (to abort it) and where its deltas arrive."""

    request_id: int
    outputs: Collector[RequestDelta]


@dataclass
class RequestState:
    request_id: int
    prompt_tokens: int
    text: TextOptions
    detok: Any  # the decoder's per-request state
    stop: StopMatcher
    outputs: Collector[RequestDelta] = field(default_factory=lambda: Collector(merge_deltas))
    generated: int = 0


class OutputProcessor:
    def __init__(self, decoder: StepDecoder) -> None:
        self.decoder = decoder
        self.requests: dict[int, RequestState] = {}
        self.sessions: dict[int, Collector[m.ScoreOutput]] = {}

    def __len__(self) -> int:
        """Requests in flight."""
        return len(self.requests)

    def add_request(self, request_id: int, prompt_tokens: int, text: TextOptions) -> RequestHandle:
        detok = self.decoder.new_request(text.skip_special_tokens)
        stop = StopMatcher(text.stops, text.include_stop_str_in_output)
        state = RequestState(request_id, prompt_tokens, text, detok, stop)
        self.requests[request_id] = state
        return RequestHandle(request_id, state.outputs)

    def abort(self, request_id: int) -> bool:
        """Forget a request; True when it was still in flight (the core must be told)."""
        return self.requests.pop(request_id, None) is not None

    def process(self, outputs: Sequence[m.RequestOutput]) -> list[int]:
        """One step's outputs to their requests; returns the ids the core must abort (stop strings)."""
        work: list[tuple[Any, Sequence[int], bool]] = []
        targets: list[tuple[RequestState, m.RequestOutput]] = []
        singles: list[tuple[RequestState, m.RequestOutput]] = []
        for out in outputs:
            state = self.requests.get(out.request_id)
            if state is None:
                continue  # aborted meanwhile
            if out.finished:
                del self.requests[out.request_id]
            if out.error is not None:
                state.outputs.put(RequestDelta(prompt_tokens=state.prompt_tokens, error=out.error))
            elif out.sequences is not None:
                state.outputs.put(self._beams(state, out.sequences))
            elif len(out.token_ids) > 1 and state.stop.stops:
                singles.append((state, out))  # several tokens in one step (prompt lookup) and stop strings
            else:
                work.append((state.detok, out.token_ids, out.finished))
                targets.append((state, out))
        stopped: list[int] = []
        for (state, out), text in zip(targets, self.decoder.step(work), strict=True):
            if self._deliver(state, out, text):
                stopped.append(state.request_id)
        stopped += [state.request_id for state, out in singles if self._token_by_token(state, out)]
        return stopped

    def _token_by_token(self, state: RequestState, out: m.RequestOutput) -> bool:
        """A step's tokens one at a time, as one-token steps would have brought them: a stop string
        completed inside the step then ends the text, the usage and the log-probabilities at the same
        token as without prompt lookup. True when a stop string ended the request."""
        last = len(out.token_ids) - 1
        for i, token in enumerate(out.token_ids):
            lps = None if out.logprobs is None else out.logprobs[i : i + 1]
            one = m.RequestOutput(out.request_id, [token], out.finish_reason if i == last else None, None, lps)
            (text,) = self.decoder.step([(state.detok, one.token_ids, one.finished)])
            if self._deliver(state, one, text):
                return True
        return False

    def _deliver(self, state: RequestState, out: m.RequestOutput, text: str) -> bool:
        """Hand over one request's step; True when a stop string ended it before the core did."""
        count = len(out.token_ids)
        state.generated += count
        final = out.finish_reason is not None
        text, stopped = state.stop.feed(text, final)
        reason = "stop" if stopped else out.finish_reason
        if not (text or count or reason):
            return False  # text held back (a stop string may begin here, or a character is incomplete)
        with_logprobs = out.logprobs is not None
        state.outputs.put(
            RequestDelta(
                text,
                count,
                state.generated,
                state.prompt_tokens,
                out.token_ids if with_logprobs else None,
                out.logprobs,
                reason,
            )
        )
        if stopped and not final:
            self.requests.pop(state.request_id, None)  # gone already when the core ended it in this step
            return True
        return False

    def _beams(self, state: RequestState, sequences: list[m.Sequence]) -> RequestDelta:
        skip = state.text.skip_special_tokens
        texts = self.decoder.step([(self.decoder.new_request(skip), seq.token_ids, True) for seq in sequences])
        results: list[BeamResult] = []
        for seq, decoded in zip(sequences, texts, strict=True):
            matcher = StopMatcher(state.text.stops, state.text.include_stop_str_in_output)
            text, stopped = matcher.feed(decoded, final=True)
            results.append(BeamResult(text, seq.token_ids, seq.logprobs, "stop" if stopped else seq.finish_reason))
        count = sum(len(seq.token_ids) for seq in sequences)
        return RequestDelta("", count, count, state.prompt_tokens, finish_reason="stop", beams=results)

    def fail_all(self, error: m.RequestError) -> None:
        """The core is gone: every request and scoring session in flight ends with ``error``."""
        for state in self.requests.values():
            state.outputs.put(RequestDelta(prompt_tokens=state.prompt_tokens, error=error))
        self.requests.clear()
        for sid, session in self.sessions.items():
            session.put(m.ScoreOutput(sid, [], True, error.message))
        self.sessions.clear()

    # -- scoring sessions (core/scorer.py in the core, scoring_client.py here) ------------------------------------

    def open_session(self, session_id: int) -> Collector[m.ScoreOutput]:
        session: Collector[m.ScoreOutput] = Collector(merge_scored)
        self.sessions[session_id] = session
        return session

    def close_session(self, session_id: int) -> bool:
        return self.sessions.pop(session_id, None) is not None

    def process_scored(self, scored: Sequence[m.ScoreOutput]) -> None:
        for out in scored:
            session = self.sessions.get(out.session_id)
            if session is not None:
                session.put(out)
