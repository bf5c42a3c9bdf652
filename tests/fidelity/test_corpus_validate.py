"""``validate`` on the fidelity corpus: each tarball gets the platform's verdict and rule."""

from __future__ import annotations

from pathlib import Path

import pytest
from fidelity_corpus import CASES, NAMESPACING_OFF, SHARED_A, SHARED_B, Case, build_store

from mmelocal.builder.validate import validate_path


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corpus") / "store"
    build_store(root)
    return root


def test_corpus_has_the_cases_the_issue_names() -> None:
    assert len(CASES) >= 20
    assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_validate_gives_the_platform_verdict(store: Path, case: Case) -> None:
    report = validate_path(store / case.target)
    assert report.kind == "tarball"
    codes = {p.code for p in report.problems}
    assert report.ok is case.validate_ok, (case.rule, report.to_json())
    assert set(case.codes) <= codes, (case.rule, report.to_json())
    if not case.validate_ok:
        text = " ".join(p.message for p in report.errors)
        for fragment in case.error_text:
            # the host's and the container's own words are the emulator's, not validate's
            if fragment not in ("GPU", "docker", "version", "failed to poll from model repository"):
                assert fragment in text, (fragment, text)


def test_shared_step_names_are_a_warning_only_without_namespacing(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    for case in (SHARED_A, SHARED_B):
        (shared / case.target).write_bytes((store / case.target).read_bytes())
    # SageMaker's entrypoint turns model namespacing on: each tarball's steps are its own
    report = validate_path(shared)
    assert report.kind == "store" and report.ok
    assert not [p for p in report.problems if p.code == "store.step_collision"]
    report = validate_path(shared, model_namespacing=False)
    warnings = [p for p in report.problems if p.code == "store.step_collision"]
    assert len(warnings) == 1 and warnings[0].severity == "warning"
    assert "'shared_pre'" in warnings[0].message
    assert SHARED_A.target in warnings[0].message and SHARED_B.target in warnings[0].message
    assert report.ok
    # the CLI takes the endpoint's environment, as serve and deploy do
    from mmelocal.cli.main import main

    env = [f"--env={k}={v}" for k, v in NAMESPACING_OFF.items()]
    assert main(["validate", "--json", str(shared), *env]) == 0
    assert "store.step_collision" in capsys.readouterr().out
    assert main(["validate", "--json", str(shared)]) == 0
    assert "store.step_collision" not in capsys.readouterr().out


def test_validate_the_whole_store_names_every_bad_tarball(store: Path) -> None:
    report = validate_path(store)
    assert report.kind == "store"
    bad = {p.path.split(":")[0] for p in report.errors}
    assert bad == {c.target for c in CASES if not c.validate_ok}


@pytest.mark.parametrize("name", ["root-layout", "ensemble-2"])
def test_cli_validate_exits_0_on_the_two_cases_of_the_issue(
    store: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from mmelocal.cli.main import main

    assert main(["validate", str(store / f"{name}.tar.gz")]) == 0, capsys.readouterr().out


def test_package_repacks_every_served_case_into_a_tarball_validate_passes(
    store: Path, tmp_path: Path
) -> None:
    from mmelocal.builder.mme_layout import read_layout
    from mmelocal.builder.package import package_model
    from mmelocal.builder.tarball import safe_extract

    for case in CASES:
        if not case.validate_ok:
            continue
        out = package_model(store / case.target, tmp_path / case.name)
        assert validate_path(out).ok, case.name
        layout = read_layout(safe_extract(out, tmp_path / f"{case.name}-x"))
        assert layout.rule in ("folder", "ensemble"), case.name  # the seed layout


def test_warmup_data_folder_is_not_an_ignored_folder(store: Path) -> None:
    report = validate_path(store / "warmup-files.tar.gz")
    assert not [p for p in report.problems if p.code == "layout.ignored_folder"]


def test_a_missing_warmup_data_file_is_an_error(store: Path, tmp_path: Path) -> None:
    from mmelocal.builder.tarball import safe_extract

    root = safe_extract(store / "warmup-files.tar.gz", tmp_path / "x")
    (root / "tiny" / "warmup" / "INPUT0").unlink()
    report = validate_path(root / "tiny")
    assert [p.code for p in report.errors] == ["config.warmup"]
    assert "warmup/INPUT0" in report.errors[0].message
