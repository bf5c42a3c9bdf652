"""The GPU proof's steps beside the tests and the capacity runs (``gpu_proof.py`` runs them).

Each step checks one GPU path on the machine's real GPU and returns plain data: its
``status`` (``passed``, ``failed``, ``skipped``), what was seen (``seen``), the lines the
report shows (``lines``), and the error or the reason for a skip. :func:`run_step` runs
one: a step that raises is recorded as failed with its error, never failing the proof;
each step bounds its own time (a subprocess timeout, a server start timeout, a deadline).

1. :func:`card_check`: the sweep's card check (``mmelocal.bench.sweep.runner.check_cards``)
   with NVML's names and memory totals of this machine's GPUs, against the instance type
   the card table (``gpus.yaml``) gives this card (as many GPUs as here), which it must
   accept, and one with another card, which it must refuse;
2. :func:`cli_check`: ``mmelocal check --gpu 0 --json DIR`` as a user runs it: exit code,
   the memory read per model and its kind (``gpu`` on a GPU machine);
3. :func:`emulator_gauges`: the emulator (``EmulatorServer``, the GPU probe on: every
   GPU NVML sees) serving a model under invocations, and the instance metrics it
   publishes, ``GPUUtilization`` and ``GPUMemoryUtilization`` (CloudWatch's names): one
   sample per instance (what the local CloudWatch publishes) and the ``/metrics`` gauge.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
MIB = 1024 * 1024
#: the instance types tried as "another card", the first whose card is not this one's
OTHER_CARD_TYPES = ("ml.g5.xlarge", "ml.g4dn.xlarge")
GPU_GAUGES = ("GPUUtilization", "GPUMemoryUtilization")


class StepSkipped(Exception):
    """Raised by a step that cannot run here; the message is the reason."""


def run_step(
    name: str, step: Callable[..., dict[str, Any]], *args: Any, **kw: Any
) -> dict[str, Any]:
    """``step(*args, **kw)``'s result with its ``name`` and ``seconds``: a step that raises
    is ``failed`` with its error (``skipped`` with the reason for :class:`StepSkipped`)."""
    t0 = time.monotonic()
    try:
        result = step(*args, **kw)
    except StepSkipped as exc:
        result = {"status": "skipped", "reason": str(exc)}
    except Exception as exc:  # a step never fails the whole proof: it is reported
        result = {"status": "failed", "error": f"{type(exc).__name__}: {exc}"}
    return {"name": name, **result, "seconds": round(time.monotonic() - t0, 1)}


def steps_markdown(steps: Sequence[dict[str, Any]]) -> list[str]:
    """The steps as markdown lines: a table of status and time, then each step's lines."""
    if not steps:
        return []
    lines = ["| step | status | seconds |", "| --- | --- | ---: |"]
    lines += [f"| {s['name']} | {s['status']} | {s.get('seconds', '-')} |" for s in steps]
    for step in steps:
        lines += ["", f"{step['name']} ({step['status']}):", ""]
        if step.get("reason"):
            lines.append(f"- skipped: {step['reason']}")
        if step.get("error"):
            lines.append(f"- error: {step['error']}")
        lines += [f"- {line}" for line in step.get("lines", ())]
        lines += [f"- **finding**: {finding}" for finding in step.get("findings", ())]
    return lines


# -- 1. the sweep's card check ----------------------------------------------------------
def card_check(readings: Sequence[tuple[str, int]] | None = None) -> dict[str, Any]:
    """``check_cards`` with NVML's readings of this machine's GPUs (name and memory total
    in bytes; ``readings``: read from NVML when None) against this card's instance type and
    another card's (module docstring)."""
    from mmelocal.bench.capacity.projection import (
        card_named,
        card_of_instance,
        describe_reading,
        load_gpus,
    )
    from mmelocal.runtime.memory import gpu_readings

    local = list(gpu_readings() if readings is None else readings)
    if not local:
        raise StepSkipped("NVML sees no GPU (no pynvml, no driver or no GPU)")
    gpus = load_gpus()
    name, total = local[0]
    card = card_named(name, gpus, total_bytes=total)
    findings: list[str] = []
    cases: list[tuple[str, bool]] = []
    if card is None:
        findings.append(
            f"the card table (gpus.yaml) has no card for NVML's {name!r} of "
            f"{total // MIB} MiB: no instance type can be swept on this machine"
        )
    else:
        # the table's order: its smallest type of the family first
        own = [t for t, n in card.instances.items() if n == len(local)]
        if own:
            cases.append((own[0], True))
        else:
            listed = ", ".join(f"{t} ({n})" for t, n in card.instances.items())
            findings.append(
                f"the card table lists {card.name} on {listed or 'no instance type'}, none "
                f"with {len(local)} GPU(s) as here: no instance type can be swept here"
            )
    other = next(
        t
        for t in OTHER_CARD_TYPES
        if card is None or (card_of_instance(t, gpus) or (None,))[0] is not card
    )
    cases.append((other, False))
    seen: dict[str, Any] = {
        "nvml_names": [n for n, _ in local],
        "nvml_total_mib": [t // MIB for _, t in local],
        "card": card.name if card else None,
    }
    seen["cases"] = []
    names = ", ".join(describe_reading(n, t) for n, t in local)
    lines = [f"NVML: {names} (card table: {card.name if card else 'no card'})"]
    wrong = []
    for instance_type, expect in cases:
        case = _card_case(local, instance_type, gpus, expect)
        seen["cases"].append(case)
        got = "accepted" if case["accepted"] else f"refused: {case['refusal']}"
        lines.append(f"{instance_type} ({case['instance_card']}): {got}")
        if case["accepted"] != expect:
            wrong.append(f"{instance_type} {'refused' if expect else 'accepted'}")
    status = "failed" if wrong else "passed"
    out = {"status": status, "seen": seen, "lines": lines, "findings": findings}
    if wrong:
        out["error"] = "expected otherwise: " + "; ".join(wrong)
    return out


def _card_case(
    local: list[tuple[str, int]], instance_type: str, gpus: Any, expect: bool
) -> dict[str, Any]:
    from mmelocal.bench.capacity.projection import card_of_instance
    from mmelocal.bench.sweep.runner import check_cards
    from mmelocal.errors import UserInputError

    wanted = card_of_instance(instance_type, gpus)
    case: dict[str, Any] = {
        "instance_type": instance_type,
        "instance_card": f"{wanted[1]} x {wanted[0].name}" if wanted else "no card",
        "expected": "accepted" if expect else "refused",
        "accepted": True,
        "refusal": None,
    }
    try:
        check_cards(local, instance_type, gpus)
    except UserInputError as exc:
        case.update(accepted=False, refusal=str(exc))
    return case


# -- 2. mmelocal check --gpu 0 ----------------------------------------------------------
def cli_check(model: Path, *, expect_gpu: bool = True, timeout_s: float = 150.0) -> dict[str, Any]:
    """``mmelocal check --gpu 0 --json MODEL`` in a subprocess (the console script where
    installed, else ``python -m mmelocal``; this checkout's code first on the path).
    ``expect_gpu=False`` (a CPU machine) drops ``--gpu 0``, which check refuses there."""
    if expect_gpu:
        from mmelocal.runtime.memory import gpu_count

        if gpu_count() == 0:
            raise StepSkipped("NVML sees no GPU: check would read host memory")
    script = shutil.which("mmelocal")
    head = [script] if script else [sys.executable, "-m", "mmelocal"]
    gpu = ["--gpu", "0"] if expect_gpu else []
    cmd = [*head, "check", *gpu, "--json", str(model)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    shown = " ".join(["mmelocal", *cmd[len(head) :]])
    try:
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout_s, env=env, cwd=REPO
        )
    except subprocess.TimeoutExpired:
        return {"status": "failed", "error": f"{shown}: timed out after {timeout_s:g} s"}
    return check_result(shown, done.returncode, done.stdout, done.stderr, expect_gpu=expect_gpu)


def check_result(
    command: str, exit_code: int, stdout: str, stderr: str, *, expect_gpu: bool
) -> dict[str, Any]:
    """The step's result from ``check --json``'s exit code and output."""
    seen: dict[str, Any] = {"command": command, "exit_code": exit_code}
    try:
        report = json.loads(stdout)
    except json.JSONDecodeError:
        tail = (stderr or stdout).strip().splitlines()[-5:]
        seen["output_tail"] = tail
        error = f"exit {exit_code}, no JSON report: {' | '.join(tail) or 'no output'}"
        return {"status": "failed", "error": error, "seen": seen, "lines": [command]}
    models = [
        {
            "name": m["name"],
            "status": m["status"],
            "memory_mib": None if m["memory_bytes"] is None else round(m["memory_bytes"] / MIB, 1),
            "memory_kind": m["memory_kind"],
            "load_time_s": None if m["load_time_s"] is None else round(m["load_time_s"], 2),
            "errors": m["errors"],
        }
        for m in report.get("models", [])
    ]
    baseline = report.get("baseline_memory_bytes")
    seen.update(
        ok=report.get("ok"),
        errors=report.get("errors", []),
        models=models,
        baseline_memory_mib=None if baseline is None else round(baseline / MIB, 1),
        memory_kind=report.get("memory_kind"),
    )
    lines = [f"`{command}`: exit {exit_code}"]
    lines += [
        f"{m['name']}: {m['status']}, {m['memory_mib']} MiB ({m['memory_kind']}), "
        f"load {m['load_time_s']} s"
        for m in models
    ]
    lines += [f"error: {e}" for e in seen["errors"]]
    problems = [] if exit_code == 0 else [f"exit code {exit_code}"]
    problems += [f"{m['name']} failed: {'; '.join(m['errors'])}" for m in models if m["errors"]]
    want = "gpu" if expect_gpu else "host_pss"
    problems += [
        f"{m['name']}'s memory read as {m['memory_kind']}, not {want}"
        for m in models
        if m["status"] == "passed" and m["memory_kind"] != want
    ]
    if not models and exit_code == 0:
        problems.append("no model checked")
    out: dict[str, Any] = {"status": "failed" if problems else "passed", "seen": seen}
    out["lines"] = lines
    if problems:
        out["error"] = "; ".join(problems + seen["errors"])
    return out


# -- 3. the emulator's GPU gauges -------------------------------------------------------
def emulator_gauges(
    model: Path,
    payload: bytes,
    *,
    workdir: Path,
    content_type: str = "application/json",
    busy_s: float = 3.0,
    callers: int = 4,
    start_timeout_s: float = 120.0,
) -> dict[str, Any]:
    """Serve ``model`` with the emulator (the GPU probe on), invoke it from ``callers``
    threads for ``busy_s``, and read ``GPUUtilization`` / ``GPUMemoryUtilization`` per
    instance while the last calls run, then from ``/metrics``."""
    from mmelocal.builder.package import package_copies
    from mmelocal.emulator.emulator import EmulatorConfig
    from mmelocal.emulator.metrics import parse_prometheus
    from mmelocal.emulator.server import EmulatorServer
    from mmelocal.runtime.memory import gpu_count

    if gpu_count() == 0:
        raise StepSkipped("NVML sees no GPU: the emulator would use the host probe")
    store = workdir / "store"
    [tarball] = package_copies(model, store, copies=1)
    config = EmulatorConfig(store=str(store), cache_dir=workdir / "cache", gpus=None)
    with EmulatorServer(config, start_timeout_s=start_timeout_s) as server:
        instances = [
            {"index": i.index, "probe": i.probe.name, "probe_kind": i.probe.kind}
            for i in server.emulator.instances
        ]
        statuses, per_instance = _invoke_for(
            server.url,
            tarball.name,
            payload,
            content_type,
            busy_s,
            callers,
            read=server.emulator.read_gauges_per_instance,
        )
        with urllib.request.urlopen(f"{server.url}/metrics", timeout=30) as response:
            exposition = parse_prometheus(response.read().decode())
    return gauges_result(instances, statuses, per_instance, exposition)


def _invoke_for(
    url: str,
    target: str,
    payload: bytes,
    content_type: str,
    busy_s: float,
    callers: int,
    *,
    read: Callable[[], dict[str, list[float]]],
) -> tuple[Counter[str], dict[str, list[float]]]:
    """Invoke ``target`` once (the load), then from ``callers`` threads until ``busy_s``
    have passed: the answers' statuses (an error's class name where none came), and
    ``read()`` called when this thread's last call ends, the others' maybe still running."""
    from mmelocal.facts.sagemaker import TARGET_MODEL_HEADER

    statuses: Counter[str] = Counter()
    lock = threading.Lock()

    def call(deadline: float) -> None:
        while True:
            request = urllib.request.Request(
                f"{url}/endpoints/local/invocations",
                data=payload,
                headers={"Content-Type": content_type, TARGET_MODEL_HEADER: target},
            )
            try:
                with urllib.request.urlopen(request, timeout=60) as response:
                    status = str(response.status)
            except urllib.error.HTTPError as exc:
                status = str(exc.code)
            except OSError as exc:
                status = type(exc).__name__
            with lock:
                statuses[status] += 1
            if time.monotonic() >= deadline:
                return

    call(0.0)  # one call that loads the model; the busy time starts after it
    deadline = time.monotonic() + busy_s
    threads = [
        threading.Thread(target=call, args=(deadline,), daemon=True) for _ in range(callers - 1)
    ]
    for thread in threads:
        thread.start()
    call(deadline)
    seen = read()
    for thread in threads:
        thread.join(timeout=90)
    return statuses, seen


def gauges_result(
    instances: list[dict[str, Any]],
    statuses: Counter[str] | dict[str, int],
    per_instance: dict[str, list[float]],
    exposition: dict[str, float],
) -> dict[str, Any]:
    """The step's result from what the emulator published (see :func:`emulator_gauges`)."""
    scraped = {
        key.split("{", 1)[0]: {"series": key, "value": value}
        for key, value in exposition.items()
        if key.split("{", 1)[0] in GPU_GAUGES
    }
    samples = {name: per_instance.get(name) for name in GPU_GAUGES}
    seen: dict[str, Any] = {
        "instances": instances,
        "invocations": dict(statuses),
        "per_instance": samples,
        "metrics_endpoint": scraped,
    }
    seen["per_instance_ok"] = all(
        values is not None and len(values) == len(instances) for values in samples.values()
    )
    problems = [f"instance {i['index']} probe is {i['probe']}" for i in instances
                if i["probe_kind"] != "gpu"]  # fmt: skip
    problems += [f"{name}: no sample" for name, v in samples.items() if not v]
    problems += [
        f"{name}: {len(v)} samples for {len(instances)} instance(s)"
        for name, v in samples.items()
        if v and len(v) != len(instances)
    ]
    problems += [
        f"{name}: {x} is not a percentage"
        for name, v in samples.items()
        for x in v or ()
        if not 0.0 <= x <= 100.0
    ]
    problems += [f"/metrics has no {name}" for name in GPU_GAUGES if name not in scraped]
    failed_calls = {s: n for s, n in statuses.items() if s != "200"}
    if failed_calls or not statuses:
        problems.append(f"invocations answered {dict(statuses) or 'nothing'}")
    probes = ", ".join(f"{i['index']}: {i['probe']}" for i in instances)
    lines = [
        f"{len(instances)} instance(s) ({probes}); invocations {dict(statuses)}",
        *(f"{name} per instance: {samples[name]}" for name in GPU_GAUGES),
        *(f"/metrics {s['series']} = {s['value']}" for s in scraped.values()),
    ]
    out: dict[str, Any] = {"status": "failed" if problems else "passed", "seen": seen}
    out["lines"] = lines
    if problems:
        out["error"] = "; ".join(problems)
    return out


# -- all of them -------------------------------------------------------------------------
CARD_CHECK = "sweep card check"
CLI_CHECK = "mmelocal check --gpu 0"
EMULATOR_GAUGES = "emulator GPU gauges"


def run_steps(workdir: Path, record: Callable[[dict[str, Any]], None]) -> None:
    """Run the steps in order, giving each result to ``record`` as it ends (the report is
    written after each, so a proof cut short keeps what was seen). The tiny BERT of steps 2
    and 3 is built once; where its build fails both steps fail with that error."""
    record(run_step(CARD_CHECK, card_check))
    try:
        model = small_model(workdir / "model")
    except Exception as exc:  # reported as the two steps' error
        error = f"building the tiny BERT model folder failed: {type(exc).__name__}: {exc}"
        for name in (CLI_CHECK, EMULATOR_GAUGES):
            record({"name": name, "status": "failed", "error": error, "seconds": 0.0})
        return
    record(run_step(CLI_CHECK, cli_check, model["path"]))
    record(
        run_step(
            EMULATOR_GAUGES,
            emulator_gauges,
            model["path"],
            model["payload"],
            workdir=workdir / "emulator",
        )
    )


# -- the model the steps share ----------------------------------------------------------
def small_model(workdir: Path) -> dict[str, Any]:
    """The tiny BERT (random weights, the capacity runs' own) built as a TorchScript model
    folder, and a request for it from its recorded sample inputs."""
    from mmelocal.bench.sources import resolve_model
    from mmelocal.builder.payload import payload_from_model
    from mmelocal.testing.tiny_bert import save_tiny_bert

    source = save_tiny_bert(workdir / "tiny-bert", tokenizer=False)
    model = resolve_model(source, workdir=workdir / "built", model_format="torchscript")
    return {"path": model.path, "payload": payload_from_model(model.path)}


__all__ = [
    "CARD_CHECK",
    "CLI_CHECK",
    "EMULATOR_GAUGES",
    "StepSkipped",
    "card_check",
    "check_result",
    "cli_check",
    "emulator_gauges",
    "gauges_result",
    "run_step",
    "run_steps",
    "small_model",
    "steps_markdown",
]
