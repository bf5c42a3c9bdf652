"""Metrics under the CloudWatch names: no server."""

from __future__ import annotations

from mmelocal.emulator.metrics import (
    COUNTERS,
    GAUGES,
    SUMMARIES,
    Metrics,
    Summary,
    parse_prometheus,
)

CLOUDWATCH = {
    "LoadedModelCount",
    "ModelCacheHit",
    "ModelLoadingWaitTime",
    "ModelLoadingTime",
    "ModelUnloadingTime",
    "ModelDownloadingTime",
    "ModelLatency",
    "OverheadLatency",
    "Invocations",
    "Invocation4XXErrors",
    "Invocation5XXErrors",
    "MemoryUtilization",
    "GPUMemoryUtilization",
    "GPUUtilization",
    "CPUUtilization",
    "DiskUtilization",
}


def test_every_cloudwatch_name_is_exposed() -> None:
    assert set(SUMMARIES) | set(COUNTERS) | set(GAUGES) >= CLOUDWATCH


def test_summary_window_is_bounded() -> None:
    s = Summary(window=10)
    for v in range(100):
        s.observe(float(v))
    assert s.count == 100 and len(s.recent) == 10
    assert s.mean == 49.5


def test_invocation_counters_and_cache_hit_ratio() -> None:
    m = Metrics(endpoint_name="ep")
    for status in (200, 200, 400, 424, 503):
        m.record_invocation(status)
    for hit in (1.0, 1.0, 0.0, 1.0):
        m.observe("ModelCacheHit", hit)
    m.observe("ModelLatency", 750.0)
    snap = m.snapshot()
    assert snap["Invocations"] == 5
    assert snap["Invocation4XXErrors"] == 2
    assert snap["Invocation5XXErrors"] == 1
    assert snap["ModelCacheHit"]["mean"] == 0.75  # type: ignore[index]


def test_served_and_unserved_invocations_count_the_same_way() -> None:
    """CloudWatch's meaning for both: the model's status (Triton's 500 is a 5xx even though
    the caller gets a 424 ModelError)."""
    served, unserved = Metrics(), Metrics()
    for status in (200, 400, 404, 500, 507):
        served.record_served(status, 0.0, 0.001, cache_hit=True)
        unserved.record_invocation(status)
    names = ("Invocations", "Invocation4XXErrors", "Invocation5XXErrors")
    assert [served.counters[n] for n in names] == [5, 2, 2]
    assert [unserved.counters[n] for n in names] == [5, 2, 2]


def test_prometheus_text_round_trip() -> None:
    m = Metrics(endpoint_name='e"p')
    m.record_invocation(200)
    m.observe("ModelLatency", 1000.0)
    m.observe("ModelLatency", 3000.0)
    text = m.render({"LoadedModelCount": 3, "DiskUtilization": 12.5})
    assert "# TYPE ModelLatency summary" in text
    assert "# TYPE Invocations counter" in text
    assert "# TYPE LoadedModelCount gauge" in text
    parsed = parse_prometheus(text)
    labels = 'EndpointName="e\\"p",VariantName="AllTraffic"'
    assert parsed[f"Invocations{{{labels}}}"] == 1
    assert parsed[f"ModelLatency_sum{{{labels}}}"] == 4000
    assert parsed[f"ModelLatency_count{{{labels}}}"] == 2
    assert parsed[f"LoadedModelCount{{{labels}}}"] == 3
    assert parsed[f"DiskUtilization{{{labels}}}"] == 12.5


def test_loading_wait_is_a_sample_for_every_call_that_waited() -> None:
    """ModelLoadingWaitTime: "the interval of time that an invocation request has waited
    for the target model to be downloaded, or loaded, or both". A miss is a sample (even
    a wait of 0: its model was loading); a hit whose recovery waited for a reload (Triton
    answered 404 or 507, the emulator loaded the model again) waited too; a plain hit
    did not."""
    m = Metrics()
    m.record_served(200, 0.0, 0.001, cache_hit=False, wait_s=0.5)
    m.record_served(200, 0.0, 0.001, cache_hit=True, wait_s=0.25)
    m.record_served(200, 0.0, 0.001, cache_hit=True)
    wait = m.snapshot()["ModelLoadingWaitTime"]
    assert wait["count"] == 2  # type: ignore[index]
    assert wait["mean"] == 375_000.0  # type: ignore[index]
