"""The artifact cache: extraction, layout check, hostile archives, disk budget (no server)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from emulator_hostile import make_hostile

from mmelocal.emulator.cache import ArtifactCache, Claim, target_key, tree_size
from mmelocal.emulator.store import InvalidTargetError, LocalStore
from mmelocal.errors import ModelNotFoundError, UnsafeArchiveError, ValidationError
from mmelocal.testing.tiny_model import write_tarball


def files_under(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*")}


@pytest.fixture
def store(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    root.mkdir()
    for i in range(4):
        write_tarball(root / f"model-{i}.tar.gz", scale=float(i))
    return root


def test_download_extract_and_hit(store: Path, tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path / "cache", LocalStore(store), disk_budget_bytes=10**9)
    first = cache.ensure("model-0.tar.gz")
    assert first.downloaded and first.artifact.size_bytes > 0
    assert (first.artifact.serve_dir / "tiny" / "config.pbtxt").is_file()
    assert first.artifact.entry_dir.name == target_key("model-0.tar.gz")
    again = cache.ensure("model-0.tar.gz")
    assert not again.downloaded
    assert cache.utilization_percent > 0
    assert not any(p.name.startswith(".staging-") for p in cache.root.iterdir())
    cache.close()  # the downloaded tarball is deleted off the call's path, and is gone now
    assert list((cache.root / ".downloads").iterdir()) == []
    cache.close()  # idempotent


def test_cache_survives_a_restart(store: Path, tmp_path: Path) -> None:
    ArtifactCache(tmp_path / "cache", LocalStore(store), disk_budget_bytes=10**9).ensure(
        "model-1.tar.gz"
    )
    reopened = ArtifactCache(tmp_path / "cache", LocalStore(store), disk_budget_bytes=10**9)
    assert reopened.targets() == ["model-1.tar.gz"]
    assert not reopened.ensure("model-1.tar.gz").downloaded


def test_disk_budget_deletes_least_recently_used_unpinned(store: Path, tmp_path: Path) -> None:
    probe = ArtifactCache(tmp_path / "probe", LocalStore(store), disk_budget_bytes=10**9)
    size = probe.ensure("model-0.tar.gz").artifact.size_bytes
    cache = ArtifactCache(tmp_path / "cache", LocalStore(store), disk_budget_bytes=int(2.5 * size))
    cache.ensure("model-0.tar.gz")
    cache.pin("model-0.tar.gz")  # loaded: must stay
    cache.ensure("model-1.tar.gz")
    cache.pin("model-1.tar.gz")
    cache.unpin("model-1.tar.gz")  # loaded, then unloaded: fair game
    cache.ensure("model-2.tar.gz")
    assert set(cache.targets()) == {"model-0.tar.gz", "model-2.tar.gz"}
    assert cache.used_bytes <= cache.disk_budget_bytes
    cache.unpin("model-0.tar.gz")
    cache.ensure("model-3.tar.gz")
    assert "model-0.tar.gz" not in cache.targets()


def test_missing_and_invalid_targets(store: Path, tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path / "cache", LocalStore(store), disk_budget_bytes=10**9)
    with pytest.raises(ModelNotFoundError):
        cache.ensure("nope.tar.gz")
    with pytest.raises(InvalidTargetError):
        cache.ensure("../store/model-0.tar.gz")


def test_hostile_archives_never_write_outside(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    escape = tmp_path / "escape"
    escape.mkdir()
    (escape / "target.txt").write_text("secret")
    cases = make_hostile(store, escape)
    cache = ArtifactCache(tmp_path / "cache", LocalStore(store), disk_budget_bytes=64 * 1024**2)
    before_tmp = files_under(tmp_path)
    outcomes: dict[str, str] = {}
    for target in cases:
        try:
            cache.ensure(target)
            outcomes[target] = "ok"
        except (UnsafeArchiveError, ValidationError) as exc:
            outcomes[target] = type(exc).__name__
            assert str(exc)
    assert outcomes["failing-init.tar.gz"] == "ok"  # only Triton can tell
    refused = [t for t, o in outcomes.items() if o != "ok"]
    assert len(refused) >= 10, outcomes
    assert files_under(escape) == {"target.txt"}
    assert (escape / "target.txt").read_text() == "secret"
    assert not (tmp_path / "evil.txt").exists() and not (tmp_path.parent / "evil.txt").exists()
    new = files_under(tmp_path) - before_tmp
    assert all(p.startswith("cache") for p in new), new
    leftovers = [p for p in os.listdir(cache.root) if p.startswith(".staging-")]
    assert leftovers == []


def test_root_layout_is_re_homed_for_any_launcher(tmp_path: Path) -> None:
    """Triton's root rule needs /opt/ml/models/<hash>/model as the url, so without a prepare
    hook (docker, external launchers) the root-layout model is served as served/model/."""
    import tarfile

    from mmelocal.testing.tiny_model import write_model

    store = tmp_path / "store"
    store.mkdir()
    model = write_model(tmp_path / "src")
    with tarfile.open(store / "root.tar.gz", "w:gz") as tar:
        for child in model.iterdir():
            tar.add(child, arcname=child.name)
    cache = ArtifactCache(tmp_path / "cache", LocalStore(store), disk_budget_bytes=10**9)
    art = cache.ensure("root.tar.gz").artifact
    assert art.serve_dir.name == "served"
    assert (art.serve_dir / "model" / "config.pbtxt").is_file()
    assert (art.serve_dir / "model" / "1" / "model.py").is_file()
    reopened = ArtifactCache(tmp_path / "cache", LocalStore(store), disk_budget_bytes=10**9)
    assert reopened.lookup("root.tar.gz").serve_dir == art.serve_dir  # type: ignore[union-attr]
    cache.close()


def _link_copy(layout: object, out_dir: Path) -> Path:
    """A ``prepare`` that derives ``served/`` as hard links, as the Python-runner copies do."""
    source = out_dir.parent / "model"
    for path in source.rglob("*"):
        dest = out_dir / path.relative_to(source)
        if path.is_dir():
            dest.mkdir(parents=True, exist_ok=True)
        else:
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.link(path, dest)
    return out_dir


def test_hard_linked_served_copies_are_counted_once(store: Path, tmp_path: Path) -> None:
    """DiskUtilization read 141-188 % when served/ (hard links) and model/ were both summed."""
    cache = ArtifactCache(tmp_path / "cache", LocalStore(store), disk_budget_bytes=10**9)
    art = cache.ensure("model-0.tar.gz", prepare=_link_copy).artifact
    assert art.serve_dir.name == "served"
    extracted = tree_size(art.entry_dir / "model")
    assert extracted > 0
    assert art.size_bytes == extracted  # served/ adds links, not blocks
    linked = sum(1 for p in art.serve_dir.rglob("*") if p.is_file() and p.stat().st_nlink == 2)
    assert linked > 0


def test_unpinning_over_the_budget_deletes_at_once(store: Path, tmp_path: Path) -> None:
    """Everything pinned may hold more than the budget; the moment a model unloads, its
    artifact goes (not at the next download)."""
    probe = ArtifactCache(tmp_path / "probe", LocalStore(store), disk_budget_bytes=10**9)
    size = probe.ensure("model-0.tar.gz").artifact.size_bytes
    cache = ArtifactCache(tmp_path / "cache", LocalStore(store), disk_budget_bytes=int(2.5 * size))
    for target in ("model-0.tar.gz", "model-1.tar.gz", "model-2.tar.gz"):
        cache.ensure(target)
        cache.pin(target)
    assert len(cache) == 3 and cache.used_bytes > cache.disk_budget_bytes
    cache.unpin("model-1.tar.gz")
    assert set(cache.targets()) == {"model-0.tar.gz", "model-2.tar.gz"}
    assert cache.used_bytes <= cache.disk_budget_bytes
    cache.close()  # the deletion ran off the caller's thread
    on_disk = {p.name for p in cache.root.iterdir() if not p.name.startswith(".")}
    assert on_disk == {target_key("model-0.tar.gz"), target_key("model-2.tar.gz")}
    assert not list(cache.root.glob(".trash-*"))
    # under the budget, an unpinned artifact stays (a later call is a cache hit)
    cache.unpin("model-0.tar.gz")
    assert "model-0.tar.gz" in cache.targets()


def test_an_artifact_handed_out_is_kept_until_its_load_pins_it(store: Path, tmp_path: Path) -> None:
    """Between ensure() and pin() the load may wait behind others: another model's unload
    or download must not delete the folder it is about to give Triton."""
    probe = ArtifactCache(tmp_path / "probe", LocalStore(store), disk_budget_bytes=10**9)
    size = probe.ensure("model-0.tar.gz").artifact.size_bytes
    cache = ArtifactCache(tmp_path / "cache", LocalStore(store), disk_budget_bytes=int(1.5 * size))
    cache.ensure("model-0.tar.gz")
    cache.pin("model-0.tar.gz")
    waiting = cache.ensure("model-1.tar.gz").artifact  # not pinned yet
    cache.unpin("model-0.tar.gz")  # over the budget: model-0 goes, model-1 stays
    cache.close()
    assert cache.targets() == ["model-1.tar.gz"]
    assert (waiting.serve_dir / "tiny" / "config.pbtxt").is_file()


def test_a_released_claim_lets_its_artifact_go_and_a_pinned_one_stays(
    store: Path, tmp_path: Path
) -> None:
    """A load that gives up before its pin releases its claim: over the budget, the
    artifact goes at once (as at an unpin); a claim already pinned stays pinned when its
    load's release comes; a claim released before its hand-out (the download still going
    on) claims nothing when the download ends."""
    probe = ArtifactCache(tmp_path / "probe", LocalStore(store), disk_budget_bytes=10**9)
    size = probe.ensure("model-0.tar.gz").artifact.size_bytes
    cache = ArtifactCache(tmp_path / "cache", LocalStore(store), disk_budget_bytes=int(1.5 * size))
    loaded, given_up, late = Claim(), Claim(), Claim()
    cache.ensure("model-0.tar.gz", claim=loaded)
    cache.pin("model-0.tar.gz", loaded)
    cache.release(loaded)  # the load's own release, after its pin
    cache.ensure("model-1.tar.gz", claim=given_up)  # over the budget: both held
    assert set(cache.targets()) == {"model-0.tar.gz", "model-1.tar.gz"}
    cache.release(given_up)
    cache.close()
    assert cache.targets() == ["model-0.tar.gz"]
    cache.release(late)
    art = cache.ensure("model-2.tar.gz", claim=late).artifact
    assert (art.claims, art.claimed_until_s, late.artifact) == (0, 0.0, None)
    cache.close()


def test_an_artifact_is_in_use_until_its_model_unloads(store: Path, tmp_path: Path) -> None:
    """The disk's least recently used artifact is the one whose model left first, not the
    one loaded first (a model loaded early and served until its unload counted as unused
    since its load, and its artifact went before one unused for longer)."""
    probe = ArtifactCache(tmp_path / "probe", LocalStore(store), disk_budget_bytes=10**9)
    size = probe.ensure("model-0.tar.gz").artifact.size_bytes
    cache = ArtifactCache(tmp_path / "cache", LocalStore(store), disk_budget_bytes=int(2.5 * size))
    cache.ensure("model-1.tar.gz")
    cache.pin("model-1.tar.gz")  # loaded first, served until the end
    cache.ensure("model-0.tar.gz")
    cache.pin("model-0.tar.gz")
    cache.unpin("model-0.tar.gz")  # unloaded early
    cache.unpin("model-1.tar.gz")
    cache.ensure("model-2.tar.gz")
    assert set(cache.targets()) == {"model-1.tar.gz", "model-2.tar.gz"}
    cache.close()


def test_an_artifact_two_loads_were_handed_is_kept_until_both_pin_it(
    store: Path, tmp_path: Path
) -> None:
    """Two instances load the same model (a hot model's second copy): the first one's pin,
    then unload, must not leave the folder the second is about to give Triton unclaimed
    (the first pin cleared every claim, and the unpin deleted it over the budget)."""
    probe = ArtifactCache(tmp_path / "probe", LocalStore(store), disk_budget_bytes=10**9)
    size = probe.ensure("model-0.tar.gz").artifact.size_bytes
    cache = ArtifactCache(tmp_path / "cache", LocalStore(store), disk_budget_bytes=int(1.5 * size))
    cache.ensure("model-0.tar.gz")
    cache.pin("model-0.tar.gz")  # loaded elsewhere: the cache is over its budget below
    first = cache.ensure("model-1.tar.gz").artifact
    second = cache.ensure("model-1.tar.gz").artifact
    assert first is second
    cache.pin("model-1.tar.gz")  # the first instance loads it...
    cache.unpin("model-1.tar.gz")  # ...and unloads it again
    cache.close()
    assert "model-1.tar.gz" in cache.targets()
    assert (second.serve_dir / "tiny" / "config.pbtxt").is_file()
    cache.pin("model-1.tar.gz")  # the second instance's load
    cache.unpin("model-1.tar.gz")  # once it unloads, the budget applies again
    cache.close()
    assert "model-1.tar.gz" not in cache.targets()
