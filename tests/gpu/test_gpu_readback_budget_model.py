"""Random request/complete sequences against a model of the readback budgets (fake device)."""

from __future__ import annotations

import time

import wgpu
from fake_wgpu_device import FakeDevice, FakePipeline
from hypothesis import given, settings
from hypothesis import strategies as st

from engine_plugin.gpu import ReadbackDesc, ReadbackPolicy, WgpuBackend, WgpuBackendConfig, WgpuProductDesc

OPS = st.lists(st.one_of(st.tuples(st.just("request"), st.integers(1, 8).map(lambda n: 4 * n)),
                         st.tuples(st.just("complete"), st.just(0))), max_size=25)


@given(ops=OPS, max_count=st.integers(1, 4), max_bytes=st.integers(1, 12).map(lambda n: 4 * n))
@settings(max_examples=40, deadline=None)
def test_in_flight_readbacks_never_exceed_their_budgets_and_every_accepted_one_is_delivered_once(
        ops, max_count, max_bytes):
    fake = FakeDevice()
    be = WgpuBackend(fake, WgpuBackendConfig(max_inflight_readbacks=max_count, max_inflight_readback_bytes=max_bytes,
                                             warm_up=False, close_wait_s=0.01))
    src = fake.create_buffer(size=64, usage=wgpu.BufferUsage.COPY_SRC)
    delivered: list[int] = []
    h = be.register_product("p", WgpuProductDesc(FakePipeline(), readback_source=src,
                                                 callback=lambda r: delivered.append(r.request_id)))
    count = nbytes = accepted = 0
    try:
        for op, size in ops:
            if op == "request":
                fits = count + 1 <= max_count and nbytes + size <= max_bytes
                assert be.readback(ReadbackDesc(h, ReadbackPolicy.SUMMARY, size=size)) == fits
                if fits:
                    count, nbytes, accepted = count + 1, nbytes + size, accepted + 1
            else:
                fake.complete_work()
                deadline = time.perf_counter() + 5
                while be.inflight_readbacks and time.perf_counter() < deadline:
                    be.poll()
                    time.sleep(0.0002)
                count = nbytes = 0
            assert (be.inflight_readbacks, be.inflight_readback_bytes) == (count, nbytes)
            assert fake.live_staging() == count
    finally:
        be.close()
        fake.complete_work()  # copies still "running" at close finish; their buffers are freed
    assert len(delivered) == accepted == len(set(delivered)) and fake.live_staging() == 0
