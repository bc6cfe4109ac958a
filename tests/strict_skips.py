"""pytest plugin: any skipped test fails the session, so a missing dependency is never a silent pass."""

from __future__ import annotations

import pytest

_skipped: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped:
        _skipped.append(
            f"{report.nodeid}: {report.longrepr[-1] if isinstance(report.longrepr, tuple) else report.longrepr}"
        )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _skipped and session.exitstatus == 0:
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter: object) -> None:
    if _skipped:
        tr = terminalreporter
        tr.section("skipped tests fail this run")  # type: ignore[attr-defined]
        for line in _skipped:
            tr.write_line(line)  # type: ignore[attr-defined]
