"""One servable's state as OVMS reports a model version's (``/v1/config``), and the 503 its endpoints
answer while it cannot serve.

Every servable (a chat model, an embedding or rerank model, Whisper, a voice) is AVAILABLE, LOADING
(first load, or a core being replaced), or failed to load: ``LOADING`` with ``FAILED_PRECONDITION`` and
the reason, as OVMS shows a model it could not load. A servable that failed to load is skipped: the
others serve (docs/engine.md, "When a servable fails").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from genmesh.protocol import OpenAIError, service_unavailable

Kind = Literal["chat", "embeddings", "rerank", "transcription", "speech"]
LOADING_RETRY_AFTER_S = 5  # a model loads in seconds to minutes
FAILED_RETRY_AFTER_S = 60  # a model that failed to load comes back only with a restart of the server
FAILED_CODE = "FAILED_PRECONDITION"


@dataclass(frozen=True)
class ModelStatus:
    """OVMS's model version status: ``state`` and ``error_code`` as ``/v1/config`` shows them."""

    state: str
    error_code: str
    message: str

    @property
    def available(self) -> bool:
        return self.state == "AVAILABLE"

    @property
    def failed(self) -> bool:
        """It failed to load: skipped until the server is restarted."""
        return self.error_code == FAILED_CODE

    @property
    def shown_state(self) -> str:
        """The state ``/v1/models`` and ``/health`` show: ``FAILED`` for a servable that failed to load
        (``/v1/config`` keeps OVMS's ``LOADING`` with ``FAILED_PRECONDITION``)."""
        return "FAILED" if self.failed else self.state

    @property
    def reason(self) -> str:
        """Why it does not serve (its message; a first load says so)."""
        if self.state == "LOADING" and self.error_code == "OK":
            return "engine is loading the model"
        return self.message

    def version_status(self) -> dict[str, object]:
        """One entry of ``/v1/config``'s ``model_version_status``."""
        return {
            "version": "1",
            "state": self.state,
            "status": {"error_code": self.error_code, "error_message": self.message},
        }

    @property
    def retry_after_s(self) -> int:
        return FAILED_RETRY_AFTER_S if self.failed else LOADING_RETRY_AFTER_S

    def unavailable(self, name: str) -> OpenAIError:
        """The 503 the servable's endpoints answer, naming it and why, with Retry-After."""
        message = f"model '{name}' is not available: {self.reason}"
        return service_unavailable(message, "engine_unavailable", self.retry_after_s)


LOADING = ModelStatus("LOADING", "OK", "OK")
AVAILABLE = ModelStatus("AVAILABLE", "OK", "OK")


def failed(reason: str) -> ModelStatus:
    """A servable that could not load (a missing tool, a bad file, a failed conversion, out of memory)."""
    return ModelStatus("LOADING", FAILED_CODE, reason)


@dataclass(frozen=True)
class Servable:
    """One served model of any kind and its status: what ``/v1/models``, ``/v1/config``, ``/health`` and
    the KServe v2 routes report."""

    name: str
    kind: Kind
    status: ModelStatus
    max_model_len: int | None = None
