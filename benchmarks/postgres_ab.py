"""Two versions of the package, one durable PostgreSQL turn each, timed in one run, interleaved.

``benchmarks/turn_ab.py --store postgres``, kept under its old name: see there.
Run: ``python benchmarks/postgres_ab.py [--baseline-ref main] [--length 1000] [--no-flush]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from turn_ab import main

if __name__ == "__main__":
    main(["--store", "postgres", *sys.argv[1:]])
