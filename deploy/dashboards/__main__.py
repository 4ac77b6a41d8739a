"""`python -m deploy.dashboards [--out DIR] [--check]`: write the Grafana dashboards' JSON into DIR
(default: monitoring/grafana/ in the repository), one file per dashboard named by its uid.
`--check` writes nothing and exits 1 when a file in DIR differs from what the code generates."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from deploy.dashboards import generate

DEFAULT_OUT = Path(__file__).resolve().parents[2] / "monitoring" / "grafana"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.dashboards",
                                     description="Write the Grafana dashboards' JSON.")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the directory of the JSON files")
    parser.add_argument("--check", action="store_true", help="exit 1 when a file differs from the code's")
    args = parser.parse_args(argv)
    stale = []
    for name, text in generate().items():
        path = args.out / name
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(path)
            continue
        args.out.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(path)
    for path in stale:
        print(f"{path}: differs from what deploy/dashboards generates (run python -m deploy.dashboards)",
              file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
