"""A streamed response: generation events as the Responses API's typed SSE events.

``response.created`` and ``response.in_progress`` go out at once; the assistant message opens
with its first visible text; function calls (complete once the reply ends, as with chat) follow
as ``function_call`` items whose arguments stream in one delta. An error ends the stream with an
``error`` event and ``response.failed``. Closing the stream (client gone) aborts the generation.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator

from pydantic import BaseModel

from genmesh.protocol import OpenAIError, internal_error
from genmesh.protocol.response_objects import (
    ArgumentsDeltaEvent,
    ArgumentsDoneEvent,
    ContentPartEvent,
    OutputFunctionCall,
    OutputItem,
    OutputItemEvent,
    OutputMessage,
    OutputTextPart,
    ResponseLifecycleEvent,
    ResponseObject,
    TextDeltaEvent,
    TextDoneEvent,
)
from genmesh.protocol.sse import event, response_failed

from ...client.generation import Delta, Event, Finished
from .. import tools
from .output import finished, item_id, message, split

log = logging.getLogger("genmesh.engine.http")


def encode(model: BaseModel, kind: str) -> bytes:
    """One SSE event, named by its type (``event: response.created``) as OpenAI sends it."""
    return event(model.model_dump_json(), kind)


class ResponseEvents:
    def __init__(self, base: ResponseObject, plan: tools.ToolPlan | None, prompt_tokens: int) -> None:
        self.base = base
        self.plan = plan
        self.prompt_tokens = prompt_tokens
        self.seq = 0
        self.splitter = tools.CallSplitter() if plan is not None and plan.mode == "auto" else None
        self.text = ""  # everything generated, for parsing calls at the end
        self.shown = ""  # what went out as message text
        self.msg_id: str | None = None
        self.output: list[OutputItem] = []

    def next_seq(self) -> int:
        seq, self.seq = self.seq, self.seq + 1
        return seq

    def lifecycle(self, kind: str, response: ResponseObject) -> bytes:
        ev = ResponseLifecycleEvent(type=kind, sequence_number=self.next_seq(), response=response)  # type: ignore[arg-type]
        return encode(ev, kind)

    def item(self, kind: str, index: int, item: OutputItem) -> bytes:
        ev = OutputItemEvent(type=kind, sequence_number=self.next_seq(), output_index=index, item=item)  # type: ignore[arg-type]
        return encode(ev, kind)

    def part(self, kind: str, text: str) -> bytes:
        assert self.msg_id is not None
        part = OutputTextPart(text=text)
        seq = self.next_seq()
        ev = ContentPartEvent(type=kind, sequence_number=seq, item_id=self.msg_id, output_index=0, part=part)  # type: ignore[arg-type]
        return encode(ev, kind)

    async def events(self, source: AsyncIterator[tuple[int, Event]]) -> AsyncIterator[bytes]:
        yield self.lifecycle("response.created", self.base)
        yield self.lifecycle("response.in_progress", self.base)
        try:
            async with contextlib.aclosing(source):  # type: ignore[type-var]
                async for _, ev in source:
                    if isinstance(ev, Finished):
                        for chunk in self.finish(ev):
                            yield chunk
                        return
                    new = ev.text if isinstance(ev, Delta) else ev
                    if isinstance(new, str):
                        for chunk in self.delta(self.visible(new, final=False)):
                            yield chunk
        except OpenAIError as err:
            for chunk in self.failed(err):
                yield chunk
        except Exception as exc:
            log.exception("response stream failed")
            for chunk in self.failed(internal_error(f"stream failed: {type(exc).__name__}")):
                yield chunk

    def visible(self, new: str, final: bool) -> str:
        """The part of new text that is message text (not a tool call being written)."""
        self.text += new
        if self.plan is None:
            return new
        if self.splitter is not None:
            return self.splitter.feed(new, final)
        return ""  # required / named: the whole reply is the call

    def open_message(self) -> list[bytes]:
        if self.msg_id is not None:
            return []
        self.msg_id = item_id("msg")
        return [
            self.item("response.output_item.added", 0, OutputMessage(id=self.msg_id, status="in_progress", content=[])),
            self.part("response.content_part.added", ""),
        ]

    def delta(self, text: str) -> list[bytes]:
        if not text:
            return []
        out = self.open_message()
        self.shown += text
        assert self.msg_id is not None
        ev = TextDeltaEvent(sequence_number=self.next_seq(), item_id=self.msg_id, output_index=0, delta=text)
        out.append(encode(ev, ev.type))
        return out

    def finish(self, ev: Finished) -> list[bytes]:
        out: list[bytes] = []
        tail = self.visible("", final=True)
        parts = split(self.text, self.plan)
        if parts.calls:
            out += self.delta(tail)
        else:  # no parsable call after all: whatever was held back is text
            out += self.delta(self.text[len(self.shown) :] if self.plan is not None else tail)
        if self.msg_id is not None or not parts.calls:
            out += self.close_message("incomplete" if ev.reason == "length" and not parts.calls else "completed")
        for call in parts.calls:
            out += self.call(call)
        done = finished(self.base, self.output, ev.reason, self.prompt_tokens, ev.completion_tokens, int(time.time()))
        kind = "response.completed" if done.status == "completed" else "response.incomplete"
        out.append(self.lifecycle(kind, done))
        return out

    def close_message(self, status: str) -> list[bytes]:
        out = self.open_message()
        assert self.msg_id is not None
        text = self.shown
        done = TextDoneEvent(sequence_number=self.next_seq(), item_id=self.msg_id, output_index=0, text=text)
        out += [encode(done, done.type), self.part("response.content_part.done", text)]
        item = message(self.msg_id, text, status)
        self.output.append(item)
        out.append(self.item("response.output_item.done", 0, item))
        return out

    def call(self, call: OutputFunctionCall) -> list[bytes]:
        index = len(self.output)
        opened = call.model_copy(update={"arguments": "", "status": "in_progress"})
        args = call.arguments
        delta = ArgumentsDeltaEvent(sequence_number=0, item_id=call.id, output_index=index, delta=args)
        out = [self.item("response.output_item.added", index, opened)]
        delta.sequence_number = self.next_seq()
        out.append(encode(delta, delta.type))
        done = ArgumentsDoneEvent(
            sequence_number=self.next_seq(), item_id=call.id, output_index=index, name=call.name, arguments=args
        )
        out.append(encode(done, done.type))
        self.output.append(call)
        out.append(self.item("response.output_item.done", index, call))
        return out

    def failed(self, err: OpenAIError) -> list[bytes]:
        sequence = self.next_seq()
        self.next_seq()  # response.failed's, after the error event's
        return [response_failed(sequence, self.base.model_copy(update={"output": self.output}), err)]
