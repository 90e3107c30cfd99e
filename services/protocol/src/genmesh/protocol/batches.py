"""The Files and Batch API objects: ``/v1/files`` and ``/v1/batches`` as OpenAI defines them.

A batch's input is a JSONL file, one ``BatchRequestLine`` per line; its output and error files
hold one ``BatchOutputLine`` per line (``response`` for a request that was answered, ``error``
for one that never was, such as a line left when the batch expired).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from .common import StrictRequest

FilePurpose = Literal["batch", "batch_output"]
BatchStatus = Literal[
    "validating", "failed", "in_progress", "finalizing", "completed", "expired", "cancelling", "cancelled"
]
TERMINAL_BATCH_STATUSES = frozenset({"failed", "completed", "expired", "cancelled"})
BATCH_ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/embeddings")


class FileObject(BaseModel):
    id: str
    object: Literal["file"] = "file"
    bytes: int
    created_at: int
    expires_at: int | None = None
    filename: str
    purpose: FilePurpose
    status: Literal["uploaded", "processed", "error"] = "processed"
    status_details: str | None = None


class FileList(BaseModel):
    object: Literal["list"] = "list"
    data: list[FileObject]
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool = False


class FileDeleted(BaseModel):
    id: str
    object: Literal["file"] = "file"
    deleted: bool = True


class BatchCreateRequest(StrictRequest):
    input_file_id: str = Field(max_length=200)
    endpoint: str = Field(max_length=200)
    completion_window: str = Field(max_length=20)
    metadata: dict[str, str] | None = None
    output_expires_after: dict[str, Any] | None = None


class BatchRequestCounts(BaseModel):
    total: int = 0
    completed: int = 0
    failed: int = 0


class BatchError(BaseModel):
    code: str
    message: str
    param: str | None = None
    line: int | None = None


class BatchErrors(BaseModel):
    object: Literal["list"] = "list"
    data: list[BatchError] = Field(default_factory=list)


class Batch(BaseModel):
    id: str
    object: Literal["batch"] = "batch"
    endpoint: str
    errors: BatchErrors | None = None
    input_file_id: str
    completion_window: str
    status: BatchStatus
    output_file_id: str | None = None
    error_file_id: str | None = None
    created_at: int
    in_progress_at: int | None = None
    expires_at: int | None = None
    finalizing_at: int | None = None
    completed_at: int | None = None
    failed_at: int | None = None
    expired_at: int | None = None
    cancelling_at: int | None = None
    cancelled_at: int | None = None
    request_counts: BatchRequestCounts = Field(default_factory=BatchRequestCounts)
    metadata: dict[str, str] | None = None


class BatchList(BaseModel):
    object: Literal["list"] = "list"
    data: list[Batch]
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool = False


class BatchRequestLine(BaseModel):
    """One line of a batch's input file (checked by hand while streaming: see the gateway's
    ``batch.validation``; this model is its documentation and the SDK-side shape)."""

    custom_id: str
    method: Literal["POST"]
    url: str
    body: dict[str, Any]


class BatchResponse(BaseModel):
    status_code: int
    request_id: str
    body: dict[str, Any]


class BatchLineError(BaseModel):
    code: str
    message: str


class BatchOutputLine(BaseModel):
    id: str
    custom_id: str
    response: BatchResponse | None = None
    error: BatchLineError | None = None
