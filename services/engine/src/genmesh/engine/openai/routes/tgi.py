"""Text Generation Inference's ``POST /generate`` and ``POST /generate_stream``, on the chat model,
through the same intake, budget and generator as ``/v1/completions`` (a TGI request is checked as
TGI checks it, then made a completion request): greedy ``/generate`` text is greedy
``/v1/completions`` text for the same prompt.

TGI samples when ``do_sample`` is set or a sampling parameter (``temperature``, ``top_k``,
``top_p``) changes the distribution; otherwise it decodes greedily. ``details`` gives each
generated token's id, text and log-probability, ``decoder_input_details`` the prompt's (prefill).
``typical_p``, ``watermark``, ``grammar``, ``adapter_id`` and ``top_n_tokens`` above 0 are refused
by name (422): the engine has no such step."""

from __future__ import annotations

from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import Response

from genmesh.protocol import CompletionRequest, OpenAIError, internal_error
from genmesh.protocol.native_errors import native
from genmesh.protocol.server.asgi import unless_disconnected
from genmesh.protocol.server.native_route import NativeRoute, native_body
from genmesh.protocol.sse import event, native_error_event
from genmesh.protocol.tgi import (
    TGI_GENERATE_PATH,
    TGI_STREAM_PATH,
    FinishReason,
    TgiDetails,
    TgiGenerateRequest,
    TgiGenerateResponse,
    TgiParameters,
    TgiPrefillToken,
    TgiStreamDetails,
    TgiStreamResponse,
    TgiToken,
)

from ...client.generation import Delta, Event, Finished
from ...core.ipc import ScoredToken
from ..intake import Limit, admit, submit
from ..loaded_model import EngineState
from ..prompt_logprobs import Prompts, ScoringPlan, scored_results, scored_stream
from ..sampling_params import prompt_limit
from .responding import arrival_time, engine, log, sse

router = APIRouter(route_class=NativeRoute)


def _check(body: TgiGenerateRequest, stream: bool, max_stop: int) -> None:
    """TGI's own checks, with its messages (422 ``validation``)."""
    p = body.parameters

    def bad(message: str) -> OpenAIError:
        return native(f"Input validation error: {message}", 422, "validation")

    if not body.inputs:
        raise bad("`inputs` cannot be empty")
    if p.temperature is not None and p.temperature <= 0:
        raise bad("`temperature` must be strictly positive")
    if p.repetition_penalty is not None and p.repetition_penalty <= 0:
        raise bad("`repetition_penalty` must be strictly positive")
    if p.top_p is not None and not 0 < p.top_p < 1:
        raise bad("`top_p` must be > 0.0 and < 1.0")
    if p.top_k is not None and p.top_k <= 0:
        raise bad("`top_k` must be strictly positive")
    if p.max_new_tokens is not None and p.max_new_tokens <= 0:
        raise bad("`max_new_tokens` must be strictly positive")
    if len(p.stop) > max_stop:
        raise bad(f"`stop` supports up to {max_stop} stop sequences. Given: {len(p.stop)}")
    if stream and p.decoder_input_details:
        raise bad("`decoder_input_details` == true is not supported when streaming tokens")
    for name, used in (
        ("typical_p", p.typical_p is not None),
        ("watermark", p.watermark),
        ("grammar", p.grammar is not None),
        ("adapter_id", p.adapter_id is not None),
        ("top_n_tokens", bool(p.top_n_tokens)),
    ):
        if used:
            raise bad(f"`{name}` is not supported by this server")


def _completion(body: TgiGenerateRequest, stream: bool, default_max: int) -> CompletionRequest:
    p = body.parameters
    sampling = p.do_sample or any(v is not None for v in (p.temperature, p.top_k, p.top_p))
    return CompletionRequest.model_validate(
        {
            "prompt": body.inputs,
            "max_tokens": p.max_new_tokens or default_max,
            "temperature": (1.0 if p.temperature is None else p.temperature) if sampling else 0.0,
            "top_p": p.top_p,
            "top_k": p.top_k,
            "repetition_penalty": p.repetition_penalty,
            "frequency_penalty": p.frequency_penalty,
            "seed": p.seed,
            "stop": p.stop or None,
            "logprobs": 0 if (p.details or stream) else None,
            "prompt_logprobs": 0 if p.decoder_input_details else None,
        }
    )


def _finish(reason: str, p: TgiParameters, last: int | None, eos: int | None) -> FinishReason:
    if reason == "length":
        return "length"
    return "stop_sequence" if p.stop and last != eos else "eos_token"


class _Tokens:
    """Token ids as TGI's token objects (their text, log-probability, whether special)."""

    def __init__(self, st: EngineState) -> None:
        self.tok = st.tokenizer
        self.eos = getattr(st.tokenizer, "eos_token_id", None)

    def token(self, token_id: int, logprob: float | None) -> TgiToken:
        text, _ = self.tok.token_text(token_id)
        return TgiToken(id=token_id, text=text, logprob=logprob, special=token_id == self.eos)

    def prefill(self, ids: list[int], scored: list[ScoredToken] | None) -> list[TgiPrefillToken]:
        """The prompt's tokens; the first has no log-probability (nothing came before it)."""
        lps: list[float | None] = [None, *[s.logprob for s in scored or []]]  # scored: positions 1 on
        lps += [None] * (len(ids) - len(lps))
        return [
            TgiPrefillToken(id=i, text=self.tok.token_text(i)[0], logprob=lp)
            for i, lp in zip(ids, lps[: len(ids)], strict=True)
        ]


async def _prepare(request: Request, stream: bool) -> tuple[EngineState, TgiGenerateRequest, list[int], float]:
    arrival = arrival_time()
    body = TgiGenerateRequest.model_validate(await native_body(request))
    st = engine(request, None)
    _check(body, stream, st.settings.tgi_max_stop_sequences)
    req = _completion(body, stream, st.settings.tgi_default_max_new_tokens)
    admit(st, req, "completions")
    ids = await st.tokenizer.completion_ids(req, prompt_limit(st))
    if body.parameters.truncate is not None and len(ids) > body.parameters.truncate:
        ids = ids[len(ids) - body.parameters.truncate :]  # TGI keeps the input's last tokens
    return st, body, ids, arrival


async def generate(request: Request) -> Response:
    st, body, ids, arrival = await _prepare(request, False)
    reply, tokens = await _generated(request, st, body, ids, arrival)
    return Response(
        _dumped(reply),
        media_type="application/json",
        headers={"x-prompt-tokens": str(len(ids)), "x-generated-tokens": str(tokens)},  # TGI's headers
    )


def _dumped(reply: TgiGenerateResponse) -> str:
    """TGI's reply: ``details`` only when asked for; inside it, a null log-probability stays (the prompt's first)."""
    return reply.model_dump_json(exclude={"details"} if reply.details is None else None)


async def _generated(
    request: Request, st: EngineState, body: TgiGenerateRequest, ids: list[int], arrival: float
) -> tuple[TgiGenerateResponse, int]:
    """The reply, and the tokens generated (TGI's ``x-generated-tokens``, what the gateway meters)."""
    req = _completion(body, False, st.settings.tgi_default_max_new_tokens)
    scoring = ScoringPlan.of(req, len(ids))
    gens = submit(st, req, "completions", ids, Limit(req.max_tokens, "max_new_tokens", "inputs"), None, arrival)
    results, prompts = await unless_disconnected(request, scored_results(st, ids, scoring, gens))
    done = results[0]
    p = body.parameters
    text = (body.inputs if p.return_full_text else "") + done.text
    if not p.details:
        return TgiGenerateResponse(generated_text=text), done.finished.completion_tokens
    tokens = _Tokens(st)
    details = TgiDetails(
        finish_reason=_finish(done.finished.reason, p, done.token_ids[-1] if done.token_ids else None, tokens.eos),
        generated_tokens=done.finished.completion_tokens,
        seed=p.seed,
        prefill=tokens.prefill(ids, prompts[0]) if p.decoder_input_details else [],
        tokens=[tokens.token(i, lp) for i, lp in zip(done.token_ids, done.logprobs, strict=False)],
    )
    return TgiGenerateResponse(generated_text=text, details=details), done.finished.completion_tokens


async def generate_stream(request: Request) -> Response:
    st, body, ids, arrival = await _prepare(request, True)
    return _stream(st, body, ids, arrival)


def _stream(st: EngineState, body: TgiGenerateRequest, ids: list[int], arrival: float) -> Response:
    req = _completion(body, True, st.settings.tgi_default_max_new_tokens)
    scoring = ScoringPlan.of(req, len(ids))
    gens = submit(st, req, "completions", ids, Limit(req.max_tokens, "max_new_tokens", "inputs"), None, arrival)
    tokens = _Tokens(st)
    p = body.parameters

    async def chunks(events: AsyncIterator[tuple[int, Event]], prompts: Prompts) -> AsyncIterator[TgiStreamResponse]:
        pending: TgiToken | None = None  # the last token waits for the end, which it carries
        text, index, last = "", 0, None
        async for _choice, ev in events:
            if isinstance(ev, Delta):
                for token_id, lp in zip(ev.token_ids, ev.logprobs, strict=False):
                    if pending is not None:
                        index += 1
                        yield TgiStreamResponse(index=index, token=pending)
                    pending = tokens.token(token_id, lp)
                    last = token_id
                text += ev.text
            elif isinstance(ev, str):
                text += ev
            elif isinstance(ev, Finished):
                full = (body.inputs if p.return_full_text else "") + text
                details = TgiStreamDetails(
                    finish_reason=_finish(ev.reason, p, last, tokens.eos),
                    generated_tokens=ev.completion_tokens,
                    seed=p.seed,
                    input_length=len(ids),
                )
                token = pending or TgiToken(id=tokens.eos or 0, text="", logprob=None, special=True)
                yield TgiStreamResponse(index=index + 1, token=token, generated_text=full, details=details)

    return sse(_events(scored_stream(st, ids, scoring, gens, chunks)), st.settings.stream_interval)


async def _events(chunks: AsyncIterator[TgiStreamResponse]) -> AsyncIterator[bytes]:
    """TGI's events (no ``[DONE]``); an error mid-stream is TGI's error event, and the end."""
    try:
        async for chunk in chunks:
            yield event(chunk.model_dump_json())
    except OpenAIError as err:
        yield native_error_event(err)
    except Exception as exc:
        log.exception("stream failed")
        yield native_error_event(internal_error(f"stream failed: {type(exc).__name__}"))


router.add_api_route(TGI_GENERATE_PATH, generate, methods=["POST"], response_model=None)
router.add_api_route(TGI_STREAM_PATH, generate_stream, methods=["POST"], response_model=None)


async def compat(request: Request) -> Response:
    """TGI's ``POST /``: ``stream`` picks ``/generate_stream``; else ``/generate``'s reply in a list."""
    if (await native_body(request)).get("stream") is True:
        return await generate_stream(request)
    st, body, ids, arrival = await _prepare(request, False)
    reply, tokens = await _generated(request, st, body, ids, arrival)
    return Response(
        b"[" + _dumped(reply).encode() + b"]",
        media_type="application/json",
        headers={"x-prompt-tokens": str(len(ids)), "x-generated-tokens": str(tokens)},
    )
