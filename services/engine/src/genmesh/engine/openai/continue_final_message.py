"""``continue_final_message`` (vLLM's chat parameter): the last message, an assistant's, is continued
rather than answered. The gateway's mid-stream failover sends the text generated so far this way.

The prompt is the template rendered without a generation prompt, cut right after the final
message's text (the template's end-of-turn marker, and anything after it, dropped), as vLLM does.
"""

from __future__ import annotations

from genmesh.protocol import ChatCompletionRequest, ChatMessage, invalid_request


def check_continue(body: ChatCompletionRequest) -> None:
    """A 400 for ``continue_final_message`` with a generation prompt or without a final assistant message."""
    if not body.continue_final_message:
        return
    if body.add_generation_prompt is not False:
        raise invalid_request(
            "'continue_final_message' needs 'add_generation_prompt': false", param="continue_final_message"
        )
    if body.messages[-1].role != "assistant":
        raise invalid_request(
            "'continue_final_message' needs an assistant message last", param="continue_final_message"
        )


def continued(prompt: str, final: ChatMessage) -> str:
    """``prompt`` cut after the final message's text (its last occurrence; trimmed if the template trims)."""
    text = final.text()
    for needle in (text, text.strip()):
        at = prompt.rfind(needle) if needle else -1
        if at != -1:
            return prompt[: at + len(needle)]
    raise invalid_request(
        "the chat template does not render the final message's text, so it cannot be continued",
        param="continue_final_message",
    )
