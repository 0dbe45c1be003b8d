"""The weather task the real-backend tests ask (a tool in both APIs' shapes) and the collector of a
streamed answer."""

from __future__ import annotations

from typing import Any

WEATHER_PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": WEATHER_PARAMS,
}


CHAT_WEATHER = {
    "type": "function",
    "function": {"name": "get_weather", "description": "The weather in a city", "parameters": WEATHER_PARAMS},
}


async def collect(stream: Any) -> tuple[list[str], str, Any]:
    types, text, final = [], [], None
    async for ev in stream:
        types.append(ev.type)
        if ev.type == "response.output_text.delta":
            text.append(ev.delta)
        if ev.type in ("response.completed", "response.incomplete", "response.failed"):
            final = ev.response
    return types, "".join(text), final
