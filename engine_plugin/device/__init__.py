"""The device layer: acquiring a wgpu device (:mod:`.context`: ``DeviceContext``, which owns
every per-device cache, the program registry and the loss state), loss detection
(:mod:`.loss`, :mod:`.guard`: one submit lock and loss flag a device), mapping staging buffers
(:mod:`.mapping`) and WebGPU's usage numbers (:mod:`.flags`).

Below the runtime and the backend layer (:mod:`engine_plugin.gpu`, SPEC section 3), which
both use it. Importing this package imports nothing; :mod:`.context` imports wgpu.
"""
