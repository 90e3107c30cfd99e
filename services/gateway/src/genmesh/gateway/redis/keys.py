"""Every Redis key and channel the gateway uses, and their TTLs, in one place.

Per-model keys carry the hash tag ``{model}`` so that one Lua script may touch all of them on
Redis Cluster; per-API-key keys carry ``{k:<key id>}`` for the same reason.
"""

from __future__ import annotations

from dataclasses import dataclass

API_KEY_TTL_S = 365 * 24 * 3600
REVOKED_TOMBSTONE_TTL_S = 7 * 24 * 3600
RATE_WINDOW_TTL_S = 120
USAGE_TTL_S = 400 * 24 * 3600
CONSOLE_HISTORY_SERIES = ("queue_depth", "tokens_per_s", "ttft_p50_s", "ttft_p99_s", "rate_429", "rate_5xx")


def _tag(value: str) -> str:
    # braces inside a hash tag would end it early
    return value.replace("{", "(").replace("}", ")")


@dataclass(frozen=True)
class ModelKeys:
    """The keys of one model's queue and slot leases (all in one hash slot)."""

    queue: str  # ZSET, all scores 0, members "<class><round><seq>|<id>" ordered lexicographically
    waiters: str  # HASH id -> "q|<member>" (queued) or "g|<upstream index>" (granted)
    alive: str  # ZSET id -> expiry ms: heartbeats of queued and running requests
    # HASH fair-queue bookkeeping: "c<class>" current round, "t<class>:<tenant>" last round, "seq";
    # and the state's "epoch" (new when Redis lost the state) and "hold" (no grants until then, ms)
    rounds: str
    members: str  # ZSET gateway id -> expiry ms: gateways with requests of this model, renewed with them
    slots: tuple[str, ...]  # one ZSET per upstream (config order): lease id -> expiry ms
    channel: str  # pub/sub channel on which grants are announced
    prefix_base: str  # STRING per prompt-prefix block hash -> upstream index (prefix-affinity), TTL affinity_ttl_s
    batch: str  # ZSET batch line lease id -> expiry ms: the model's slots batch lines hold (all replicas)

    def all(self) -> list[str]:
        return [self.queue, self.waiters, self.alive, self.rounds, self.members, *self.slots]

    def prefix(self, block_hash: str) -> str:
        """The upstream that last served prompts starting with this block chain (same hash slot)."""
        return f"{self.prefix_base}:{block_hash}"


@dataclass(frozen=True)
class KeyIdKeys:
    """The keys of one API key's limits (all in one hash slot)."""

    rate: str  # HASH w (minute window), req, tok
    concurrent: str  # ZSET request id -> expiry ms
    usage: str  # HASH requests, prompt_tokens, completion_tokens


@dataclass(frozen=True)
class BatchKeys:
    """The keys of one batch (tag ``{k:<owner key id>}``, with the owner's files and indexes), TTL
    ``BatchStore.ttl`` from its creation."""

    meta: str  # HASH the batch object's fields, counts ("total", "completed", "failed", "d:<model>"), "closing"
    input: str  # HASH line index -> the input line (raw JSON), copied from the input file
    ids: str  # HASH line index -> custom_id (for lines that end without a result)
    pending: str  # LIST line indexes not yet claimed
    leases: str  # ZSET line index -> lease expiry ms (lines running somewhere)
    results: str  # HASH line index -> "o<output line>" or "e<error line>", written once (HSETNX)
    finalizer: str  # STRING the replica writing the output files (SET NX PX): a lock, never the truth
    charged: str  # SET line indexes whose tokens were charged to the key (each line once: ACCOUNT_ONCE)

    def all(self) -> list[str]:
        return [self.meta, self.input, self.ids, self.pending, self.leases, self.results]


class KeySpace:
    def __init__(self, prefix: str = "genmesh:gw") -> None:
        self.prefix = prefix

    def model(self, model: str, upstreams: list[str]) -> ModelKeys:
        base = f"{self.prefix}:{{{_tag(model)}}}"
        return ModelKeys(
            queue=f"{base}:queue",
            waiters=f"{base}:waiters",
            alive=f"{base}:alive",
            rounds=f"{base}:rounds",
            members=f"{base}:members",
            slots=tuple(f"{base}:slots:{_tag(u)}" for u in upstreams),
            channel=f"{base}:grants",
            prefix_base=f"{base}:prefix",
            batch=f"{base}:batch",
        )

    def key_id(self, key_id: str) -> KeyIdKeys:
        base = f"{self.prefix}:{{k:{_tag(key_id)}}}"
        return KeyIdKeys(rate=f"{base}:rate", concurrent=f"{base}:concurrent", usage=f"{base}:usage")

    def api_key(self, digest: str) -> str:
        """HASH of one API key's record, found by the SHA-256 of the secret."""
        return f"{self.prefix}:apikey:{digest}"

    def api_key_revocations(self) -> str:
        """Pub/sub channel (not a key) on which revoked key digests are announced to every replica."""
        return f"{self.prefix}:apikeys:revoked"

    def response(self, response_id: str) -> str:
        """HASH of one stored response (``owner``, ``record``), with the stored-responses TTL."""
        return f"{self.prefix}:resp:{response_id}"

    def console_replicas(self) -> str:
        """HASH gateway id -> JSON of that replica's recent activity (console), TTL a few intervals."""
        return f"{self.prefix}:{{console}}:replicas"

    def console_viewed(self) -> str:
        """STRING set while a console is open on any replica (TTL ``console_viewed_ttl_s``, renewed each interval
        by the replica serving it): the other replicas publish their activity only while it exists."""
        return f"{self.prefix}:{{console}}:viewed"

    def console_login(self, address: str, user: str) -> tuple[str, str]:
        """STRINGs counting console login attempts of one client address and of one user name in the
        current window (``lua/login_attempt.lua``; TTL ``console_login_window_s``; one hash slot)."""
        base = f"{self.prefix}:{{console}}:login"
        return f"{base}:a:{_tag(address)}", f"{base}:u:{_tag(user)}"

    def console_history(self) -> list[str]:
        """One ZSET per chart series (CONSOLE_HISTORY_SERIES): score = sample time ms, member "ms:value";
        trimmed to and expiring after ``console_history_s``. All tagged ``{console}`` for one Lua script."""
        return [f"{self.prefix}:{{console}}:history:{name}" for name in CONSOLE_HISTORY_SERIES]

    # -- the Files and Batch API: everything of one owner (API key id) in the owner's hash slot ----

    def file(self, owner: str, file_id: str) -> tuple[str, str]:
        """HASH of one file's ``object`` (JSON), ``bytes`` and ``chunks``, and LIST of its bytes in chunks of at
        most ``files_chunk_bytes`` (TTL ``files_ttl_s``)."""
        base = f"{self.prefix}:{{k:{_tag(owner)}}}:file:{file_id}"
        return f"{base}:meta", f"{base}:data"

    def file_quota(self, owner: str) -> tuple[str, str]:
        """One owner's file ledger (``lua/reserve.lua``): ZSET file id -> expiry ms and HASH file id -> bytes
        (``#``: their sum), for the per-key file quotas (TTL ``files_ttl_s``, renewed)."""
        base = f"{self.prefix}:{{k:{_tag(owner)}}}:quota:files"
        return f"{base}:expiry", f"{base}:bytes"

    def response_quota(self, owner: str) -> tuple[str, str]:
        """One owner's stored-responses ledger (``lua/reserve.lua``): ZSET response id -> expiry ms and HASH
        response id -> bytes, for ``responses_key_max_count`` (TTL ``responses_ttl_s``, renewed)."""
        base = f"{self.prefix}:{{k:{_tag(owner)}}}:quota:responses"
        return f"{base}:expiry", f"{base}:bytes"

    def storage_quota(self) -> tuple[str, str]:
        """The ledger of every stored file (uploads and batch outputs), all keys: ZSET ``<owner>|<file id>``
        -> expiry ms and HASH of their bytes (``#``: the sum), for ``files_total_max_bytes`` (TTL ``files_ttl_s``)."""
        base = f"{self.prefix}:{{storage}}:files"
        return f"{base}:expiry", f"{base}:bytes"

    def files(self, owner: str) -> str:
        """ZSET file id -> created ms: one owner's files, for listing (TTL ``files_ttl_s``, renewed)."""
        return f"{self.prefix}:{{k:{_tag(owner)}}}:files"

    def batch(self, owner: str, batch_id: str) -> BatchKeys:
        base = f"{self.prefix}:{{k:{_tag(owner)}}}:batch:{batch_id}"
        return BatchKeys(
            meta=f"{base}:meta",
            input=f"{base}:input",
            ids=f"{base}:ids",
            pending=f"{base}:pending",
            leases=f"{base}:leases",
            results=f"{base}:results",
            finalizer=f"{base}:finalizer",
            charged=f"{base}:charged",
        )

    def batches(self, owner: str) -> str:
        """ZSET batch id -> created ms: one owner's batches, for listing (TTL as the batches')."""
        return f"{self.prefix}:{{k:{_tag(owner)}}}:batches"

    def active_batches_of(self, owner: str) -> str:
        """ZSET batch id -> the latest its batch can end, ms: one owner's batches in progress, for
        ``batch_max_active_per_key`` (entries drop when the batch ends, or past that time)."""
        return f"{self.prefix}:{{k:{_tag(owner)}}}:batches:active"

    def queued_lines_of(self, owner: str) -> str:
        """HASH ``<batch id>|<model>`` -> lines: one owner's enqueued batch lines per model, for
        ``batch_queue_max_lines`` (a field whose batch left ``active_batches_of`` is stale and dropped)."""
        return f"{self.prefix}:{{k:{_tag(owner)}}}:batches:queued"

    def active_batches(self) -> str:
        """ZSET ``<owner>|<batch id>`` -> created ms: batches some runner still has work on (TTL as the batches')."""
        return f"{self.prefix}:batches:active"

    def served_models(self) -> str:
        """ZSET model -> expiry ms: the models some live replica routes, each renewed by every replica
        that routes it at each runner pass (TTL a minute); a batch runner lends a batch only where
        its models are routed (``runner/fair_scheduler.py``)."""
        return f"{self.prefix}:models:served"

    def api_key_index(self) -> str:
        """HASH key id -> digest, for listing and revoking."""
        return f"{self.prefix}:apikeys"
