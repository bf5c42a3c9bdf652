"""Hub names are downloaded by the real huggingface_hub client from a hub on loopback.

The server (tests/builder/loopback_hub.py) is reached through HF_ENDPOINT as a corporate
mirror would be; everything on the client side is the code users run. The CLI tests
run ``python -m mmelocal.cli.main`` in a subprocess with the environment set before it
starts; in-process tests set it with monkeypatch, which works because mmelocal reads it
at call time (huggingface_hub reads its own copy at import: see ``hub_env``).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from loopback_hub import LoopbackHub

from mmelocal.builder.sources.hub import HubSettings, choose_files, fetch_hub_model
from mmelocal.cli.main import main
from mmelocal.errors import AccessDeniedError, DownloadError, SourceError

REPO = "tiny-org/tiny-bert"
WEIGHTS = "model.safetensors"
# Files a careless downloader would fetch too: other frameworks, a duplicate, an export.
DECOYS = {
    "pytorch_model.bin": b"duplicate weights: never fetched when safetensors exist",
    "tf_model.h5": b"tensorflow",
    "flax_model.msgpack": b"flax",
    "onnx/model.onnx": b"onnx export",
    "README.md": b"# tiny",
}
_HUB_ENV = (
    "HF_ENDPOINT",
    "HF_HOME",
    "HF_HUB_CACHE",
    "HUGGINGFACE_HUB_CACHE",
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
)


@pytest.fixture
def hub(tiny_bert_dir: Path) -> Iterator[LoopbackHub]:
    """A loopback hub serving the tiny BERT (plus decoys) as tiny-org/tiny-bert."""
    server = LoopbackHub()
    server.add_folder(REPO, tiny_bert_dir, DECOYS)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def hub_env(hub: LoopbackHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """This process and its children see only the loopback hub and an empty HF_HOME.

    huggingface_hub reads HF_ENDPOINT once at import for a side request of its own (an
    "agent harness" registry fetched when it builds its User-Agent, unless telemetry is
    off); that import-time setting is turned off here so that nothing leaves 127.0.0.1
    when this process imported the client before HF_ENDPOINT was set. Its import-time
    HF_HUB_OFFLINE is aligned with the environment set here for the same reason.
    """
    import huggingface_hub.constants

    for name in _HUB_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_DISABLE_TELEMETRY", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    return dict(os.environ)


def weight_gets(hub: LoopbackHub) -> list[str]:
    return [p for p in hub.asked("GET") if p.endswith("/" + WEIGHTS)]


def snapshot_files(hf_home: Path) -> set[str]:
    snapshots = hf_home / "hub" / "models--tiny-org--tiny-bert" / "snapshots"
    return {p.name for p in snapshots.rglob("*") if p.is_file()} if snapshots.is_dir() else set()


def run_cli(env: dict[str, str], *args: str, timeout_s: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mmelocal.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip().lower().startswith("error")]


@pytest.mark.slow
def test_cli_build_downloads_once_and_validates(
    hub: LoopbackHub, hub_env: dict[str, str], tmp_path: Path, capsys
) -> None:
    repo = tmp_path / "repo"
    built = run_cli(hub_env, "build", REPO, "--repo", str(repo), "--seq-len", "8")
    assert built.returncode == 0, built.stderr
    assert "Traceback" not in built.stderr
    assert len(weight_gets(hub)) == 1
    asked = " ".join(hub.asked("GET") + hub.asked("HEAD"))
    for decoy in ("pytorch_model.bin", "tf_model.h5", "flax_model.msgpack", "onnx/", "README"):
        assert decoy not in asked
    assert snapshot_files(tmp_path / "hf") == {
        "config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        WEIGHTS,
    }
    assert f"downloaded 4 file(s) of {REPO}@0123456789ab" in built.stdout

    checked = run_cli(hub_env, "validate", str(repo))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "OK" in checked.stdout

    # second build: the cache serves the weights (the hub is only asked for the listing)
    hub.requests.clear()
    code = main(["build", REPO, "--repo", str(repo), "--name", "again", "--seq-len", "8"])
    out = capsys.readouterr().out
    assert code == 0
    assert weight_gets(hub) == [] and hub.asked("HEAD") == []
    assert "from the Hugging Face cache" in out


def test_offline_with_an_empty_cache_fails_fast(
    hub: LoopbackHub, hub_env: dict[str, str], tmp_path: Path
) -> None:
    env = {**hub_env, "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    result = run_cli(env, "build", REPO, "--repo", str(tmp_path / "repo"))
    elapsed_s = time.perf_counter() - start
    assert result.returncode != 0
    assert elapsed_s < 5, f"took {elapsed_s:.1f} s"
    assert "Traceback" not in result.stderr + result.stdout
    lines = error_lines(result.stderr)
    assert len(lines) == 1, result.stderr
    assert "not in the Hugging Face cache" in lines[0] and "HF_HUB_OFFLINE" in lines[0]
    assert hub.requests == []


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["tiny-org/no-such-model"], "no model 'tiny-org/no-such-model'"),
        ([REPO, "--revision", "v9"], "has no revision 'v9'"),
        (["minilm", "--revision", "v1"], "revision applies to Hugging Face hub names"),
        ([REPO, "--weights", "DEFAULT"], "weights apply to torchvision:NAME and timm:NAME"),
    ],
)
def test_bad_names_give_one_line(
    hub: LoopbackHub, hub_env: dict[str, str], tmp_path: Path, capsys, args: list[str], reason: str
) -> None:
    code = main(["build", *args, "--repo", str(tmp_path / "repo")])
    captured = capsys.readouterr()
    assert code == 2
    lines = error_lines(captured.err)
    assert len(lines) == 1 and reason in lines[0], captured.err
    assert "Traceback" not in captured.err
    assert weight_gets(hub) == []


def test_gated_model_needs_a_token(
    hub: LoopbackHub, hub_env: dict[str, str], tmp_path: Path, monkeypatch, capsys
) -> None:
    hub.repos[REPO].token = "hf_loopback_secret"
    code = main(["build", REPO, "--repo", str(tmp_path / "repo")])
    err = capsys.readouterr().err
    lines = error_lines(err)
    assert code == 2 and len(lines) == 1, err
    for hint in ("gated", "HTTP 401", "licence", "hf auth login", "HF_TOKEN"):
        assert hint in lines[0]
    assert snapshot_files(tmp_path / "hf") == set()

    monkeypatch.setenv("HF_TOKEN", "not-the-token")
    with pytest.raises(AccessDeniedError, match="HTTP 403"):
        fetch_hub_model(REPO)
    monkeypatch.setenv("HF_TOKEN", "hf_loopback_secret")
    snapshot = fetch_hub_model(REPO)
    assert (snapshot.folder / WEIGHTS).is_file() and len(weight_gets(hub)) == 1


def test_server_dying_mid_download_leaves_nothing_half_done(
    hub: LoopbackHub,
    hub_env: dict[str, str],
    tiny_bert_dir: Path,
    tmp_path: Path,
    monkeypatch,
    caplog,
) -> None:
    hub.die_on = WEIGHTS
    with pytest.raises(DownloadError, match="nothing partial is used") as info:
        fetch_hub_model(REPO)
    assert "\n" not in str(info.value)
    assert "Trying to resume download" in caplog.text  # the client retried first
    assert len(weight_gets(hub)) == 1  # half sent, then the server was gone for the retries
    assert WEIGHTS not in snapshot_files(tmp_path / "hf")
    blobs = tmp_path / "hf" / "hub" / "models--tiny-org--tiny-bert" / "blobs"
    digest = hashlib.sha256((tiny_bert_dir / WEIGHTS).read_bytes()).hexdigest()
    assert not (blobs / digest).exists()  # at most blobs/<sha>.incomplete, never the blob

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DownloadError, match="incomplete"):
        fetch_hub_model(REPO)  # the partial copy is refused, not loaded

    monkeypatch.delenv("HF_HUB_OFFLINE")
    again = LoopbackHub(repos=hub.repos).start()
    try:
        monkeypatch.setenv("HF_ENDPOINT", again.url)
        snapshot = fetch_hub_model(REPO)
    finally:
        again.stop()
    data = (snapshot.folder / WEIGHTS).read_bytes()
    assert hashlib.sha256(data).hexdigest() == digest


def test_unreachable_hub_falls_back_to_a_complete_cache(
    hub: LoopbackHub, hub_env: dict[str, str]
) -> None:
    first = fetch_hub_model(REPO)
    hub.stop()
    second = fetch_hub_model(REPO)
    assert second.folder == first.folder and second.downloaded == ()
    assert "from the Hugging Face cache" in second.note


def test_mirror_without_a_file_list_in_model_info(
    hub: LoopbackHub, hub_env: dict[str, str]
) -> None:
    hub.repos[REPO].info_lists_files = False
    snapshot = fetch_hub_model(REPO)
    assert WEIGHTS in snapshot.downloaded and "pytorch_model.bin" not in snapshot.files
    assert any("/tree/" in path for path in hub.asked("GET"))


def test_cached_model_is_used_offline(
    hub: LoopbackHub, hub_env: dict[str, str], monkeypatch
) -> None:
    fetch_hub_model(REPO)
    hub.requests.clear()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    snapshot = fetch_hub_model(REPO)
    assert (snapshot.folder / WEIGHTS).is_file() and hub.requests == []


@pytest.mark.parametrize(
    ("names", "weights"),
    [
        (["model.safetensors", "pytorch_model.bin", "tf_model.h5"], ["model.safetensors"]),
        (
            [
                "model.safetensors.index.json",
                "model-00001-of-00002.safetensors",
                "model-00002-of-00002.safetensors",
                "pytorch_model.bin",
            ],
            [
                "model-00001-of-00002.safetensors",
                "model-00002-of-00002.safetensors",
                "model.safetensors.index.json",
            ],
        ),
        (
            ["pytorch_model.bin", "flax_model.msgpack", "onnx/model.safetensors"],
            ["pytorch_model.bin"],
        ),
    ],
)
def test_choose_files_prefers_safetensors(names: list[str], weights: list[str]) -> None:
    chosen = choose_files(["config.json", "vocab.txt", "README.md", *names], repo_id="o/n")
    assert chosen == ("config.json", "vocab.txt", *weights)


def test_choose_files_refuses_other_frameworks() -> None:
    with pytest.raises(SourceError, match=r"no PyTorch weights .*only flax_model\.msgpack, tf"):
        choose_files(["config.json", "tf_model.h5", "flax_model.msgpack"], repo_id="o/n")
    with pytest.raises(SourceError, match=r"no config\.json"):
        choose_files(["model.safetensors"], repo_id="o/n")


def test_settings_are_read_at_call_time(tmp_path: Path) -> None:
    home = HubSettings.from_env({"HF_HOME": str(tmp_path), "HF_ENDPOINT": "http://127.0.0.1:9/"})
    assert home.cache_dir == tmp_path / "hub" and home.endpoint == "http://127.0.0.1:9"
    assert not home.offline
    cache = HubSettings.from_env(
        {"HF_HOME": "/x", "HF_HUB_CACHE": str(tmp_path / "c"), "HF_HUB_OFFLINE": "1"}
    )
    assert cache.cache_dir == tmp_path / "c" and cache.offline
    assert HubSettings.from_env({"TRANSFORMERS_OFFLINE": "yes"}).offline
    assert HubSettings.from_env({}).endpoint == "https://huggingface.co"
    with pytest.raises(SourceError, match="HF_ENDPOINT must be an http"):
        HubSettings.from_env({"HF_ENDPOINT": "ftp://mirror"})


def test_no_progress_bars_of_the_client(hub: LoopbackHub, hub_env: dict[str, str], capfd) -> None:
    """The client's tqdm bars would cut through the CLI's progress line: they are off while
    mmelocal fetches, and as they were afterwards."""
    import huggingface_hub.utils

    before = huggingface_hub.utils.are_progress_bars_disabled()
    snapshot = fetch_hub_model(REPO)
    assert WEIGHTS in snapshot.downloaded
    err = capfd.readouterr().err
    assert "%|" not in err and "it/s" not in err, err
    assert huggingface_hub.utils.are_progress_bars_disabled() == before


def test_cli_estimate_reads_a_hub_models_config_alone(
    hub: LoopbackHub, hub_env: dict[str, str], tmp_path: Path
) -> None:
    """``capacity estimate org/name`` in a fresh process fetches config.json only and
    estimates (it failed as 'cannot download ... (AttributeError: No huggingface_hub
    attribute utils)': the client's progress-bar switch was reached through a submodule
    nothing had imported yet)."""
    out = tmp_path / "estimate.json"
    result = run_cli(
        hub_env, "capacity", "estimate", REPO, "--instance-type", "ml.g4dn.xlarge",
        "--seq-len", "16", "--json", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert weight_gets(hub) == []
    assert snapshot_files(tmp_path / "hf") == {"config.json"}
    assert json.loads(out.read_text())["kind"] == "estimate"
