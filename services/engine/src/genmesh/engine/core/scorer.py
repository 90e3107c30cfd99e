"""Prompt log-probabilities and true top-k, from the served model's full logits (engine core side).

``ContinuousBatchingPipeline`` reports the log-probability of the chosen token only (OpenVINO
GenAI 2026.4: "any logprobs > 1 is treated as logprobs == 1"), and of prompt tokens only with
``echo``. The scorer runs the same model: the OpenVINO IR that OpenVINO GenAI builds from the
served GGUF (saved beside its faithful copy at load, ``gguf_reencode.py``) or the IR folder's
own ``openvino_model.xml``, compiled for the same device with the same plugin configuration.
Where the int8 ops run generation, it is the same exact form with OpenVINO's own MatMuls
(model_loading.py says why).

A session is one stateful infer request fed a sequence in chunks of at most ``chunk_tokens``
(the KV state carries over between chunks, so one forward per chunk and memory bounded by
``chunk_tokens x vocabulary`` logits). Each reported position gets the chosen token's
log-probability and rank and the ``top`` most likely tokens, all normalised over the raw logits
(before temperature, penalties or any sampling filter), as the pipeline's own logprobs are.
At most ``max_sessions`` sessions exist at once; the API process keeps to that cap.

The model is compiled on the first scoring request, in a thread (``compile_model`` releases the
GIL, so the step loop runs meanwhile): an engine nobody asks for log-probabilities pays nothing
(measured on the default model: 2 s and 540 MiB once compiled).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import ipc as m

log = logging.getLogger("genmesh.engine.core.scorer")


@dataclass
class _Session:
    sid: int
    top: int
    report_from: int  # the first position reported (position p: token p given tokens 0..p-1)
    ids: list[int] = field(default_factory=list)  # every token received so far
    fed: int = 0  # tokens run through the model so far
    next_report: int = 1  # the next position whose entry is still to send
    pending: Any = None  # log-softmax of the row of token fed-1: the distribution of position `fed`
    ending: bool = False  # no more tokens will come
    request: Any = None  # its infer request (its KV state), made at the first forward

    @property
    def first_unreported(self) -> int:
        return max(self.next_report, self.report_from, 1)

    def target_fed(self) -> int:
        """How many tokens must go through the model: all while more may come; else only what
        the last reported position needs (its predecessor)."""
        if not self.ending:
            return len(self.ids)
        return len(self.ids) - 1 if self.first_unreported < len(self.ids) else self.fed

    @property
    def finished(self) -> bool:
        return self.ending and self.fed >= self.target_fed() and self.first_unreported >= len(self.ids)


class Scorer:
    def __init__(self, np: Any, load: Callable[[], Any], max_sessions: int, chunk_tokens: int) -> None:
        self.np = np
        self._load = load
        self.compiled: Any = None
        self._loading: threading.Thread | None = None
        self._load_error: str | None = None
        self.max_sessions = max_sessions
        self.chunk_tokens = chunk_tokens
        self.sessions: dict[int, _Session] = {}
        self.outputs: list[m.ScoreOutput] = []
        self.vocab: int | None = None

    def _compile(self) -> None:
        try:
            compiled = self._load()
            self.vocab = int(compiled.output("logits").get_partial_shape()[2].get_length())
            self.compiled = compiled
            log.info("scorer compiled")
        except Exception as exc:
            log.exception("the scorer's model failed to compile")
            self._load_error = f"the scorer's model failed to compile: {exc}"

    def _start_loading(self) -> None:
        if self._loading is None:
            self._loading = threading.Thread(target=self._compile, name="scorer-compile", daemon=True)
            self._loading.start()

    @property
    def ready(self) -> bool:
        return self.compiled is not None

    # -- messages ------------------------------------------------------------------------------
    def handle(self, msg: m.ScoreOpen | m.ScoreAppend | m.ScoreClose) -> None:
        if isinstance(msg, m.ScoreClose):
            for sid in msg.session_ids:
                self.sessions.pop(sid, None)
            return
        if isinstance(msg, m.ScoreOpen):
            if len(self.sessions) >= self.max_sessions:
                self._fail(msg.session_id, "too many scoring sessions")
                return
            self._start_loading()
            s = _Session(msg.session_id, msg.top, msg.report_from)
            self.sessions[s.sid] = s
            ids, last = msg.token_ids, not msg.keep
        else:
            found = self.sessions.get(msg.session_id)
            if found is None:
                self._fail(msg.session_id, "no such scoring session")
                return
            s, ids, last = found, msg.token_ids, msg.last
        vocab = self.vocab
        bad = [t for t in ids if t < 0 or (vocab is not None and t >= vocab)]
        if bad:
            self.sessions.pop(s.sid, None)
            self._fail(s.sid, f"token id {bad[0]} is outside the vocabulary")
            return
        s.ids.extend(ids)
        s.ending = s.ending or last

    def _fail(self, sid: int, why: str) -> None:
        self.outputs.append(m.ScoreOutput(sid, [], True, why))

    def has_work(self) -> bool:
        if not self.ready:  # compiling (nothing to do until it is done) or failed to
            return bool(self.outputs) or (self._load_error is not None and bool(self.sessions))
        return bool(self.outputs) or any(
            s.fed < s.target_fed() or s.first_unreported <= min(s.fed, len(s.ids) - 1) or s.finished
            for s in self.sessions.values()
        )

    # -- work ----------------------------------------------------------------------------------
    def work(self) -> tuple[list[m.ScoreOutput], int]:
        """Up to ``chunk_tokens`` tokens through the model, sessions taken in turn; returns the
        outputs ready and how many tokens were run."""
        if self._load_error is not None:
            for sid in list(self.sessions):
                self._fail(sid, self._load_error)
            self.sessions.clear()
        if not self.ready:
            out, self.outputs = self.outputs, []
            return out, 0
        budget = self.chunk_tokens
        ran = 0
        for s in list(self.sessions.values()):
            n = min(s.target_fed() - s.fed, budget)
            try:
                rows, start = (self._feed(s, n), s.fed - n) if n > 0 else (None, s.fed)
                entries = self._report(s, rows, start)
            except Exception as exc:  # a failing forward must not take the core down
                log.exception("scoring failed")
                del self.sessions[s.sid]
                self._fail(s.sid, f"scoring failed: {exc}")
                continue
            budget -= max(n, 0)
            ran += max(n, 0)
            done = s.finished
            if entries or done:
                self.outputs.append(m.ScoreOutput(s.sid, entries, done))
            if done:
                del self.sessions[s.sid]
            if budget <= 0:
                break
        out, self.outputs = self.outputs, []
        return out, ran

    def _feed(self, s: _Session, n: int) -> Any:
        np = self.np
        start = s.fed
        if s.request is None:
            s.request = self.compiled.create_infer_request()
        s.request.infer(
            {
                "input_ids": np.asarray([s.ids[start : start + n]], dtype=np.int64),
                "attention_mask": np.ones((1, start + n), dtype=np.int64),
                "position_ids": np.arange(start, start + n, dtype=np.int64)[None, :],
                "beam_idx": np.zeros(1, dtype=np.int32),
            }
        )
        s.fed += n
        return s.request.get_tensor("logits").data[0]  # row j: the distribution of position start+j+1

    def _report(self, s: _Session, rows: Any, start: int) -> list[m.ScoredToken]:
        """Entries for every position whose token is known and whose distribution is at hand:
        ``start`` from the previous pending row, ``start+1 .. fed`` from ``rows``."""
        first, last = s.first_unreported, min(s.fed, len(s.ids) - 1)
        entries: list[m.ScoredToken] = []
        if first <= last:
            if first == start and s.pending is not None:
                entries.append(self._entry(s.pending, s.ids[first], s.top))
                first += 1
            if first <= last and rows is not None:
                lps = self._log_softmax(rows[first - start - 1 : last - start])
                entries.extend(self._entry(lps[j], s.ids[first + j], s.top) for j in range(len(lps)))
            s.next_report = last + 1
        if rows is not None and len(rows):
            s.pending = self._log_softmax(rows[-1:])[0]
        return entries

    def _log_softmax(self, rows: Any) -> Any:
        np = self.np
        z = np.asarray(rows, dtype=np.float32)
        z = z - z.max(axis=-1, keepdims=True)
        return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))

    def _entry(self, lp: Any, token: int, top: int) -> m.ScoredToken:
        np = self.np
        chosen = float(lp[token])
        rank = int(np.count_nonzero(lp > lp[token])) + 1
        if top <= 0:
            return m.ScoredToken(token, chosen, rank, [], [])
        best = np.argpartition(-lp, top - 1)[:top]
        best = best[np.argsort(-lp[best], kind="stable")]
        return m.ScoredToken(token, chosen, rank, [int(i) for i in best], [float(lp[i]) for i in best])


def load_scorer(
    ov: Any,
    np: Any,
    ir_path: Callable[[], Path],
    device: str,
    plugin_config: dict[str, Any],
    max_sessions: int,
    chunk_tokens: int,
    extension: str | None = None,
) -> Scorer:
    """A scorer whose model compiles when the first scoring request comes (``ir_path`` is called then,
    in the compiling thread: it may build the IR; ``extension``: the int8 extension's library, which an
    IR with ``genmesh::Q41MatMul`` needs)."""

    def load() -> Any:
        core = ov.Core()
        if extension is not None:
            core.add_extension(extension)
        return core.compile_model(core.read_model(str(ir_path())), device, plugin_config)

    return Scorer(np, load, max_sessions, chunk_tokens)
