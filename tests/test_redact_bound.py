"""Issue 39: the log scrubber's registry stays bounded in a worker that runs for months. OAuth tokens leave it once
they have expired (plus a grace of at most their lifetime); past MAX_EXPIRING_FORMS the soonest to expire leave
first; configured values stay. The soak with timings is bench/redact_soak.py."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from mcp_temporal_tasks.activities.wire import redact

pytestmark = pytest.mark.fast


@pytest.fixture(autouse=True)
def own_registry() -> Iterator[None]:
    saved = dict(redact._expiry)
    yield
    with redact._lock:
        redact._expiry.clear()
        redact._expiry.update(saved)
        redact._rebuild()
        redact._publish()


def test_expired_tokens_leave_and_configured_values_stay() -> None:
    redact.register(["configured-header-value-1"])
    for n in range(3000):
        redact.register([f"token-{n:06d}-abcdef"], lifetime_s=0.05)
    assert "token-002999-abcdef" in redact.registered()
    assert redact.scrub("echo token-002999-abcdef") == "echo [redacted]"
    time.sleep(0.2)  # lifetime 0.05 s + a grace of at most the lifetime again
    left = redact.registered()
    assert not any(f.startswith("token-") for f in left), len(left)
    assert "configured-header-value-1" in left
    assert (
        redact.scrub("echo token-002999-abcdef and configured-header-value-1")
        == "echo token-002999-abcdef and [redacted]"
    )


def test_the_registry_is_bounded_whatever_lifetimes_a_server_claims() -> None:
    for n in range(redact.MAX_EXPIRING_FORMS + 1000):
        redact.register([f"long-{n:06d}-abcdef"], lifetime_s=10**9 + n)
    ours = [f for f in redact.registered() if f.startswith("long-")]
    assert len(ours) <= redact.MAX_EXPIRING_FORMS
    assert f"long-{redact.MAX_EXPIRING_FORMS + 999:06d}-abcdef" in ours  # the latest (expiring last) stay


def test_a_token_registered_again_keeps_its_later_expiry_and_a_permanent_value_stays_permanent() -> None:
    redact.register(["same-value-xyz"], lifetime_s=0.05)
    redact.register(["same-value-xyz"], lifetime_s=60)
    redact.register(["permanent-xyz"])
    redact.register(["permanent-xyz"], lifetime_s=0.01)
    time.sleep(0.15)
    assert {"same-value-xyz", "permanent-xyz"} <= redact.registered()
