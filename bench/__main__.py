"""``python -m bench``: run the whole benchmark suite and write the report.

Writes ``bench/results/latest.md`` and ``bench/results/latest.json`` (and a
timestamped copy of each). See ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench import calibrate, litellm_proxy, portkey, report, summary
from bench import config as cfgmod
from bench.services import REPO
from bench.suite import Suite, log

RESULTS = Path(__file__).resolve().parent / "results"


def _commit() -> str:
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                             timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return sha + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "?"


def _app_digest() -> str:
    """SHA-256 (12 hex) over ``app/**/*.py``: names the exact gateway code measured,
    committed or not."""
    h = hashlib.sha256()
    for f in sorted((REPO / "app").rglob("*.py")):
        h.update(str(f.relative_to(REPO)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:12]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description="taskgate benchmark suite")
    parser.add_argument("--quick", action="store_true", help="~2-minute smoke run (1 repeat, short windows)")
    parser.add_argument("--repeats", type=int, help="repeats (default 3; --quick 1)")
    parser.add_argument("--only", help=f"comma-separated figures: {','.join(cfgmod.FIGURES)}")
    parser.add_argument("--no-litellm", action="store_true", help="skip the LiteLLM column")
    parser.add_argument("--no-portkey", action="store_true", help="skip the Portkey gateway column")
    parser.add_argument("--no-wrk", action="store_true", help="skip the wrk runs of the tail figure")
    parser.add_argument("--server-pg", action="store_true",
                        help="also measure taskgate on the PostgreSQL server at 127.0.0.1:5432")
    parser.add_argument("--workers", type=int, default=2,
                        help="gateway processes of the multi-worker path (default 2; 1 skips it)")
    parser.add_argument("--litellm-python", help="interpreter that has litellm[proxy] installed")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results directory (default bench/results)")
    parser.add_argument("--from-json", type=Path, metavar="JSON",
                        help="re-render the markdown report of an earlier run's JSON, then exit")
    parser.add_argument("--readme", action="store_true",
                        help="with --from-json: regenerate docs/performance.md's table from that run instead")
    parser.add_argument("--setup-litellm", action="store_true",
                        help="create bench/.venv-litellm with litellm[proxy] from PyPI, then exit")
    parser.add_argument("--setup-portkey", action="store_true",
                        help="npm install @portkey-ai/gateway into bench/.portkey, then exit")
    args = parser.parse_args(argv)

    if args.setup_litellm:
        return litellm_proxy.setup_venv()
    if args.setup_portkey:
        return portkey.setup()
    if args.from_json:
        doc = json.loads(args.from_json.read_text())
        fields = {f.name for f in dataclasses.fields(cfgmod.Config)}
        cfg = cfgmod.Config(**{k: (set(v) if k == "only" else tuple(v) if isinstance(v, list) else v)
                               for k, v in doc["config"].items() if k in fields})
        figures = summary.summarize(doc["records"], cfg, doc["paths"])
        if args.readme:
            readme = REPO / "docs" / "performance.md"
            readme.write_text(report.update_readme(readme.read_text(), report.readme_table(figures, doc["meta"], cfg)))
            log(f"updated the Performance table in {readme}")
            return 0
        print(report.render(figures, doc["meta"], cfg, doc["paths"])
              + f"\nWhole run including setup and teardown: {doc['meta'].get('wall_s', 0):.0f} s.\n")
        return 0

    cfg = cfgmod.quick() if args.quick else cfgmod.full()
    if args.repeats:
        cfg.repeats = max(1, args.repeats)
    if args.only:
        cfg.only = {x.strip() for x in args.only.split(",") if x.strip()}
        unknown = cfg.only - set(cfgmod.FIGURES)
        if unknown:
            parser.error(f"unknown figures: {', '.join(sorted(unknown))}")
    cfg.use_litellm = not args.no_litellm
    cfg.use_server_pg = args.server_pg
    cfg.use_portkey = not args.no_portkey
    cfg.use_wrk = not args.no_wrk
    cfg.workers = max(1, args.workers)

    t0 = time.monotonic()
    meta = {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "mode": "quick" if args.quick else "full",
            "commit": _commit(), "app_digest": _app_digest()}
    log("calibrating (a fixed pure-Python loop, bench/calibrate.py)")
    cal_before = calibrate.measure()
    with Suite(cfg, args.litellm_python) as suite:
        records = suite.run()
        meta.update(suite.info)
        paths = {k: {"available": p.ok, "reason": p.unavailable, "notes": p.notes,
                     "label": p.label.replace("N workers", f"{cfg.workers} workers")}
                 for k, p in suite.paths.items()}
    meta["calibration"] = calibrate.combine(cal_before, calibrate.measure())
    log(f"calibration: cal = {meta['calibration']['cal_ms']:.3f} ms")
    meta["wall_s"] = round(time.monotonic() - t0, 1)
    meta["app_digest_end"] = _app_digest()

    figures = summary.summarize(records, cfg, paths)
    markdown = report.render(figures, meta, cfg, paths)
    markdown += f"\nWhole run including setup and teardown: {meta['wall_s']:.0f} s.\n"
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    doc = {"meta": meta, "config": _jsonable(dataclasses.asdict(cfg)), "paths": paths,
           "summary": figures, "summary_per_cal": calibrate.calibrated(figures, meta["calibration"]["cal_ms"]),
           "records": records}
    (args.out / "latest.md").write_text(markdown)
    (args.out / "latest.json").write_text(json.dumps(doc, indent=1, default=str))
    shutil.copy(args.out / "latest.md", args.out / f"{stamp}-{meta['mode']}.md")
    shutil.copy(args.out / "latest.json", args.out / f"{stamp}-{meta['mode']}.json")
    print(markdown)
    log(f"wrote {args.out / 'latest.md'} and {args.out / 'latest.json'} in {meta['wall_s']:.0f} s")
    return 0


def _jsonable(obj: object) -> object:
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (set, tuple, list)):
        return [_jsonable(v) for v in obj]
    return obj


if __name__ == "__main__":
    sys.exit(main())
