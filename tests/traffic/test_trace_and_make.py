"""Traces as data (CSV / JSON lines, checked row by row) and synthetic traces."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from mmelocal.errors import UserInputError
from mmelocal.traffic.make import Popularity, fill_store, make_trace, parse_hot_set
from mmelocal.traffic.trace import Trace, read_trace, write_trace


def _poisson_margin(mean: float) -> float:
    """Six standard deviations of a Poisson count: a bound no correct generator crosses."""
    return 6 * math.sqrt(mean)


def test_csv_and_jsonl_round_trip(tmp_path: Path) -> None:
    trace = make_trace(models=5, rate_rps=50, duration_s=4, seed=1)
    for name in ("t.csv", "t.jsonl"):
        back = read_trace(write_trace(trace, tmp_path / name))
        assert len(back) == len(trace)
        np.testing.assert_allclose(back.times_s, trace.times_s, atol=1e-6)
        assert [m for _, m in back.rows()] == [m for _, m in trace.rows()]


def test_payload_bytes_column_is_read(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("timestamp,target_model,payload_bytes\n0.5,a.tar.gz,100\n1.0,b.tar.gz,7\n")
    trace = read_trace(path)
    assert trace.models == ("a.tar.gz", "b.tar.gz")
    assert trace.payload_bytes is not None and trace.payload_bytes.tolist() == [100, 7]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("timestamp,target_model\n1.0,a\n0.5,b\n", "line 3: timestamp 0.5 comes before"),
        ("timestamp,target_model\n-1,a\n", "line 2: timestamp -1.0 must be >= 0"),
        ("timestamp,target_model,user\n1,a,x\n", "line 1: unknown column 'user'"),
        ("model,timestamp\na,1\n", "line 1: the columns must start with timestamp,target_model"),
        ("timestamp,target_model\nsoon,a\n", "line 2: timestamp 'soon' is not a number"),
        ("timestamp,target_model,payload_bytes\n1,a,-3\n", "line 2: payload_bytes must be >= 0"),
        ("timestamp,target_model\n1,a,extra\n", "line 2: expected 2 fields"),
        ("timestamp,target_model\n", "the trace has no requests"),
    ],
)
def test_bad_csv_names_the_line(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(UserInputError, match=expected):
        read_trace(path)


def test_bad_jsonl_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    rows = [
        {"timestamp": 0.1, "target_model": "a"},
        {"timestamp": 0.2, "target_model": "b", "x": 1},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.raises(UserInputError, match="line 2: unknown column 'x'"):
        read_trace(path)


def test_rate_and_zipf_popularity() -> None:
    rate, duration, models = 400.0, 50.0, 20
    trace = make_trace(
        models=models, rate_rps=rate, duration_s=duration, popularity=Popularity(zipf_s=1.2), seed=3
    )
    mean = rate * duration
    assert abs(len(trace) - mean) < _poisson_margin(mean)
    assert np.all(np.diff(trace.times_s) >= 0) and trace.times_s[-1] <= duration
    counts = np.bincount(trace.model_ids, minlength=models)
    expected = Popularity(zipf_s=1.2).weights(models) * len(trace)
    # each count is binomial: within 6 standard deviations of its expectation
    assert np.all(np.abs(counts - expected) < 6 * np.sqrt(expected) + 1)


def test_hot_set_and_its_shift() -> None:
    trace = make_trace(
        models=20,
        rate_rps=500,
        duration_s=20,
        popularity=parse_hot_set("4:0.9"),
        shift_at_s=10,
        seed=5,
    )
    before = trace.model_ids[trace.times_s < 10]
    after = trace.model_ids[trace.times_s >= 10]
    share_before = np.isin(before, range(4)).mean()
    offset = Popularity(kind="hot-set", hot_models=4, hot_fraction=0.9).shift_offset(20)
    share_after = np.isin(after, range(offset, offset + 4)).mean()
    tolerance = 6 * math.sqrt(0.9 * 0.1 / len(after))
    assert abs(share_before - 0.9) < tolerance and abs(share_after - 0.9) < tolerance
    assert np.isin(after, range(4)).mean() < 0.1 + tolerance  # the old hot set went cold


@pytest.mark.parametrize(("shape", "first", "last"), [("steps", 0.5, 1.0), ("diurnal", 0.5, 0.5)])
def test_shapes(shape: str, first: float, last: float) -> None:
    rate, duration = 1000.0, 40.0
    trace = make_trace(
        models=3, rate_rps=rate, duration_s=duration, shape=shape, period_s=duration, seed=2
    )
    mean = rate * duration
    assert abs(len(trace) - mean) < _poisson_margin(mean)  # the shapes keep the mean rate
    tenth = duration / 40
    for at, factor in ((0.0, first), (duration - tenth, last)):
        n = int(((trace.times_s >= at) & (trace.times_s < at + tenth)).sum())
        expected = rate * tenth * factor
        # the diurnal curve moves inside a bin: allow its change over the bin (<= 4 %)
        assert abs(n - expected) < _poisson_margin(expected) + 0.04 * rate * tenth


def test_same_seed_same_trace_and_bad_options() -> None:
    a = make_trace(models=4, rate_rps=10, duration_s=5, seed=9)
    b = make_trace(models=4, rate_rps=10, duration_s=5, seed=9)
    assert np.array_equal(a.times_s, b.times_s) and np.array_equal(a.model_ids, b.model_ids)
    with pytest.raises(UserInputError, match="more hot models than --models 4"):
        make_trace(models=4, rate_rps=1, duration_s=1, popularity=parse_hot_set("5:0.5"))
    with pytest.raises(UserInputError, match="--hot-set must be K:FRACTION"):
        parse_hot_set("5")
    with pytest.raises(UserInputError, match="--shift-at must fall inside"):
        make_trace(models=4, rate_rps=1, duration_s=10, shift_at_s=10)


def test_fill_store_links_every_name(tmp_path: Path) -> None:
    tarball = tmp_path / "m.tar.gz"
    tarball.write_bytes(b"x")
    assert fill_store(tmp_path / "store", tarball, ["a.tar.gz", "team/b.tar.gz"]) == 2
    assert (tmp_path / "store" / "team" / "b.tar.gz").read_bytes() == b"x"
    assert fill_store(tmp_path / "store", tarball, ["a.tar.gz"]) == 0


def test_a_trace_saved_with_a_byte_order_mark_reads(tmp_path: Path) -> None:
    """Spreadsheets and Windows tools save UTF-8 with a byte order mark: the header is
    still timestamp,target_model (and a JSON-lines trace is still JSON lines)."""
    csv_path, jsonl_path = tmp_path / "t.csv", tmp_path / "t.jsonl"
    csv_path.write_bytes(b"\xef\xbb\xbftimestamp,target_model\r\n0.5,a.tar.gz\r\n")
    jsonl_path.write_bytes(b'\xef\xbb\xbf{"timestamp": 0.5, "target_model": "a.tar.gz"}\n')
    for path in (csv_path, jsonl_path):
        trace = read_trace(path)
        assert trace.models == ("a.tar.gz",) and trace.times_s.tolist() == [0.5]


def test_a_trace_that_is_not_utf8_is_refused_with_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes("timestamp,target_model\n0.5,modèle.tar.gz\n".encode("latin-1"))
    with pytest.raises(UserInputError, match=r"t\.csv is not UTF-8 text .*save it as UTF-8"):
        read_trace(path)


def test_unix_times_are_refused_with_what_to_do(tmp_path: Path) -> None:
    """Timestamps copied from a log without subtracting the first: replay would wait 55
    years for the first request (and its rate check count requests in 1.7e9 one-second
    bins); the trace is refused with the fix."""
    path = tmp_path / "t.csv"
    path.write_text("timestamp,target_model\n1732611234.5,a\n1732611235.0,b\n")
    with pytest.raises(UserInputError, match=r"line 2: timestamp 1\.73261e\+09 .*Unix time"):
        read_trace(path)
    path.write_text("timestamp,target_model\n0,a\n3600,b\n")  # an hour from the start is fine
    assert read_trace(path).duration_s == 3600


@pytest.mark.parametrize(
    ("times", "ids", "expected"),
    [
        ([1.0, 0.5], [0, 0], r"request 1 \(times_s\[1\]\): timestamp 0\.5 comes before"),
        ([1.7e9, 1.7e9 + 1], [0, 0], r"request 0 \(times_s\[0\]\): timestamp 1\.7e\+09 .*Unix"),
        ([0.0, float("nan")], [0, 0], r"request 1 \(times_s\[1\]\): timestamp nan must be >= 0"),
        ([-1.0, 0.0], [0, 0], r"request 0 \(times_s\[0\]\): timestamp -1\.0 must be >= 0"),
        ([0.0, 1.0], [0, 1], r"model_ids\[1\] is 1, not an index into the 1 model name"),
        ([0.0], [0, 0], r"times_s has 1 request\(s\) and model_ids 2"),
    ],
)
def test_a_trace_built_in_python_is_checked_as_a_file_is(
    times: list[float], ids: list[int], expected: str
) -> None:
    with pytest.raises(UserInputError, match=expected):
        Trace(times_s=np.asarray(times), model_ids=np.asarray(ids, dtype=np.int32), models=("a",))


def test_a_python_trace_refuses_fractional_payloads_and_invalid_targets() -> None:
    def make(models: tuple[str, ...], payload: np.ndarray | None = None) -> Trace:
        return Trace(
            times_s=np.zeros(2),
            model_ids=np.zeros(2, dtype=np.int32),
            models=models,
            payload_bytes=payload,
        )

    with pytest.raises(
        UserInputError,
        match=r"payload_bytes must be a 1-D array of whole bytes \(integers\), got 1-D float64",
    ):
        make(("a",), np.asarray([3.7, 1.0]))
    with pytest.raises(UserInputError, match=r"request 1 \(payload_bytes\[1\]\).* >= 0, got -1"):
        make(("a",), np.asarray([3, -1]))
    with pytest.raises(UserInputError, match=r"models\[0\] 'a\\x00b': TargetModel .*control"):
        make(("a\x00b",))
    with pytest.raises(UserInputError, match=r"models\[0\] 'xxx.*at most 1024 characters"):
        make(("x" * 1025,))
    assert make(("team/a.tar.gz",), np.asarray([3, 0])).payload_bytes is not None


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ({"timestamp": True, "target_model": "a"}, "line 2: timestamp True is not a number"),
        (
            {"timestamp": 1, "target_model": "a", "payload_bytes": 3.7},
            "line 2: payload_bytes 3.7 is not an integer",
        ),
        (
            {"timestamp": 1, "target_model": "a", "payload_bytes": True},
            "line 2: payload_bytes True is not an integer",
        ),
        ({"timestamp": 1, "target_model": 7}, "line 2: target_model 7 is not a string"),
        ({"timestamp": 1, "target_model": "x" * 1025}, "line 2: TargetModel must be at most 1024"),
        ({"timestamp": 1, "target_model": "a\u0007"}, "line 2: TargetModel 'a.x07' contains"),
    ],
)
def test_jsonl_values_of_the_wrong_kind_are_refused(
    tmp_path: Path, row: dict[str, object], expected: str
) -> None:
    path = tmp_path / "t.jsonl"
    first = {"timestamp": 0.5, "target_model": "a"}
    if "payload_bytes" in row:
        first["payload_bytes"] = 1
    path.write_text(json.dumps(first) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(UserInputError, match=expected):
        read_trace(path)


def test_an_invalid_target_in_a_csv_is_refused_before_any_replay(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("timestamp,target_model\n0,a\n1,b\x01c\n2,a\n")
    with pytest.raises(UserInputError, match=r"t\.csv line 3: TargetModel 'b\\x01c' contains"):
        read_trace(path)
    # the first bad line is named whatever the kind of fault: the order (line 3) before the
    # target (line 4)
    path.write_text("timestamp,target_model\n1,a\n0,a\n2,b\x01c\n")
    with pytest.raises(UserInputError, match=r"line 3: timestamp 0 comes before"):
        read_trace(path)
    path.write_text("timestamp,target_model\n1,a\n0,a\nsoon,a\n")
    with pytest.raises(UserInputError, match=r"line 3: timestamp 0 comes before"):
        read_trace(path)
