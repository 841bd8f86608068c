"""The remote tier against a server that lies: sizes that do not match the values, values past
every limit, replies of the wrong shape. The game keeps running on its local cache, reads no
more than it may, and says so once."""

from __future__ import annotations

import pytest
from fakeresp import FakeResp, bulk

from engine_plugin.cache import remote as remote_module
from engine_plugin.cache.remote import NAMESPACE, RemoteCache

KEY = "ab" * 32
LIMIT = 64 * 1024  # MAX_VALUE_BYTES for these tests: a value past it is cheap to send


@pytest.fixture
def small_limit(monkeypatch):
    monkeypatch.setattr(remote_module, "MAX_VALUE_BYTES", LIMIT)


def test_a_server_that_lies_about_a_values_size_never_hands_over_a_value_past_the_limit(small_limit):
    # STRLEN answered 100, then the value came 60-300 MiB long and was handed to verification
    # whole (review helper 232).
    huge = bulk(b"x" * (16 * LIMIT))
    fake = FakeResp({b"STRLEN": b":100\r\n", b"MGET": b"*1\r\n" + huge, b"GETRANGE": huge, b"GET": huge})
    try:
        remote = RemoteCache(fake.url)
        got = remote.get_values([KEY])
    finally:
        fake.close()
    assert got == {}
    st = remote.stats()
    assert st.rejected == 1 and st.misses == 1 and st.bytes_read == 0


def test_a_value_grown_between_its_size_and_its_read_is_read_no_further_than_the_limit(redis_server, small_limit):
    # STRLEN and the read are two commands: another writer that SETs a huge value between them
    # had it read whole (a real server, review helper 232). The read itself is bounded now.
    client = redis_server.client()
    client.set(NAMESPACE + KEY, b"y" * 8192)
    remote = RemoteCache(redis_server.url, timeout=1.0)
    real_pipeline = remote._client.pipeline

    def racing_pipeline(*args, **kwargs):
        pipe = real_pipeline(*args, **kwargs)
        real_execute = pipe.execute

        def execute(*a, **kw):
            answers = real_execute(*a, **kw)
            client.set(NAMESPACE + KEY, b"z" * (64 * LIMIT))  # the other writer, just after
            return answers

        pipe.execute = execute
        return pipe

    remote._client.pipeline = racing_pipeline
    sent = int(client.info("stats")["total_net_output_bytes"])
    got = remote.get_values([KEY])
    sent = int(client.info("stats")["total_net_output_bytes"]) - sent
    assert got == {}
    assert remote.stats().rejected == 1
    assert sent < 4 * LIMIT, f"the server sent {sent} bytes for one value (limit {LIMIT})"
