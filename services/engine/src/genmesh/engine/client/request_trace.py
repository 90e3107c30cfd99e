"""One engine request's spans, recorded from the timestamps the API process already keeps.

The core process is not traced: the API process knows when a request arrived, when it was
handed to the core (after the chat template and tokenising), when its first token came back and
when it finished, and records those phases as spans under the request's SERVER span once the
request ends (nothing crosses the API <-> core messages, nothing is done when tracing is off):

* ``engine.tokenise``: arrival to submission (chat template, tokenising, grammar compiling);
* ``engine.queue_and_prefill``: submission to the first token: waiting in the core's scheduler and
  the prompt's prefill. The core does not report when it schedules a request, so the two are one
  span; ``genmesh.engine.waiting_at_submit`` says how many requests were waiting in the scheduler
  (the core's last stats) when this one came;
* ``engine.decode``: the first token to the last.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from opentelemetry.context import Context

from genmesh.protocol.server.tracing import clock_anchor, current_context, past_span, tracing, usage_attributes

from ..core.ipc import SamplingParams


@dataclass(slots=True)
class RequestTrace:
    context: Context | None
    arrival: float
    submitted: float
    attrs: dict[str, str | int | float]

    def finish(self, outcome: str, prompt_tokens: int, generated: int, first: float | None) -> None:
        """Record the phases (``first``: the first token's ``perf_counter``, None when none came)."""
        anchor = clock_anchor()
        end = anchor[1]
        ctx = self.context
        past_span(
            "engine.tokenise", self.arrival, self.submitted, ctx, {"gen_ai.usage.input_tokens": prompt_tokens}, anchor
        )
        attrs = {
            **self.attrs,
            **usage_attributes(prompt_tokens, generated),
            "gen_ai.response.finish_reasons": (outcome,),
        }
        if first is None:
            past_span("engine.queue_and_prefill", self.submitted, end, ctx, attrs, anchor)
            return
        past_span("engine.queue_and_prefill", self.submitted, first, ctx, self.attrs, anchor)
        past_span("engine.decode", first, end, ctx, attrs, anchor)


def begin(arrival: float, model: str, params: SamplingParams, waiting: int) -> RequestTrace | None:
    """A request's trace, started as it is handed to the core (None when tracing is off)."""
    if not tracing().enabled:
        return None
    attrs: dict[str, str | int | float] = {
        "gen_ai.request.model": model,
        "gen_ai.request.max_tokens": params.max_new_tokens,
        "gen_ai.request.temperature": params.temperature,
        "genmesh.engine.waiting_at_submit": waiting,
    }
    return RequestTrace(current_context(), arrival, time.perf_counter(), attrs)
