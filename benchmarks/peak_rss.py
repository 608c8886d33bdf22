"""Run a command and report the peak resident memory of its whole process tree (the CLI and
every child it starts, e.g. the onnxruntime child), polled from /proc every 20 ms.

    python benchmarks/peak_rss.py -- workbench compare model.onnx --to fp16 --allow-random
    python benchmarks/peak_rss.py --detail -- ...   (and each process's share at the peak)

Last line: JSON {"rc", "seconds", "peak_rss_bytes", "peak_rss_gib"}."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Dict, List


def _children() -> Dict[int, List[int]]:
    kids: Dict[int, List[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        kids.setdefault(ppid, []).append(int(d))
    return kids


def tree_rss(pid: int) -> int:
    """Resident bytes of `pid` and all its descendants now."""
    kids, total, todo = _children(), 0, [pid]
    page = os.sysconf("SC_PAGE_SIZE")
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/statm") as f:
                total += int(f.read().split()[1]) * page
        except (OSError, ValueError, IndexError):
            pass
        todo.extend(kids.get(p, []))
    return total


def tree_detail(pid: int) -> Dict[int, Dict[str, int]]:
    """Per process of the tree: RssAnon / RssFile / RssShmem in kB (where the memory is)."""
    kids, out, todo = _children(), {}, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                out[p] = {k: int(v.split()[0]) for k, v in (ln.split(":", 1) for ln in f)
                          if k in ("RssAnon", "RssFile", "RssShmem")}
        except (OSError, ValueError):
            pass
        todo.extend(kids.get(p, []))
    return out


def measure(cmd: List[str], poll_s: float = 0.02, detail: bool = False) -> Dict[str, object]:
    """Run `cmd`; its exit status, wall time and the process tree's peak RSS (`detail`: and
    each process's anonymous / file-backed / shared share at the peak)."""
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd)
    peak, at = 0, {}
    while proc.poll() is None:
        now = tree_rss(proc.pid)
        if now > peak:
            peak = now
            if detail:
                at = tree_detail(proc.pid)
        time.sleep(poll_s)
    out: Dict[str, object] = {"rc": proc.returncode, "seconds": round(time.monotonic() - t0, 2),
                              "peak_rss_bytes": peak, "peak_rss_gib": round(peak / 2 ** 30, 3)}
    if detail:
        out["at_peak_kb"] = at
    return out


if __name__ == "__main__":
    args = sys.argv[1:]
    detail = bool(args) and args[0] == "--detail"
    args = args[1:] if detail else args
    if args and args[0] == "--":
        args = args[1:]
    print(json.dumps(measure(args, detail=detail)))
