"""Reading a process's own /healthz and /metrics in tests (runtime/metrics_server.py)."""

from __future__ import annotations

import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def get(url: str) -> tuple[int, bytes]:
    """Status and body of a GET; an HTTP error is its status and body, no answer is 0."""
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return 0, b""


def samples(text: bytes) -> dict[str, float]:
    """``name{labels}`` → value of every sample (labels sorted), ``name`` when unlabelled."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text.decode()):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out
