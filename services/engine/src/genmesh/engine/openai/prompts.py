"""Prompts in the API process: chat template, tokenising and detokenising, without the pipeline."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from genmesh.protocol import ChatMessage, CompletionRequest, OtherPart, invalid_request, unsupported_parameter

from ..client.detokenizer import BatchDetokenizer, StepDecoder, TableDecoder
from ..client.token_table import TokenTable, build_token_table
from .continue_final_message import continued
from .tools import ToolPlan
from .tools import history as tool_history

# OVMS's default when a model ships no chat template: one message, used as the prompt.
SINGLE_MESSAGE_TEMPLATE = (
    "{% if messages|length != 1 %} {{ raise_exception('This servable accepts only single message "
    "requests') }}{% endif %}{{ messages[0]['content'] }}"
)


TEMPLATE_FILE = "template.jinja"
_LOAD_LOCK = threading.Lock()
# Prompts longer than this (characters) are templated and tokenised in a worker thread. OpenVINO
# GenAI 2026.4 holds the GIL while it does either (measured), so what bounds the stall is the size
# check before: a prompt that cannot fit is refused without being tokenised.
OFF_LOOP_CHARS = 65536


class PromptTokenizer:
    def __init__(self, model_path: Path, template_dir: Path | None = None) -> None:
        """Load the tokenizer (blocking: call it in a thread). The chat template follows OVMS's
        precedence: ``template.jinja`` in ``template_dir`` (the model folder, or the GGUF's), then
        the model's own (``tokenizer_config.json`` of an IR export, or the GGUF's metadata), else
        the single-message default (``has_chat_template`` false)."""
        import openvino_genai as ov_genai

        # One tokenizer loads at a time: several models' tokenizers loading in parallel threads
        # (an OVMS repository) were seen to hang inside OpenVINO.
        with _LOAD_LOCK:
            self._tok = ov_genai.Tokenizer(str(model_path))
            self.chat_template_source = self._choose_chat_template(template_dir)
            self.has_chat_template = bool(self._tok.chat_template)
            self.vocab_size = self._vocab_size()
            self.eos_token_id = int(self._tok.get_eos_token_id())
            self.table: TokenTable | None = build_token_table(self._tok)
            # No token covers more characters than its piece has bytes: a text longer than
            # ``limit * max_piece_chars`` is more than ``limit`` tokens, known without tokenising.
            self.max_piece_chars = max((len(p) for p in self.table.pieces), default=0) if self.table else 0

    def _choose_chat_template(self, template_dir: Path | None) -> str:
        file = template_dir / TEMPLATE_FILE if template_dir is not None else None
        if file is not None and file.is_file():
            template = file.read_text(encoding="utf-8")  # unreadable: the model fails to load, as in OVMS
            if template.strip():
                self._tok.set_chat_template(template)
                return str(file)
        return "model" if self._tok.chat_template else "default (single message)"

    def _vocab_size(self) -> int | None:
        try:
            return len(self._tok.get_vocab())
        except Exception:  # some vocabularies hold bytes that are not UTF-8
            return None

    @property
    def chat_template(self) -> str:
        return str(self._tok.chat_template or "")

    def chat_prompt(
        self,
        messages: Sequence[ChatMessage],
        add_generation_prompt: bool = True,
        plan: ToolPlan | None = None,
        extra_context: dict[str, Any] | None = None,
        continue_final: bool = False,
    ) -> str:
        for i, msg in enumerate(messages):
            if isinstance(msg.content, list):
                for j, part in enumerate(msg.content):
                    if isinstance(part, OtherPart):
                        raise unsupported_parameter(
                            f"messages[{i}].content[{j}]", f"content of type '{part.type}' (text only)"
                        )
        turns = tool_history(list(messages), plan)
        if not self.has_chat_template:
            if len(turns) != 1:
                raise invalid_request(
                    "This servable accepts only single message requests (the model has no chat template)",
                    param="messages",
                )
            return str(turns[0]["content"])
        tools = plan.template_tools() if plan is not None and plan.native else None
        try:
            prompt = str(
                self._tok.apply_chat_template(
                    turns, add_generation_prompt=add_generation_prompt, tools=tools, extra_context=extra_context
                )
            )
        except Exception as exc:  # a template that raises on this history is the client's problem
            raise invalid_request(f"chat template failed on these messages: {exc}", param="messages") from exc
        return continued(prompt, messages[-1]) if continue_final else prompt

    def check_size(self, text_chars: int, limit: int, param: str) -> None:
        """A 400 for a text that is surely longer than ``limit`` tokens, before it is tokenised."""
        if self.max_piece_chars and text_chars > limit * self.max_piece_chars:
            raise invalid_request(
                f"The prompt has {text_chars} characters, more than the {limit} tokens this server accepts "
                "could hold. Please reduce the length of the prompt.",
                param=param,
                code="context_length_exceeded",
            )

    def check_ids(self, ids: Sequence[int], param: str) -> None:
        """A 400 for a token id outside the vocabulary (``param[i]`` names it)."""
        vocab = self.vocab_size
        if vocab is None:
            return
        for i, token in enumerate(ids):
            if token >= vocab:
                raise invalid_request(
                    f"token id {token} is outside this model's vocabulary (0-{vocab - 1})", param=f"{param}[{i}]"
                )

    async def chat_ids(
        self,
        messages: Sequence[ChatMessage],
        add_generation_prompt: bool,
        plan: ToolPlan | None,
        extra_context: dict[str, Any] | None,
        limit: int,
        continue_final: bool = False,
    ) -> list[int]:
        """The token ids of a chat prompt: size-checked first, then templated and tokenised (off
        the event loop when large)."""
        chars = sum(len(m.text()) for m in messages)
        self.check_size(chars, limit, "messages")
        if self.has_chat_template and len(messages) > limit:  # a template gives every message a token or more
            raise invalid_request(
                f"{len(messages)} messages cannot fit in the {limit} tokens this server accepts",
                param="messages",
                code="context_length_exceeded",
            )
        if chars <= OFF_LOOP_CHARS:
            prompt = self.chat_prompt(messages, add_generation_prompt, plan, extra_context, continue_final)
            return self.encode(prompt, add_special_tokens=False)
        prompt = await asyncio.to_thread(
            self.chat_prompt, messages, add_generation_prompt, plan, extra_context, continue_final
        )
        self.check_size(len(prompt), limit, "messages")
        return await asyncio.to_thread(self.encode, prompt, False)

    async def completion_ids(self, req: CompletionRequest, limit: int) -> list[int]:
        """The token ids of a completion prompt (text size-checked first; ids checked against the vocabulary)."""
        prompt = req.single_prompt()
        if isinstance(prompt, str) and len(prompt) > OFF_LOOP_CHARS:
            self.check_size(len(prompt), limit, "prompt")
            return await asyncio.to_thread(self.encode, prompt, True)
        ids = self.completion_prompt(req)
        if not isinstance(prompt, str):
            self.check_ids(ids, "prompt")
        return ids

    def encode(self, text: str, add_special_tokens: bool) -> list[int]:
        ids = self._tok.encode(text, add_special_tokens=add_special_tokens).input_ids.data
        return [int(t) for t in ids[0]]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        if self.table is not None:
            return self.table.bytes_of(ids, skip_special_tokens).decode("utf-8", errors="replace")
        return str(self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens))

    def detokenize(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` with special tokens kept (``/detokenize``, as vLLM answers it)."""
        return self.decode(ids, skip_special_tokens=False)

    def decode_batch(self, windows: list[list[int]], skip_special_tokens: bool = True) -> list[str]:
        """One detokenizer call for many sequences (the per-call cost dominates short decodes)."""
        return [str(t) for t in self._tok.decode(windows, skip_special_tokens=skip_special_tokens)]

    def step_decoder(self) -> StepDecoder:
        """How the engine turns each step's tokens into text: the byte table when it round-trips."""
        if self.table is not None:
            return TableDecoder(self.table)
        return BatchDetokenizer(self.decode_batch)

    def special_tokens(self) -> dict[str, str | None]:
        """``eos_token``, ``bos_token``, ``pad_token`` as text (None where the model has none)."""
        out: dict[str, str | None] = {}
        for name, getter in (("eos", "get_eos_token_id"), ("bos", "get_bos_token_id"), ("pad", "get_pad_token_id")):
            token_id = int(getattr(self._tok, getter)())
            out[f"{name}_token"] = self.token_text(token_id)[0] if 0 <= token_id < (self.vocab_size or 0) else None
        return out

    def token_text(self, token_id: int) -> tuple[str, list[int]]:
        """One token's text and raw bytes, as logprobs report them."""
        if self.table is not None:
            raw = self.table.piece(token_id)
            return raw.decode("utf-8", errors="replace"), list(raw)
        text = str(self._tok.decode([token_id], skip_special_tokens=False))
        return text, list(text.encode("utf-8"))

    def completion_prompt(self, req: CompletionRequest) -> list[int]:
        prompt = req.single_prompt()
        if isinstance(prompt, str):
            if not prompt:
                raise invalid_request("'prompt' must not be empty", param="prompt")
            return self.encode(prompt, add_special_tokens=True)
        if prompt and all(isinstance(t, int) for t in prompt):
            return [int(t) for t in prompt]  # type: ignore[arg-type]
        if not prompt:
            raise invalid_request("'prompt' must not be empty", param="prompt")
        raise unsupported_parameter("prompt", "a batch of several prompts in one request (send one per request)")
