"""A game start on another "machine": ``python machine.py CACHE URL [TIMEOUT]``.

Loads assets/samples with its own local cache and the shared remote tier, prefetches every
variant, asks for each one's lowering, and prints one JSON line: the prefetch report, the
remote tier's counters and how many variants this process lowered.
"""

import json
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from engine_plugin.assets import AssetLibrary  # noqa: E402
from engine_plugin.lowering import enumerate_variants  # noqa: E402
from engine_plugin.runtime import lowering_count  # noqa: E402


def main() -> None:
    cache, url = sys.argv[1], sys.argv[2]
    timeout = float(sys.argv[3]) if len(sys.argv) > 3 else 0.25
    lib = AssetLibrary(os.path.join(REPO, "assets", "samples"), cache=cache, remote=url, remote_timeout=timeout)
    refs = lib.load_all()
    wanted = {r.path: list(enumerate_variants(r.program().schema)) for r in refs}
    t0 = time.perf_counter()
    report = lib.prefetch(wanted)
    prefetch_s = time.perf_counter() - t0
    before = lowering_count()
    for ref in refs:
        for spec in wanted[ref.path]:
            ref.program().lowered(spec)
    lib.close()  # the local copies of remote entries are written in the background
    print(json.dumps({
        "prefetch": report.as_dict(),
        "prefetch_s": prefetch_s,
        "lowered": lowering_count() - before,
        "remote": lib.stats()["remote"].as_dict(),
    }))


if __name__ == "__main__":
    main()
