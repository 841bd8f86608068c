"""Device loss on the real device, by ``device.destroy()``, each in its own subprocess.

A wrong move after a loss (submitting on the lost device, or work that uses a destroyed
buffer) aborts the process with exit code 134, so each scenario runs in a fresh interpreter
and the test checks that it exited normally and reported what it saw as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

PRELUDE = textwrap.dedent("""
    import json, time
    import numpy as np, wgpu
    from engine_plugin.gpu import *
    from engine_plugin.world import World
    U = wgpu.BufferUsage

    def setup(config=None):
        ctx = get_context()
        be = WgpuBackend(ctx, config or WgpuBackendConfig())
        w = World((8, 8), {"h": np.float32}, max_chunks=4)
        w.add(1, {"h": 2.0})
        assert be.register_field(field_mirror_desc(w, "h"))
        out = ctx.device.create_buffer(size=64, usage=U.STORAGE | U.COPY_SRC)
        module = ctx.device.create_shader_module(code="@compute @workgroup_size(1) fn main() {}")
        pipeline = ctx.device.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": "main"})
        results = []
        h = be.register_product("p", WgpuProductDesc(pipeline, readback_source=out,
                                callback=lambda r: results.append([r.status.value, r.message])))
        return ctx, be, w, h, results

    def gpu_reset(device):
        # Loss the application did not ask for (a GPU reset): the class's destroy, not the
        # instance's guarded one, so that the detection paths after the fact are exercised.
        type(device).destroy(device)

    def poll_until(be, done, timeout=10.0):
        end = time.perf_counter() + timeout
        while not done() and time.perf_counter() < end:
            be.poll()
            time.sleep(0.001)
""")


def run_scenario(body: str) -> dict:
    env = dict(os.environ)
    env.setdefault("XDG_RUNTIME_DIR", "/tmp/xdg")
    proc = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, f"scenario exited {proc.returncode} (134 = wgpu abort):\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_destroyed_device_fails_the_pending_readback_and_every_later_submission_is_refused():
    seen = run_scenario("""
        ctx, be, w, h, results = setup(WgpuBackendConfig(stall_probe_s=0.05))
        assert be.readback(ReadbackDesc(h, ReadbackPolicy.SUMMARY))
        ctx.device.destroy()
        time.sleep(0.1)  # the request is PENDING until a poll decides it
        poll_until(be, lambda: results)
        print(json.dumps({
            "results": results, "lost": be.lost, "staging": be.live_staging_buffers,
            "context_marked_lost": ctx.lost, "fresh_context": get_context() is not ctx,
            "inflight": be.inflight_readbacks,
            "upload": be.upload(upload_desc(w, "h", 1)),
            "dispatch": be.dispatch(DispatchDesc(h, "h", 1)),
            "readback": be.readback(ReadbackDesc(h, ReadbackPolicy.SUMMARY)),
            "usable": be.capabilities().usable,
        }))
        be.close()
    """)
    assert seen["results"] == [["failed", seen["results"][0][1]]] and "lost" in seen["results"][0][1]
    assert seen["lost"] and seen["staging"] == 0 and seen["inflight"] == 0
    assert seen["context_marked_lost"] and seen["fresh_context"]  # get_context() makes a new device
    assert not (seen["upload"] or seen["dispatch"] or seen["readback"] or seen["usable"])


def test_loss_is_detected_from_the_error_a_call_raises():
    seen = run_scenario("""
        ctx, be, w, h, results = setup()
        gpu_reset(ctx.device)
        accepted = be.upload(upload_desc(w, "h", 1))
        print(json.dumps({"accepted": accepted, "lost": be.lost, "fault": be.fault,
                          "dispatch": be.dispatch(DispatchDesc(h, "h", 1))}))
        be.close()
    """)
    assert not seen["accepted"] and seen["lost"] and "Parent device is lost" in seen["fault"]
    assert not seen["dispatch"]


def test_a_loss_logged_by_wgpu_disables_only_the_backend_of_the_lost_device():
    seen = run_scenario("""
        ctx, be, w, h, results = setup()
        other_dev = ctx.adapter.request_device_sync()
        other = WgpuBackend(other_dev)
        gpu_reset(ctx.device)
        try:  # someone else's call on the lost device makes wgpu log "DEVICE LOST!"
            ctx.device.create_command_encoder().finish()
        except wgpu.GPUValidationError:
            pass
        be.poll()
        other.poll()
        print(json.dumps({"lost": be.lost, "fault": be.fault, "other_healthy": other.healthy,
                          "other_usable": other.capabilities().usable}))
        be.close(); other.close()
    """)
    assert seen["lost"] and "logger" in seen["fault"]
    assert seen["other_healthy"] and seen["other_usable"]


def test_get_context_never_hands_out_a_lost_device():
    seen = run_scenario("""
        from engine_plugin.errors import DeviceLostError
        first = get_context()
        first.device.destroy()  # from the application: the guard knows at once
        second = get_context()
        gpu_reset(second.device)  # behind the guard's back: known from the wgpu logger + a probe
        try:
            second.device.create_command_encoder().finish()
        except wgpu.GPUValidationError:
            pass
        time.sleep(0.05)
        third = get_context()
        try:  # an empty submit on a lost device aborts the process; the guard refuses it
            with first.guard.submitting("test"):
                first.queue.submit([])
            refused = False
        except DeviceLostError as exc:
            refused = "lost" in str(exc)
        print(json.dumps({"second_fresh": second is not first and not second.device is first.device,
                          "third_fresh": third is not second and not third.lost, "first_lost": first.lost,
                          "refused": refused}))
    """)
    assert seen == {"second_fresh": True, "third_fresh": True, "first_lost": True, "refused": True}
