"""A local OTLP/HTTP trace receiver: what a collector would get from crossfeed's tracing.

``POST /v1/traces`` takes an ``ExportTraceServiceRequest`` (protobuf, as the OTLP/HTTP exporter
sends it), decodes it with ``opentelemetry-proto`` and keeps every span as a ``Span``: name, kind,
ids, parent id, status and attributes as plain Python values; and each request's headers (what
``OTEL_EXPORTER_OTLP_HEADERS`` added). Needs the ``otel`` extra's
``opentelemetry-proto`` (installed with the ``test`` extra).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}


@dataclass
class Span:
    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_id: str
    status: int  # 0 unset, 1 ok, 2 error
    attributes: dict[str, Any]
    resource: dict[str, Any] = field(default_factory=dict)
    start_ns: int = 0
    end_ns: int = 0


def value(v: AnyValue) -> Any:
    which = v.WhichOneof("value")
    if which == "array_value":
        return [value(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return {kv.key: value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, which) if which else None


class OtlpReceiver:
    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.requests = 0
        self.headers: list[dict[str, str]] = []  # each export request's headers, names in lower case
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/traces", self._traces)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _traces(self, request: web.Request) -> web.Response:
        assert request.content_type == "application/x-protobuf", request.content_type
        req = ExportTraceServiceRequest()
        req.ParseFromString(await request.read())
        self.requests += 1
        self.headers.append({k.lower(): v for k, v in request.headers.items()})
        for rs in req.resource_spans:
            resource = {kv.key: value(kv.value) for kv in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    self.spans.append(
                        Span(
                            name=s.name,
                            kind=KINDS.get(s.kind, str(s.kind)),
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_id=s.parent_span_id.hex(),
                            status=s.status.code,
                            attributes={kv.key: value(kv.value) for kv in s.attributes},
                            resource=resource,
                            start_ns=s.start_time_unix_nano,
                            end_ns=s.end_time_unix_nano,
                        )
                    )
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(), content_type="application/x-protobuf"
        )

    async def wait_for(self, count: int, timeout: float = 10.0) -> list[Span]:
        """The spans once at least ``count`` are in."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while len(self.spans) < count and loop.time() < end:
            await asyncio.sleep(0.02)
        return self.spans
