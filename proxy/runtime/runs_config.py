"""The ``[runs]`` section: background responses (``background: true``; proxy/turns/background.py)
and the detached streamed turns of ``detach_on_disconnect`` (proxy/turns/detach.py). It lives on
the floor beside the rest of the configuration."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Runs(BaseModel):
    """``[runs]``: how the process running a response proves it is alive, how fast it sees a
    cancel, and whether a streamed stored turn outlives its client."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    lease_seconds: float = Field(
        10.0, gt=0, description="a run whose process has not renewed its lease for this long is failed"
    )
    renew_seconds: float = Field(2.0, gt=0, description="how often the running process renews its lease")
    cancel_poll_seconds: float = Field(0.25, gt=0, description="how often the running process checks for a cancel")
    detach_on_disconnect: bool = Field(
        False,
        description="a streamed create with store true keeps running when its client drops (resumable), "
        "and an identical resend joins it",
    )
    join_seconds: int = Field(
        600,
        ge=1,
        description="how long after its end a detached turn is still joined by an identical resend (while it runs: always)",
    )

    @model_validator(mode="after")
    def _renewed_in_time(self) -> Runs:
        if self.renew_seconds >= self.lease_seconds:
            raise ValueError("renew_seconds must be less than lease_seconds (the lease would run out between renewals)")
        return self
