"""The embedding models and cross-encoders one engine serves (``models/embedding_spec.py`` says
which), each loaded on a worker thread at start-up (``embeddings/``), and the lookups the routes
use: an unknown name is a 404, a model of the wrong kind a 400 naming ``model``. ``/v1/embeddings``
takes an embedding model; rerank and score take a cross-encoder, or an embedding model as a cosine
scorer. The registry holds them beside its LLMs. One that cannot load is reported and skipped: its
name answers 503 with the reason while the others serve."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from genmesh.protocol import OpenAIError, invalid_request, model_not_found

from ..embeddings.cross_encoder import CrossEncoderModel
from ..embeddings.model import EmbeddingModel
from .model_status import AVAILABLE, LOADING, Kind, ModelStatus, Servable, failed

if TYPE_CHECKING:
    from ..metrics import MetricFamilies
    from ..models.embedding_spec import EmbeddingSpec

log = logging.getLogger("genmesh.engine.openai.embedding_models")


class EmbeddingModels:
    def __init__(self, specs: tuple[EmbeddingSpec, ...], families: MetricFamilies) -> None:
        self.families = families
        self.specs = {spec.name: spec for spec in specs}
        self.aliases = {alias: spec.name for spec in specs for alias in spec.aliases}
        self.loaded: dict[str, EmbeddingModel | CrossEncoderModel] = {}
        self.errors: dict[str, str] = {}
        self._tasks: list[asyncio.Task[None]] = []

    def __contains__(self, name: object) -> bool:
        return name in self.specs or name in self.aliases

    def canonical(self, name: str) -> str:
        """The served name ``name`` means (itself, or the model it is an alias of)."""
        return self.aliases.get(name, name)

    async def start(self, wait: bool) -> None:
        """Load each model on a thread; ``wait``: return once each has loaded or failed (never raises)."""
        self._tasks = [asyncio.create_task(self._load(spec), name=f"load-{spec.name}") for spec in self.specs.values()]
        if wait:
            await asyncio.gather(*self._tasks)

    async def _load(self, spec: EmbeddingSpec) -> None:
        try:
            loader = CrossEncoderModel.load if spec.options.kind == "rerank" else EmbeddingModel.load
            model: EmbeddingModel | CrossEncoderModel = await asyncio.to_thread(loader, spec.name, spec.options)
        except Exception as exc:
            self.errors[spec.name] = str(exc) or type(exc).__name__
            log.error("embedding model %s failed to load: %s", spec.name, self.errors[spec.name])
            return
        inputs = self.families.embedding_inputs.labels(spec.name)
        batches = self.families.embedding_batches.labels(spec.name)

        def counted(size: int) -> None:
            inputs.inc(size)
            batches.inc()

        model.batcher.start(counted)
        self.loaded[spec.name] = model

    def status(self, name: str) -> ModelStatus:
        """OVMS's model status of ``name``."""
        if name in self.loaded:
            return AVAILABLE
        if name in self.errors:
            return failed(self.errors[name])
        return LOADING

    def servables(self) -> list[Servable]:
        out = []
        for name in self.specs:
            loaded = self.loaded.get(name)
            longest = loaded.max_length if isinstance(loaded, CrossEncoderModel) else None
            if isinstance(loaded, EmbeddingModel):
                longest = loaded.checkpoint.max_length
            kind: Kind = "rerank" if self.kind(name) == "rerank" else "embeddings"
            out.append(Servable(name, kind, self.status(name), longest))
        return out

    def kind(self, name: str) -> str:
        return self.specs[self.canonical(name)].options.kind

    def serving(self, model: str | None, chat_models: list[str]) -> EmbeddingModel:
        """The embedding model ``/v1/embeddings`` asks for."""
        found = self._serving(model, chat_models, "embeddings", "an embedding model")
        if not isinstance(found, EmbeddingModel):
            raise wrong_kind(found.name, "a rerank model (a cross-encoder), not an embedding model: use /v1/rerank")
        return found

    def scorer(self, model: str | None, chat_models: list[str]) -> EmbeddingModel | CrossEncoderModel:
        """The model rerank and score ask for: a cross-encoder, or an embedding model (cosine)."""
        return self._serving(model, chat_models, None, "a rerank or embedding model")

    def _serving(
        self, model: str | None, chat_models: list[str], kind: str | None, what: str
    ) -> EmbeddingModel | CrossEncoderModel:
        if model is None:
            of_kind = [n for n in self.specs if kind is None or self.kind(n) == kind]
            if len(of_kind) == 1:
                model = of_kind[0]
            else:
                raise invalid_request("you must provide a model parameter", param="model")
        model = self.canonical(model)
        if model not in self.specs:
            if model in chat_models:
                raise wrong_kind(model, f"a chat/completions model, not {what}: use /v1/chat/completions")
            raise model_not_found(model)
        found = self.loaded.get(model)
        if found is None:
            raise self.status(model).unavailable(model)
        return found

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.gather(*(m.batcher.close() for m in self.loaded.values()))


def wrong_kind(model: str, what: str) -> OpenAIError:
    return invalid_request(f"model '{model}' is {what}", param="model", code="model_not_supported")
