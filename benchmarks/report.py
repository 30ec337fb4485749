"""Markdown tables from the JSON lines that ``run.py`` writes.

    python benchmarks/report.py benchmarks/results/cpu-*.jsonl
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

COLUMNS = [
    ("closest hit ms", "closest_all_ms"),
    ("Minimal ms", "closest_minimal_ms"),
    ("fwd+bwd ms", "forward_backward_ms"),
    ("update ms", "update_ms"),
    ("update + Minimal ms", "update_closest_ms"),
    ("build ms", "build_ms"),
    ("peak MiB", "peak_memory_bytes"),
    ("Mrays/s", "closest_all_rays_per_s"),
]


def _fmt(key: str, value) -> str:
    if value is None:
        return "—"
    if key == "peak_memory_bytes":
        return f"{value / 2**20:.1f}"
    if key.endswith("rays_per_s"):
        return f"{value / 1e6:.1f}"
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def _agree(record: dict) -> str:
    a = record.get("agreement")
    if not a:
        return "—"
    if a.get("is_reference"):
        return "reference"
    mark = "ok" if a["ok"] else "**NO**"
    graze = f", {a['t_grazing_exempt']} grazing" if a.get("t_grazing_exempt") else ""
    return f"{mark} ({a['hit_agree'] * 100:.4f} % hit, t≤1e-5 {a['t_within_1e-5'] * 100:.4f} %{graze})"


def markdown_table(records: list[dict]) -> str:
    """One row per (workload, engine); skipped engines and failures get a note row."""
    head = ["workload", "tris", "rays", "engine"] + [c for c, _ in COLUMNS] + ["agreement"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in records:
        lead = [r["workload"], f"{r['triangles']:,}", f"{r['rays']:,}", r["engine"]]
        if "skipped" in r or "error" in r:
            note = ("skipped: " + r["skipped"]) if "skipped" in r else ("error: " + r["error"])
            lines.append("| " + " | ".join(lead + ["—"] * len(COLUMNS) + [note[:80]]) + " |")
            continue
        m = r["metrics"]
        cells = [_fmt(k, m.get(k)) for _, k in COLUMNS]
        lines.append("| " + " | ".join(lead + cells + [_agree(r)]) + " |")
    return "\n".join(lines)


def load(paths) -> list[dict]:
    records = []
    for p in paths:
        with open(p) as fh:
            records += [json.loads(line) for line in fh if line.strip()]
    return records


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    print(markdown_table(load(Path(p) for p in sys.argv[1:])))
