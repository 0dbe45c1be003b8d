"""The ``[images]`` section: the images backend crossfeed runs the hosted ``image_generation``
tool on (proxy/turns/hosted/images.py). It lives on the floor beside the rest of the
configuration. Unset (no ``backend_url``), a request carrying the tool is refused with a 400.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

SIZE = re.compile(r"[1-9][0-9]{1,4}x[1-9][0-9]{1,4}")


class ImagesConfig(BaseModel):
    """``[images]``: an OpenAI-compatible ``POST {backend_url}/images/generations`` (LocalAI,
    vLLM-omni, a ComfyUI bridge, OpenAI itself)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    backend_url: str | None = Field(
        None,
        description="base URL of the images API, e.g. http://127.0.0.1:8080/v1 "
        "(unset: a request with the image_generation tool is refused, 400)",
    )
    api_key_env: str | None = Field(None, min_length=1, description="env var holding the images API's key (Bearer)")
    model: str | None = Field(None, min_length=1, description="the model sent to the backend (unset: none is sent)")
    timeout_seconds: float = Field(300.0, gt=0, description="one image, from the request to its last byte")
    sizes: tuple[str, ...] = Field(
        ("1024x1024", "1024x1536", "1536x1024"),
        min_length=1,
        description="the sizes a client may ask for (WIDTHxHEIGHT); any other is refused, 400",
    )
    default_size: str | None = Field(None, description="the size of an image whose tool asks none (or auto)")
    max_calls: int = Field(4, ge=1, le=50, description="images made in one response")
    stream: bool = Field(
        False, description="the backend streams partial images (stream: true, partial_images), as OpenAI's does"
    )
    max_response_bytes: int = Field(
        32 * 1024 * 1024, ge=1024, description="a backend answer (or stream) longer than this fails the image"
    )

    @field_validator("backend_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return v.rstrip("/") if v else v

    @field_validator("sizes")
    @classmethod
    def _sizes(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        bad = [s for s in v if not SIZE.fullmatch(s)]
        if bad:
            raise ValueError(f"each size is WIDTHxHEIGHT (like 1024x1024), got {bad[0]!r}")
        return v

    @model_validator(mode="after")
    def _default_in_sizes(self) -> ImagesConfig:
        if self.default_size is not None and self.default_size not in self.sizes:
            raise ValueError(f"default_size {self.default_size!r} is not one of sizes {list(self.sizes)}")
        return self

    @property
    def size(self) -> str:
        """The size of an image whose tool asks none."""
        return self.default_size or self.sizes[0]

    @property
    def endpoint(self) -> str:
        return f"{self.backend_url}/images/generations"
