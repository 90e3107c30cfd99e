"""The embeddings batcher's queue (issue 54): a request with more inputs than the queue can ever hold is
the client's error, a 400 naming the field, while one that fits runs (a merely busy queue is a 503)."""

from __future__ import annotations

import numpy as np
import pytest

from genmesh.engine.embeddings.batcher import Batcher
from genmesh.protocol import OpenAIError


async def test_more_inputs_than_the_queue_holds_is_a_400_and_as_many_run() -> None:
    batcher: Batcher[list[int]] = Batcher(
        lambda batch: np.arange(len(batch), dtype=np.float32)[:, None], 2, 1000, 0.0, max_queued=4
    )
    with pytest.raises(OpenAIError) as err:
        batcher.check_fits(5, "documents")
    assert (err.value.status, err.value.param) == (400, "documents")
    assert "(4," in err.value.message
    batcher.check_fits(4, "documents")
    batcher.start()
    try:
        out = await batcher.embed([[1], [2], [3], [4]])
    finally:
        await batcher.close()
    assert out.shape == (4, 1)
