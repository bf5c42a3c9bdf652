#!/usr/bin/env sh
# Capacity of the packaged MiniLM on this machine (on a CPU: host memory of the Triton process
# tree against a 2 GiB budget, or MEMORY_BUDGET's, e.g. `MEMORY_BUDGET=4GiB sh
# capacity_then_report.sh`; never projected onto a GPU), the estimate of its GPU footprint
# and copies per card from the model itself, then one report with both.
set -e
MEMORY_BUDGET="${MEMORY_BUDGET:-2GiB}"
mmelocal capacity minilm --format torchscript,onnx --memory-budget "$MEMORY_BUDGET" --json capacity.json
mmelocal capacity estimate minilm --instance-type ml.g4dn.xlarge --json estimate.json
mmelocal report capacity.json estimate.json --out bench-report
echo "open bench-report/index.html"
