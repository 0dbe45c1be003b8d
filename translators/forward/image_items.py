"""Hosted image generation as the chat backend sees it (pure): the function offered for the
``image_generation`` tool, and what a request asks of it.

The function is ``image_generation`` (``crossfeed_image_generation`` when the client declares a
function of that name itself) and takes one argument, the ``prompt``. Everything else (the
size, the partial images) is the client's tool definition, read here once by the request
mapping for the proxy's image runner (proxy/turns/hosted/images.py), which checks it against
the operator's ``[images]`` bounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

IMAGE_FUNCTION = "image_generation"
CLASH_NAME = "crossfeed_image_generation"
HOSTED_TYPE = "image_generation"

DESCRIPTION = (
    "Generate an image from a text description; the image is shown to the user, and you get a short "
    "confirmation (never the image itself). Describe the whole picture in the prompt: subject, style, "
    "composition, colours, any text it must show."
)


@dataclass(frozen=True, slots=True)
class ImageRequest:
    """The request's ``image_generation`` tool, as sent (the proxy checks its values)."""

    index: int  # i of tools[i]
    function: str  # the chat function offered for it
    size: Any  # the tool's size as sent (None, "auto" or WIDTHxHEIGHT)
    partial_images: Any  # the tool's partial_images as sent (None or 0..3)
    forced: bool  # tool_choice names the hosted tool: the first leg must call it


def image_request(tools: Any, tool_choice: Any) -> ImageRequest | None:
    """The first ``image_generation`` tool of ``tools``, or None."""
    if not isinstance(tools, list):
        return None
    found = next(((i, t) for i, t in enumerate(tools) if isinstance(t, dict) and t.get("type") == HOSTED_TYPE), None)
    if found is None:
        return None
    index, tool = found
    clash = any(isinstance(t, dict) and t.get("type") == "function" and t.get("name") == IMAGE_FUNCTION for t in tools)
    return ImageRequest(
        index=index,
        function=CLASH_NAME if clash else IMAGE_FUNCTION,
        size=tool.get("size"),
        partial_images=tool.get("partial_images"),
        forced=isinstance(tool_choice, dict) and tool_choice.get("type") == HOSTED_TYPE,
    )


def image_function(name: str) -> dict[str, Any]:
    """The chat function the model calls to make an image."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": DESCRIPTION,
            "parameters": {
                "type": "object",
                "properties": {"prompt": {"type": "string", "description": "what the image shows, in detail"}},
                "required": ["prompt"],
            },
        },
    }
