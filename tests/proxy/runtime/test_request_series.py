"""The request series of one process (plain numbers, request_series.LocalFamilies) against
prometheus-client's own metrics (SharedFamilies, what the workers of ``serve --workers`` record
into): the same requests give the same exposition, sample for sample."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest

from crossfeed.proxy.runtime.request_series import TIME_BUCKETS, LocalFamilies, Record, SharedFamilies

# (route, model, status, key, duration, ttfb, usage, terminal)
REQUESTS = [
    ("/v1/responses", "m", 200, "none", 0.004, 0.001, {"in": 5, "out": 7}, "completed"),
    ("/v1/responses", "m", 200, "none", 0.005, 0.005, {"in": 1, "out": 0}, "completed"),  # on a bound
    ("/v1/responses", "m", 200, "none", 0.0051, None, None, "incomplete"),
    ("/v1/responses", "other", 200, "team", 31.0, 2.5, {"in": 3}, "completed"),
    ("/v1/chat/completions", "x", 400, "none", 0.0, None, None, None),
    ("/v1/chat/completions", "x", 502, "none", 700.0, 0.2, {}, "failed"),  # past the last bound
    ("/v1/chat/completions", "x", 502, "none", 1.0, None, None, "failed"),
    ("/metrics", "none", 200, "none", 0.0001, None, None, None),
]


def exposition(registry: CollectorRegistry) -> list[str]:
    return sorted(generate_latest(registry).decode().splitlines())


def test_one_process_exposes_what_prometheus_client_would() -> None:
    local_registry, shared_registry = CollectorRegistry(), CollectorRegistry()
    local = LocalFamilies()
    local_registry.register(local)
    shared = SharedFamilies(shared_registry)
    records: list[dict[tuple[str, str, int, str], Record]] = [{}, {}]
    for route, model, status, key, duration, ttfb, usage, terminal in REQUESTS:
        for families, recorded in zip((local, shared), records, strict=True):
            labels = (route, model, status, key)
            if labels not in recorded:
                recorded[labels] = families.series(*labels)
            recorded[labels](duration, ttfb, usage, terminal)
    got, want = exposition(local_registry), exposition(shared_registry)
    assert got == want
    assert 'crossfeed_request_duration_seconds_bucket{le="0.005",route="/v1/responses"} 2.0' in got
    assert 'crossfeed_request_duration_seconds_bucket{le="+Inf",route="/v1/chat/completions"} 3.0' in got
    assert 'crossfeed_tokens_total{direction="in",model="m"} 6.0' in got
    assert not any(line.startswith('crossfeed_time_to_first_byte_seconds_count{route="/metrics"') for line in got)


def test_a_series_is_exported_only_once_recorded() -> None:
    registry = CollectorRegistry()
    local = LocalFamilies()
    registry.register(local)
    assert [line for line in exposition(registry) if not line.startswith("#")] == []
    local.series("/v1/responses", "m", 200, "none")  # looked up, nothing recorded yet
    samples = [line for line in exposition(registry) if not line.startswith("#")]
    assert samples == sorted(
        [
            'crossfeed_requests_total{key="none",model="m",route="/v1/responses",status="200"} 0.0',
            *(
                f'crossfeed_request_duration_seconds_bucket{{le="{le}",route="/v1/responses"}} 0.0'
                for le in [*(str(float(b)) for b in TIME_BUCKETS), "+Inf"]
            ),
            'crossfeed_request_duration_seconds_count{route="/v1/responses"} 0.0',
            'crossfeed_request_duration_seconds_sum{route="/v1/responses"} 0.0',
        ]
    )
