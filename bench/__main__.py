"""Runs the benchmarks and writes each one's section into docs/performance.md.

Every `bench/<name>_bench.py` module exposes `NAME` and `run(quick: bool) -> str` (markdown).
A section lives between `<!-- bench:<name>:begin -->` and `<!-- bench:<name>:end -->`, so
re-running one benchmark replaces only its own section.

A module may also take `records=N` in `run` (`--records N`), and expose
`run_compare(rev, quick, records, rounds) -> str` for `--compare REV`: a before/after run whose
section is `<name>-compare`.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "performance.md"
HEADER = """# Performance

Numbers measured with `python -m bench` on this project's machine. Each section says how it was
measured; rerun a section with `python -m bench <name>`.
"""


def available() -> list[str]:
    return sorted(path.stem.removesuffix("_bench")
                  for path in Path(__file__).parent.glob("*_bench.py"))


def write_section(name: str, markdown: str) -> None:
    text = DOC.read_text() if DOC.exists() else HEADER
    begin, end = f"<!-- bench:{name}:begin -->", f"<!-- bench:{name}:end -->"
    block = f"{begin}\n{markdown.rstrip()}\n{end}"
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.DOTALL)
    text = pattern.sub(lambda _: block, text) if pattern.search(text) else (
        text.rstrip() + "\n\n" + block + "\n")
    DOC.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("names", nargs="*", help=f"benchmarks to run (default: all of "
                                                 f"{', '.join(available())})")
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--records", type=int, metavar="N",
                        help="record count, for benchmarks that take one (broker)")
    parser.add_argument("--compare", metavar="REV",
                        help="before/after mode: measure a broker from git revision REV's src/ "
                             "against this tree's, interleaved in one run (broker)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds per side in --compare mode (default 3, at least 2)")
    args = parser.parse_args()
    if args.compare is not None and not args.names:
        parser.error("--compare needs the benchmark to compare, e.g. `broker --compare REV`")
    for name in args.names or available():
        module = importlib.import_module(f"bench.{name}_bench")
        if args.compare is not None:
            if not hasattr(module, "run_compare"):
                parser.error(f"{name} has no --compare mode")
            section = f"{name}-compare"
            markdown = module.run_compare(args.compare, quick=args.quick, records=args.records,
                                          rounds=args.rounds)
        else:
            section = name
            kwargs = {}
            if args.records is not None:
                if "records" not in inspect.signature(module.run).parameters:
                    parser.error(f"{name} takes no --records")
                kwargs["records"] = args.records
            markdown = module.run(quick=args.quick, **kwargs)
        print(markdown)
        if not args.no_write:
            write_section(section, markdown)
            print(f"wrote the {section} section of {DOC}")

if __name__ == "__main__":
    main()
