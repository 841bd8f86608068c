"""A baking process for the concurrency test: lowers the reference sample's variants and puts
them into one cache folder, ``rounds`` times over, as fast as it can."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cache_support import reference_variants  # noqa: E402

from engine_plugin.cache import VariantCache  # noqa: E402


def main(folder: str, rounds: int) -> int:
    cache = VariantCache(folder)
    variants = reference_variants()
    for _ in range(rounds):
        for key, lowered in variants:
            if not cache.put(key, lowered):
                return 3
    st = cache.stats()
    return 0 if st.write_errors == 0 else 4


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
