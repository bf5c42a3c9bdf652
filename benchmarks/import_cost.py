"""What ``import mmelocal`` and the facade's names cost: time and modules, fresh interpreter.

Each statement runs in its own new interpreter (``--runs`` times; the median is kept),
timed from just before to just after it, with the modules it added to ``sys.modules``
counted. The reference, measured in the same run, is ``import json, logging, dataclasses``
(what any small library pulls in). ``import mmelocal`` must stay near it: the names are
lazy (``mmelocal/__init__.py``), so torch, boto3 and the emulator load only when a name
that needs them is first used.

Run: ``.venv/bin/python benchmarks/import_cost.py [--runs 5]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

REFERENCE = "import json, logging, dataclasses"
STATEMENTS = (
    REFERENCE,
    "import mmelocal",
    "from mmelocal import MmeLocalError, parse_size_bytes",
    "from mmelocal import validate_path",
    "from mmelocal import EmulatorServer",
    "from mmelocal import build_model",
)
PROBE = """
import json, sys, time
before = set(sys.modules)
t0 = time.perf_counter()
{statement}
elapsed = time.perf_counter() - t0
added = set(sys.modules) - before
print(json.dumps({{"s": elapsed, "modules": len(added),
    "torch": "torch" in added, "boto3": "boto3" in added}}))
"""


def measure(statement: str, runs: int) -> dict[str, float | int | bool]:
    """Median seconds and the modules added by ``statement`` in fresh interpreters."""
    rows = []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", PROBE.format(statement=statement)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        rows.append(json.loads(out))
    return {
        "s": statistics.median(r["s"] for r in rows),
        "modules": rows[-1]["modules"],
        "torch": rows[-1]["torch"],
        "boto3": rows[-1]["boto3"],
    }


def main() -> None:
    """Print one row per statement, with its time as a ratio of the reference's."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    results = {s: measure(s, args.runs) for s in STATEMENTS}
    reference = results[REFERENCE]["s"]
    print("| statement | ms (median) | x reference | modules added | torch | boto3 |")
    print("| --- | ---: | ---: | ---: | --- | --- |")
    for statement, r in results.items():
        torch, boto3 = ("yes" if r[name] else "no" for name in ("torch", "boto3"))
        seconds = float(r["s"])
        print(
            f"| `{statement}` | {seconds * 1e3:,.1f} | {seconds / reference:,.1f}x "
            f"| {r['modules']} | {torch} | {boto3} |"
        )


if __name__ == "__main__":
    main()
