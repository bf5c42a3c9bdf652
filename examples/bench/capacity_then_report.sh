#!/usr/bin/env sh
# Capacity of the packaged MiniLM on this machine (CPU: host memory of the Triton process tree
# against a 4 GiB budget), projected onto the usual GPUs, then one report with both parts.
set -e
mmelocal capacity minilm --format torchscript,onnx --memory-budget 4GiB --json capacity.json
mmelocal capacity project --per-model-mib 420 --baseline-mib 300 --json projection.json
mmelocal report capacity.json projection.json --out bench-report
echo "open bench-report/index.html"
