"""Inputs the GPU cannot represent are refused with a PluginError before anything is
submitted, the repeat path never mistakes equal-looking params for the same ones, and a lost
device is a DeviceLostError (issue: hostile input and faults, runtime side)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import Any

import numpy as np
import pytest

from engine_plugin import abi
from engine_plugin.errors import DispatchError
from engine_plugin.lowering.geometry import Domain, wrapping_axis

pytestmark = pytest.mark.gpu

K_YAML = """\
bindings:
  - { name: dst, kind: buffer, access: read_write, element: u32, count: "n" }
params:
  - { name: k, type: f32 }
"""
K_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    dst_set(i, bitcast<u32>(params.k));
}
"""
COPY_YAML = """\
bindings:
  - { name: src, kind: buffer, access: read, element: ELEM, bits: BITS }
  - { name: dst, kind: buffer, access: read_write, element: u32, count: "len(src)" }
"""
COPY_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    dst_set(i, bitcast<u32>(src_get(i)));
}
"""


def variant(key, yaml, wgsl):
    return abi.program(key=key, schema=abi.parse(yaml), wgsl=wgsl).variant()


def test_a_dispatch_size_past_u32_is_refused_before_anything_runs():
    v = variant("t19/k", K_YAML, K_WGSL)
    for n in (2**32, 2**40):
        with pytest.raises(DispatchError, match="does not fit the u32"):
            v.run(n=n, params={"k": 1.0})


W100_YAML = """\
bindings:
  - { name: hits, kind: buffer, access: read_write, element: u32, count: "4" }
workgroup: 100
"""
W100_WGSL = """\
@compute @workgroup_size(100)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n() || i >= 4u) { return; }
    hits_set(i, hits_get(i) + 1u);
}
"""


def test_a_domain_whose_last_workgroup_passes_u32_is_refused_instead_of_wrapping_to_element_0():
    # Review helper 96: with workgroups of 100, n = 2**32-1 rounds up past 2**32: the last
    # group's global_invocation_id wrapped to 0..3 and ran the body on elements 0..3 again.
    v = variant("t96/w100", W100_YAML, W100_WGSL)
    for n in (2**32 - 1, (2**32 - 1, 1)):
        with pytest.raises(DispatchError, match="would wrap to 0"):
            v.run(n=n)
    assert abi.read(v.run(n=5).outputs["hits"]).tolist() == [1, 1, 1, 1]  # the variant still runs
    # The bound itself: the largest extent whose groups end at 2**32 passes, one more does not.
    assert wrapping_axis(Domain((2**32 // 100 * 100, 1, 1)), (100, 1, 1)) is None
    assert wrapping_axis(Domain((2**32 // 100 * 100 + 1, 1, 1)), (100, 1, 1)) == 0
    assert wrapping_axis(Domain((2**32 - 1, 1, 1)), (64, 1, 1)) is None  # 2**32 is whole groups of 64
    assert wrapping_axis(Domain((1, 1, 2**32 - 1)), (1, 1, 7)) == 2  # 2**32-1 = 3 (mod 7)


def test_negative_zero_after_zero_is_its_own_params():
    v = variant("t19/k", K_YAML, K_WGSL)
    first = abi.read(v.run(n=2, params={"k": 0.0}).outputs["dst"])
    second = abi.read(v.run(n=2, params={"k": -0.0}).outputs["dst"])
    assert first.tolist() == [0, 0] and second.tolist() == [0x80000000] * 2


def test_a_bool_after_an_equal_int_is_still_checked():
    yaml = K_YAML.replace("type: f32", "type: u32")
    v = variant("t19/ku", yaml, K_WGSL.replace("bitcast<u32>(params.k)", "params.k"))
    v.run(n=2, params={"k": 1})
    with pytest.raises(DispatchError):
        v.run(n=2, params={"k": True})


def test_big_endian_words_with_bits_go_up_as_their_values():
    v = variant("t19/bits", COPY_YAML.replace("ELEM", "u32").replace("BITS", "true"), COPY_WGSL.replace("bitcast<u32>(src_get(i))", "src_get(i)"))
    got = abi.read(v.run(n=3, inputs={"src": np.array([1, 2, 0xDEADBEEF], dtype=">u4")}).outputs["dst"])
    assert got.tolist() == [1, 2, 0xDEADBEEF]
    f = variant("t19/bitsf", COPY_YAML.replace("ELEM", "u32").replace("BITS", "true"), COPY_WGSL.replace("bitcast<u32>(src_get(i))", "src_get(i)"))
    got = abi.read(f.run(n=1, inputs={"src": np.array([1.5], dtype=">f4")}).outputs["dst"])
    assert got.tolist() == [int(np.array([1.5], "<f4").view("<u4")[0])]


@pytest.mark.parametrize(
    "elem,values,match",
    [
        ("i32", np.array([3_000_000_000], np.int64), "outside int32's range"),
        ("u32", np.array([-1], np.int64), "outside uint32's range"),
        ("i32", np.array([np.nan], np.float64), "NaN or infinity"),
        ("f32", np.array([1e300], np.float64), "beyond f32's range"),
    ],
)
def test_a_cast_by_value_that_would_change_a_value_is_refused(elem, values, match):
    v = variant(f"t19/cast/{elem}", COPY_YAML.replace("ELEM", elem).replace("BITS", "false"), COPY_WGSL)
    with pytest.raises(DispatchError, match=match):
        v.run(n=1, inputs={"src": values})
    v.run(n=1, inputs={"src": np.array([5], np.int64)})  # in range: cast by value as before


def _run_script(tmp_path, text: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``text`` as a script in a fresh interpreter (a device loss there leaves this one's
    device alone); it must exit 0."""
    script = tmp_path / "script.py"
    script.write_text(text)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=timeout, env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


LOSS_SCRIPT = textwrap.dedent("""
    import numpy as np, wgpu
    from engine_plugin import abi
    from engine_plugin.errors import DeviceLostError
    from engine_plugin.device.context import get_context
    YAML = "bindings:\\n  - { name: dst, kind: buffer, access: read_write, element: f32, count: 'n' }\\n"
    WGSL = "@compute @workgroup_size(64)\\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\\n    let i = zero_index(gid);\\n    if (i >= zero_n()) { return; }\\n    dst_set(i, 7.0);\\n}\\n"
    program = abi.program(key="loss", schema=abi.parse(YAML), wgsl=WGSL)
    v = program.variant()
    out = v.run(n=4).outputs["dst"]
    assert abi.read(out).tolist() == [7.0] * 4
    dead = get_context()
    dead.device.destroy()
    for call in (lambda: v.run(n=4), lambda: abi.read(out)):
        try:
            call()
        except DeviceLostError as exc:
            print("DeviceLostError", exc)
        else:
            raise SystemExit("no error")
    fresh = get_context()
    assert fresh is not dead and not fresh.lost
    again = program.variant()  # compiled on the new device
    assert abi.read(again.run(n=3).outputs["dst"]).tolist() == [7.0] * 3
    print("recovered")
""")


def test_a_lost_device_raises_device_lost_error_and_the_next_call_gets_a_new_device(tmp_path):
    proc = _run_script(tmp_path, LOSS_SCRIPT, timeout=120)
    assert proc.stdout.count("DeviceLostError") == 2 and "recovered" in proc.stdout
    assert "GPUValidationError" not in proc.stdout + proc.stderr.split("Traceback")[0]


OLD_OUTPUT_SCRIPT = textwrap.dedent("""
    import numpy as np
    from engine_plugin import abi
    from engine_plugin.errors import DispatchError
    YAML = "bindings:\\n  - { name: src, kind: buffer, access: read, element: f32 }\\n  - { name: dst, kind: buffer, access: read_write, element: f32, count: 'n' }\\n"
    WGSL = "@compute @workgroup_size(64)\\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\\n    let i = zero_index(gid);\\n    if (i >= zero_n()) { return; }\\n    dst_set(i, src_get(i) + 1.0);\\n}\\n"
    program = abi.program(key="old", schema=abi.parse(YAML), wgsl=WGSL)
    v = program.variant()
    old = v.run(n=8, inputs={"src": np.arange(8, dtype=np.float32)}).outputs["dst"]
    abi.read(old)
    v.ctx.device.destroy()
    again = program.variant()  # the documented recovery: compiled on a new device
    for given in (old, old.buffer):
        try:
            again.run(n=8, inputs={"src": given})
        except DispatchError as exc:
            print("DispatchError", str(exc).splitlines()[0])
        try:  # the same through outputs=
            again.run(n=8, inputs={"src": np.arange(8, dtype=np.float32)}, outputs={"dst": given})
        except DispatchError as exc:
            print("DispatchError", str(exc).splitlines()[0])
    for _ in range(3):  # nothing of the refused runs poisons the new device's pool
        out = again.run(n=8, inputs={"src": np.arange(8, dtype=np.float32)}).outputs["dst"]
        assert abi.read(out).tolist() == [float(k + 1) for k in range(8)]
    print("recovered")
""")


def test_an_output_of_a_lost_device_handed_to_the_recovered_variant_is_a_dispatch_error(tmp_path):
    # Review helper 30: a raw wgpu GPUValidationError (not a PluginError) from create_bind_group.
    proc = _run_script(tmp_path, OLD_OUTPUT_SCRIPT, timeout=120)
    assert proc.stdout.count("DispatchError") == 4 and "another device" in proc.stdout and "recovered" in proc.stdout


RESET_DURING_READ_SCRIPT = '''# A GPU reset (device lost without the application's guarded destroy) while abi.read submits:
# map_async raises wgpu-py's AttributeError, which escapes abi.read as is.
import threading, time, faulthandler
import numpy as np
from engine_plugin import abi
from engine_plugin.errors import DeviceLostError, PluginError
Y = """
bindings:
  - { name: src, kind: buffer, access: read, element: f32 }
  - { name: dst, kind: buffer, access: read_write, element: f32, count: "n" }
params:
  - { name: iters, type: u32 }
"""
W = """
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    var s = src_get(i);
    for (var k = 0u; k < params.iters; k++) { s = fract(sin(s * 12.9898 + f32(k)) * 43758.5453); }
    dst_set(i, s);
}
"""
faulthandler.dump_traceback_later(60, exit=True)
v = abi.program(key="slow", schema=abi.parse(Y), wgsl=W).variant()
x = np.ones(262144, np.float32)
abi.read(v.run(n=262144, inputs={"src": x}, params={"iters": 1}).outputs["dst"])  # warm
out = v.run(n=262144, inputs={"src": x}, params={"iters": 2000}).outputs["dst"]   # ~1 s of GPU work
dev = v.ctx.device
threading.Timer(0.3, lambda: type(dev).destroy(dev)).start()  # a GPU reset, on another thread
try:
    abi.read(out)
    print("read returned")
except DeviceLostError:
    print("DeviceLostError (expected)")
except Exception as e:
    print("LEAKED", type(e).__name__, e, "| PluginError:", isinstance(e, PluginError), "| ctx.lost:", v.ctx.lost)
else:
    pass
if v.ctx.lost:
    again = abi.program(key="slow", schema=abi.parse(Y), wgsl=W).variant()
    print("recovered", abi.read(again.run(n=4, inputs={"src": np.ones(4, np.float32)}, params={"iters": 0}).outputs["dst"]).tolist())
'''


def test_a_gpu_reset_while_a_read_waits_is_a_device_lost_error_not_a_raw_attribute_error(tmp_path):
    # Review helper 30: wgpu-py's map_async fails on a reset device with AttributeError
    # ('NoneType' object has no attribute 'get_token'), which escaped abi.read as it was.
    proc = _run_script(tmp_path, RESET_DURING_READ_SCRIPT, timeout=180)
    assert "LEAKED" not in proc.stdout, proc.stdout
    assert "DeviceLostError (expected)" in proc.stdout or "read returned" in proc.stdout, proc.stdout


DESTROYED_SCRIPT = textwrap.dedent("""
    import numpy as np, wgpu
    from engine_plugin import abi
    from engine_plugin.errors import DispatchError
    from engine_plugin.device.context import get_context
    YAML = (
        "bindings:\\n"
        "  - { name: src, kind: buffer, access: read, element: f32 }\\n"
        "  - { name: dst, kind: buffer, access: read_write, element: f32, count: 'len(src)' }\\n"
    )
    WGSL = "@compute @workgroup_size(64)\\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\\n    let i = zero_index(gid);\\n    if (i >= zero_n()) { return; }\\n    dst_set(i, src_get(i) + 1.0);\\n}\\n"
    v = abi.program(key="destroyed", schema=abi.parse(YAML), wgsl=WGSL).variant()
    dev = get_context().device
    U = wgpu.BufferUsage
    def buffer():
        return dev.create_buffer_with_data(data=np.arange(4, dtype=np.float32), usage=U.STORAGE | U.COPY_SRC)
    def refused(what, call):
        try:
            call()
        except DispatchError as exc:
            assert "destroyed" in str(exc), exc
            print("refused", what)
        else:
            raise SystemExit(what + ": no error")
    # an input buffer destroyed after a run took it (the repeat path remembers it)
    src = buffer()
    for _ in range(3):
        assert abi.read(v.run(4, inputs={"src": src}).outputs["dst"]).tolist() == [1, 2, 3, 4]
    src.destroy()
    refused("input", lambda: v.run(4, inputs={"src": src}))
    def in_batch():
        with abi.batch():
            v.run(4, inputs={"src": src})
    refused("input in a batch", in_batch)
    # a given output buffer, and an Output whose buffer its holder destroyed
    out = dev.create_buffer(size=16, usage=U.STORAGE | U.COPY_SRC)
    good = buffer()
    v.run(4, inputs={"src": good}, outputs={"dst": out})
    out.destroy()
    refused("given output", lambda: v.run(4, inputs={"src": good}, outputs={"dst": out}))
    chained = v.run(4, inputs={"src": good}).outputs["dst"]
    chained.buffer.destroy()
    refused("chained Output", lambda: v.run(4, inputs={"src": chained}))
    refused("read of a destroyed buffer", lambda: abi.read(src))
    # a column bound to a plain buffer (its page), remembered by the page cache
    COLS = "bindings:\\n  - { name: PA, kind: page, access: read_write }\\n  - { name: m, kind: column, page: PA, element: f32 }\\n"
    BODY = "@compute @workgroup_size(64)\\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\\n    let i = zero_index(gid);\\n    if (i >= zero_n()) { return; }\\n    m_set(i, 1.0);\\n}\\n"
    c = abi.program(key="destroyed/cols", schema=abi.parse(COLS), wgsl=BODY).variant()
    page = dev.create_buffer(size=64, usage=U.STORAGE | U.COPY_SRC | U.COPY_DST)
    for _ in range(2):
        c.run(4, inputs={"m": page})
    page.destroy()
    refused("column page", lambda: c.run(4, inputs={"m": page}))
    # destroyed while an open batch holds it: destroyed once the batch is submitted (helper 76)
    held = buffer()
    with abi.batch():
        in_batch = v.run(4, inputs={"src": held})
        held.destroy()
    assert abi.read(in_batch.outputs["dst"]).tolist() == [1, 2, 3, 4]
    # held by nested batches: destroyed once the last of them is submitted (helper 78)
    nested = buffer()
    with abi.batch():
        outer_run = v.run(4, inputs={"src": nested})
        with abi.batch():
            inner_run = v.run(4, inputs={"src": nested})
            nested.destroy()
    assert abi.read(outer_run.outputs["dst"]).tolist() == abi.read(inner_run.outputs["dst"]).tolist() == [1, 2, 3, 4]
    # a texture read, a substrate page read (helper 76)
    from engine_plugin.errors import PluginError
    from engine_plugin.substrate import Substrate
    tex = dev.create_texture(size=(4, 4, 1), format="rgba8unorm", usage=wgpu.TextureUsage.COPY_SRC | wgpu.TextureUsage.TEXTURE_BINDING)
    tex.destroy()
    refused("texture read", lambda: abi.read(tex))
    arena = Substrate(dev, page_bytes=1 << 16)
    run = arena.alloc("f32", 8, name="pos")
    arena.placement(run).page.destroy()
    try:
        abi.read(run)
    except PluginError as exc:
        assert "destroyed" in str(exc), exc
        print("refused substrate read")
    try:
        arena.write(run, np.ones(8, np.float32))
    except PluginError as exc:
        assert "destroyed" in str(exc), exc
        print("refused substrate write")
    # the device is fine afterwards
    assert abi.read(v.run(4, inputs={"src": good}).outputs["dst"]).tolist() == [1, 2, 3, 4]
    print("alive")
""")


def test_a_destroyed_buffer_handed_to_a_run_is_a_dispatch_error_not_a_process_abort(tmp_path):
    # wgpu-native panics (the process aborts, exit 134) when a submission uses a destroyed buffer
    proc = _run_script(tmp_path, DESTROYED_SCRIPT, timeout=120)
    assert proc.stdout.count("refused") == 9 and "alive" in proc.stdout


def test_abi_device_is_the_device_runs_take_buffers_of_and_another_devices_buffer_names_it():
    import wgpu

    v = variant("t19/k_dev", COPY_YAML.replace("ELEM", "f32").replace("BITS", "false"), COPY_WGSL)
    U = wgpu.BufferUsage
    mine = abi.device().create_buffer_with_data(data=np.array([1.5], np.float32), usage=U.STORAGE | U.COPY_SRC)
    assert abi.read(v.run(n=1, inputs={"src": mine}).outputs["dst"]).tolist() == [int(np.array([1.5], "<f4").view("<u4")[0])]
    other = wgpu.utils.get_default_device()
    if other is abi.device():
        pytest.skip("wgpu's default device is the plugin's here")
    theirs = other.create_buffer_with_data(data=np.array([1.5], np.float32), usage=U.STORAGE | U.COPY_SRC)
    with pytest.raises(DispatchError, match=r"abi\.device\(\)"):
        v.run(n=1, inputs={"src": theirs})


DESTROY_IN_BATCH_SCRIPT = textwrap.dedent("""
    import numpy as np
    from engine_plugin import abi
    from engine_plugin.errors import DeviceLostError
    YAML = "bindings:\\n  - { name: dst, kind: buffer, access: read_write, element: f32, count: 'n' }\\n"
    WGSL = "@compute @workgroup_size(64)\\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\\n    let i = zero_index(gid);\\n    if (i >= zero_n()) { return; }\\n    dst_set(i, 7.0);\\n}\\n"
    v = abi.program(key="destroy_in_batch", schema=abi.parse(YAML), wgsl=WGSL).variant()
    try:
        with abi.batch():
            v.run(n=64)
            abi.device().destroy()
    except DeviceLostError:
        print("DeviceLostError")
""")


def test_a_device_destroyed_inside_a_batch_is_a_device_lost_error_when_it_submits(tmp_path):
    # Review helper 102: the batch's params write met the lost device first: a raw
    # GPUValidationError ("Parent device is lost") escaped abi.batch().
    proc = _run_script(tmp_path, DESTROY_IN_BATCH_SCRIPT, timeout=120)
    assert "DeviceLostError" in proc.stdout, proc.stdout + proc.stderr


READ_WHILE_DESTROYED_SCRIPT = textwrap.dedent("""
    import sys, threading, time, numpy as np
    from engine_plugin import abi
    from engine_plugin.errors import PluginError
    YAML = "bindings:\\n  - { name: dst, kind: buffer, access: read_write, element: f32, count: 'n' }\\n"
    WGSL = "@compute @workgroup_size(64)\\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\\n    let i = zero_index(gid);\\n    if (i >= zero_n()) { return; }\\n    dst_set(i, 7.0);\\n}\\n"
    v = abi.program(key="read_destroy", schema=abi.parse(YAML), wgsl=WGSL).variant()
    outs = [v.run(n=256).outputs["dst"] for _ in range(4)]
    stop = threading.Event()
    def reader():
        while not stop.is_set():
            try:
                for o in outs:
                    abi.read(o)
            except PluginError:
                return
    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    time.sleep(float(sys.argv[1]))
    abi.device().destroy()
    stop.set()
    for t in threads:
        t.join(20)
    print("hung" if any(t.is_alive() for t in threads) else "survived", flush=True)
""")


@pytest.mark.parametrize("delay", [0.05, 0.12, 0.2, 0.3])
def test_reads_on_other_threads_while_the_device_is_destroyed_neither_hang_nor_abort(tmp_path, delay):
    # Review helper 102: a read waiting for its map hung for good (a destroyed device's promises
    # never settle), or read the mapped range of a staging buffer the destroy had just freed:
    # wgpu-native panicked and the process aborted (rc 134).
    script = tmp_path / "script.py"
    script.write_text(READ_WHILE_DESTROYED_SCRIPT)
    proc = subprocess.run([sys.executable, str(script), str(delay)], capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert proc.returncode == 0 and "survived" in proc.stdout, (proc.returncode, proc.stdout, proc.stderr[-2000:])


def _refused_while_another_threads_batch_holds(record, use) -> tuple[Any, str]:
    """``record()`` inside an ``abi.batch()`` on thread A, held open while thread B calls
    ``use(output)``; answers the output and the DispatchError B met ("" if none)."""
    import threading

    box: dict = {"refused": ""}
    recorded, done = threading.Event(), threading.Event()

    def a():
        with abi.batch():
            box["o"] = record()
            recorded.set()
            done.wait(30)

    def b():
        recorded.wait(30)
        try:
            use(box["o"])
        except DispatchError as exc:
            box["refused"] = str(exc)
        finally:
            done.set()

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return box["o"], box["refused"]


def test_an_output_of_a_batch_still_open_on_another_thread_is_refused_as_an_input():
    # Review helper 102: thread B chained the Output of a run thread A had only recorded: B's
    # run read what the pooled buffer held from its previous user (389.0 where 2.0 was due).
    v = variant("t102/k", K_YAML, K_WGSL)
    copy = variant("t102/copy", COPY_YAML.replace("ELEM", "u32").replace("BITS", "false"), COPY_WGSL)
    out, refused = _refused_while_another_threads_batch_holds(
        lambda: v.run(n=64, params={"k": 1.0}).outputs["dst"], lambda o: copy.run(n=64, inputs={"src": o})
    )
    assert "still open on another thread" in refused, refused
    after = copy.run(n=64, inputs={"src": out}).outputs["dst"]  # the batch ended: chained as usual
    assert abi.read(after).tolist() == [0x3F800000] * 64


def test_reading_the_count_of_another_threads_pending_append_output_names_that_output():
    # Review helper 102: the refusal named the pooled buffer's first label ('y'), not the output.
    yaml = """\
bindings:
  - { name: hits, kind: buffer, access: read_write, element: u32, append: true, capacity: "n" }
determinism: float_order
"""
    wgsl = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    hits_append(i);
}
"""
    v = variant("t102/hits", yaml, wgsl)
    out, refused = _refused_while_another_threads_batch_holds(lambda: v.run(n=64).outputs["hits"], lambda o: o.count)
    assert "cannot read the count of output 'hits' yet" in refused, refused
    assert out.count == 64


PREPARED_DESTROY_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np, wgpu
    from engine_plugin import abi
    from engine_plugin.device.context import get_context
    from engine_plugin.runtime.submission import Submission
    Y = '''bindings:
      - { name: src, kind: buffer, access: read, element: f32 }
      - { name: y, kind: buffer, access: read_write, element: f32, count: "n" }
    '''
    W = '''@compute @workgroup_size(64)
    fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
        let i = zero_index(gid);
        if (i >= zero_n()) { return; }
        y_set(i, src_get(i) + 1.0);
    }
    '''
    v = abi.program(key="prepd", schema=abi.parse(Y, "prepd/bindings.yaml"), wgsl=W, wgsl_path="prepd/kernel.wgsl").variant()
    ctx = get_context()
    S = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
    for what in ("src", "area", "dropped"):
        src = ctx.device.create_buffer_with_data(data=np.arange(64, dtype=np.float32), usage=S)
        area = ctx.device.create_buffer(size=1024, usage=S)
        p = v.prepare(64, {"src": src}, None, results=area)
        (area if what == "area" else src).destroy()  # waits for the prepared run's submission
        if what == "dropped":
            p.submitted()  # never submitted (the engine's refusal): the destroy goes ahead now
            continue
        sub = Submission()
        for r in p.records:
            sub.add(r)
        sub.submit(ctx.device, ctx.queue, ctx.guard, "test")
        p.submitted()
        if what == "src":
            got = np.frombuffer(ctx.queue.read_buffer(area, 0, 256), np.float32)
            assert np.array_equal(got, np.arange(64, dtype=np.float32) + 1.0), got
    print("ok")
""")


def test_destroying_a_buffer_a_prepared_run_binds_waits_for_its_submission(tmp_path):
    # Review helper 147: variant.prepare(), then destroy() of its input (or its results area),
    # then the submission carrying the prepared run aborted the process in wgpu-native (exit
    # 134: a destroyed buffer in a submit). The destroy waits for the submission, as it does
    # for a run recorded in an open abi.batch(); the run computes from the data it was given.
    proc = _run_script(tmp_path, PREPARED_DESTROY_SCRIPT)
    assert proc.stdout.strip().endswith("ok"), proc.stdout + proc.stderr
