"""The set of models one engine serves, each with its own engine-core process and status.

Models load concurrently. A model that fails to load is reported in ``/v1/models``, ``/v1/config``,
``/health`` and the KServe v2 routes and answers 503, while the others keep serving; only the chat
model named alone with ``--model`` stops the server when it cannot load (``start``). Each loaded model's core is
supervised: while it is being replaced the model shows ``LOADING`` with the reason, and its
requests get 503 ``engine_restarting``. Requests find their model by ``model`` (404
``model_not_found`` for a name not served).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from functools import partial

from genmesh.protocol import invalid_request, model_not_found

from ..metrics import EngineMetrics, MetricFamilies
from ..models.ovms_config import ModelSpec, Repository
from ..settings import EngineSettings
from .audio_models import AudioModels
from .embedding_models import EmbeddingModels, wrong_kind
from .loaded_model import EngineState
from .model_status import AVAILABLE, LOADING, ModelStatus, Servable, failed

log = logging.getLogger("genmesh.engine.openai.registry")


class ServedModel:
    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec
        self.state: EngineState | None = None
        self.error: str | None = None  # why it failed to load
        self.task: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    def status(self) -> ModelStatus:
        if self.error is not None:  # as OVMS reports a graph that failed to load
            return failed(self.error)
        if self.state is None:
            return LOADING
        core = self.state.core
        if core.alive:
            return AVAILABLE
        if core.restarting:  # as OVMS reports a model version being reloaded
            return ModelStatus("LOADING", "UNAVAILABLE", core.unavailable_reason())
        return ModelStatus("UNKNOWN", "UNAVAILABLE", core.unavailable_reason())

    def unavailable_reason(self) -> str:
        return self.status().reason

    async def load(self, families: MetricFamilies, on_fatal: Callable[[int], None] | None = None) -> None:
        spec = self.spec
        try:
            metrics = EngineMetrics(spec.name, families)
            self.state = await EngineState.start(spec.settings, spec.source, metrics, on_fatal)
        except asyncio.CancelledError:
            raise
        except TimeoutError:
            self.error = f"model did not load within {spec.settings.startup_timeout_s:.0f} s"
            raise
        except Exception as exc:
            self.error = str(exc) or type(exc).__name__
            raise


class ModelRegistry:
    def __init__(
        self, repository: Repository, on_fatal: Callable[[int], None] | None = None, audio: AudioModels | None = None
    ) -> None:
        """``on_fatal(exit status)``: a model's core keeps dying; the server should exit."""
        self.repository = repository
        self.on_fatal = on_fatal
        self.families = MetricFamilies()
        self.models = {spec.name: ServedModel(spec) for spec in repository.models}
        self._aliases = {alias: m for m in self.models.values() for alias in m.spec.aliases}
        self.embeddings = EmbeddingModels(repository.embeddings, self.families)  # served apart (embeddings/)
        self.audio = audio if audio is not None else AudioModels(EngineSettings())  # served apart (audio/)
        for s in self.servables():
            self.families.model_ready.labels(model=s.name, kind=s.kind).set_function(partial(self._ready, s.name))
            failed = partial(self._ready, s.name, failed=True)
            self.families.model_load_failed.labels(model=s.name, kind=s.kind).set_function(failed)

    def _ready(self, name: str, failed: bool = False) -> float:
        """1.0 while ``name`` serves (``failed``: once it has failed to load), else 0.0."""
        found = self.servable(name)
        if found is None:
            return 0.0
        return 1.0 if (found.status.failed if failed else found.status.available) else 0.0

    def all(self) -> list[ServedModel]:
        return list(self.models.values())

    def chat_names(self) -> list[str]:
        """Every value of ``model`` that names a chat model: its name and its aliases."""
        return [*self.models, *self._aliases]

    async def start(self, wait: bool) -> None:
        """Start every model's load at once. ``wait`` (``--model``): return when all have loaded or
        failed, and raise the chat model's failure (the model named alone on the command line stops
        the server, as vLLM and OVMS do in single-model mode); every other servable that fails is
        reported and skipped. Otherwise (a config.json) return at once and let each load finish, or
        fail alone."""
        for model in self.models.values():
            model.task = asyncio.create_task(self._load(model, quiet=wait), name=f"load-{model.name}")
        await self.embeddings.start(wait)
        await self.audio.start(wait)
        if wait:
            await asyncio.gather(*(m.task for m in self.models.values() if m.task is not None))
            for s in self.servables():
                if s.status.failed:
                    log.error("%s model %s is skipped, the others serve: %s", s.kind, s.name, s.status.message)

    def servables(self) -> list[Servable]:
        """Every served model of every kind, with its status."""
        out = [
            Servable(m.name, "chat", m.status(), m.spec.source.context_length if m.spec.source is not None else None)
            for m in self.models.values()
        ]
        return out + self.embeddings.servables() + self.audio.servables()

    def servable(self, name: str) -> Servable | None:
        """The servable called ``name`` (a chat model also by its aliases); None: not served."""
        chat = self.models.get(name) or self._aliases.get(name)
        if chat is not None:
            name = chat.name
        return next((s for s in self.servables() if s.name == name), None)

    async def _load(self, model: ServedModel, quiet: bool) -> None:
        try:
            await model.load(self.families, self.on_fatal)
        except Exception:
            if quiet:
                raise
            log.error("model %s failed to load: %s", model.name, model.error)

    def lookup(self, model: str | None) -> ServedModel:
        if model is None:
            if len(self.models) == 1:
                return next(iter(self.models.values()))
            raise invalid_request("you must provide a model parameter", param="model")
        found = self.models.get(model) or self._aliases.get(model)
        if found is None:
            if model in self.embeddings:
                if self.embeddings.kind(model) == "rerank":
                    raise wrong_kind(model, "a rerank model (a cross-encoder): use /v1/rerank")
                raise wrong_kind(model, "an embedding model: use /v1/embeddings")
            if model in self.audio:
                raise wrong_kind(model, "an audio model: use /v1/audio/transcriptions or /v1/audio/speech")
            raise model_not_found(model)
        return found

    def serving(self, model: str | None) -> EngineState:
        """The loaded engine for ``model``; 404 for an unknown name, 503 while it cannot serve."""
        found = self.lookup(model)
        if found.state is None:
            raise found.status().unavailable(found.name)
        return found.state

    async def close(self) -> None:
        for model in self.models.values():
            if model.task is not None and not model.task.done():
                model.task.cancel()
        await asyncio.gather(*(m.task for m in self.models.values() if m.task is not None), return_exceptions=True)
        await asyncio.gather(*(m.state.close() for m in self.models.values() if m.state is not None))
        await self.embeddings.close()
        await self.audio.close()
