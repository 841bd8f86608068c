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


# The handshake answered with a status, not a map (an AttributeError inside the client); a
# size or a value answered with another type than Redis sends.
WRONG_SHAPES = {
    "hello-status": {b"HELLO": b"+OK\r\n"},
    "strlen-status": {b"STRLEN": b"+OK\r\n"},
    "strlen-array": {b"STRLEN": b"*1\r\n:5\r\n"},
    "getrange-integer": {b"STRLEN": b":5\r\n", b"GETRANGE": b":5\r\n"},
    "getrange-array": {b"STRLEN": b":5\r\n", b"GETRANGE": b"*1\r\n" + bulk(b"hello")},
}


@pytest.mark.parametrize("replies", list(WRONG_SHAPES.values()), ids=list(WRONG_SHAPES))
def test_a_reply_of_the_wrong_shape_is_a_counted_error_that_opens_the_breaker_after_one_line(replies, caplog):
    # A raw AttributeError (HELLO answered +OK) or TypeError (MGET answered an integer) escaped
    # get_values and crashed the game's start (review helper 232).
    fake = FakeResp(replies)
    try:
        remote = RemoteCache(fake.url)
        caplog.set_level("WARNING", logger="engine_plugin.cache")
        assert remote.get_values([KEY]) == {}
        assert remote.get_values([KEY + "1"]) == {}  # the breaker answers: nothing asked
        lines = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert RemoteCache(fake.url).ping() is (b"HELLO" not in replies)  # no exception either
    finally:
        fake.close()
    st = remote.stats()
    assert st.errors == 1 and st.misses == 2 and st.skipped == 1 and not remote.available
    assert len(lines) == 1 and "local cache only" in lines[0], lines


def test_a_game_start_against_a_server_with_a_broken_handshake_runs_on_its_local_cache(tmp_path, caplog):
    from test_remote_tier import library

    fake = FakeResp({b"HELLO": b"+OK\r\n"})
    try:
        lib, wanted = library(tmp_path, fake.url)
        caplog.set_level("WARNING", logger="engine_plugin.cache")
        rep = lib.prefetch(wanted)
        lib.close()
    finally:
        fake.close()
    # Commands already in flight on other threads fail too; the breaker stops the rest.
    assert rep.remote == 0 and rep.missed == 26 and lib.remote.stats().errors >= 1 and not lib.remote.available
    lines = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(lines) == 1 and "a reply Redis does not send" in lines[0], lines


def _scan_one(name: bytes) -> bytes:
    return b"*2\r\n" + bulk(b"0") + b"*1\r\n" + bulk(name)


@pytest.mark.parametrize("reply", [b":5\r\n", b"*1\r\n" + bulk(b"hello")], ids=["integer", "array"])
def test_gc_reads_values_as_get_values_does_and_a_reply_of_the_wrong_shape_is_a_remote_error(reply):
    # cache gc --remote asked STRLEN then MGET: an MGET answered with an integer raised a raw
    # TypeError out of `cache gc` (review helper 232). It reads with get_values's own read.
    from engine_plugin.cache.remote import RemoteCacheError

    fake = FakeResp({b"SCAN": _scan_one((NAMESPACE + KEY).encode()), b"STRLEN": b":5\r\n", b"MGET": reply, b"GETRANGE": reply, b"GET": reply})
    try:
        with pytest.raises(RemoteCacheError, match="does not answer"):
            RemoteCache(fake.url).gc()
    finally:
        fake.close()
    assert b"MGET" not in fake.seen and b"GETRANGE" in fake.seen


def test_gc_never_reads_a_value_past_the_limit_from_a_server_that_lies_about_its_size(small_limit):
    # STRLEN then MGET: the size said was checked, the value sent was read whole (review helper 232).
    huge = bulk(b"x" * (16 * LIMIT))
    fake = FakeResp({b"SCAN": _scan_one((NAMESPACE + KEY).encode()), b"STRLEN": b":100\r\n", b"MGET": b"*1\r\n" + huge, b"GETRANGE": huge, b"GET": huge, b"DEL": b":1\r\n"})
    try:
        got = RemoteCache(fake.url).gc()
    finally:
        fake.close()
    assert got == {"removed": 1, "kept": 0}
    assert b"MGET" not in fake.seen and b"GETRANGE" in fake.seen and b"DEL" in fake.seen


def test_a_slow_name_lookup_costs_the_deadline_then_opens_the_breaker(monkeypatch, caplog):
    # The watchdog cannot cut a thread blocked in getaddrinfo: a dead nameserver made a
    # lookup block for the resolver's whole time, past the 1 s deadline (review helper 232).
    import socket
    import time

    real = socket.getaddrinfo

    def slow(host, *args, **kwargs):
        if host == "cache.studio.invalid":
            time.sleep(3.0)
            raise socket.gaierror(-3, "Temporary failure in name resolution")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", slow)
    remote = RemoteCache("redis://cache.studio.invalid:6379/0", timeout=0.25)
    caplog.set_level("WARNING", logger="engine_plugin.cache")
    t0 = time.monotonic()
    assert remote.get_values([KEY]) == {}
    took = time.monotonic() - t0
    assert took < remote.deadline + 0.5, f"took {took:.2f} s (deadline {remote.deadline:g} s)"
    assert remote.stats().timeouts == 1 and not remote.available
    t0 = time.monotonic()
    assert remote.get_values([KEY]) == {} and remote.ping() is False
    assert time.monotonic() - t0 < remote.deadline + 0.5
    lines = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(lines) == 1 and "timed out" in lines[0], lines
