"""The rule tables of docs/verdict.md, written from coordcheck.judge.rules.RULES (the docs list cannot drift from it).

    python experiments/rules_table.py            # rewrite the block in docs/verdict.md
    python experiments/rules_table.py --check    # exit 1 if the block is not the table as it is

The block sits between ``<!-- rules:begin (python experiments/rules_table.py) -->`` and ``<!-- rules:end -->``;
``tests/test_rules.py`` fails when it is stale.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from coordcheck.judge.rules import DEPTH_RULES, RULES
from coordcheck.judge.rules_experts import EXPERTS_RULES, all_rules_markdown

PAGE = Path(__file__).resolve().parent.parent / "docs" / "verdict.md"
BEGIN, END = "<!-- rules:begin (python experiments/rules_table.py) -->\n", "<!-- rules:end -->"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="only check that the block is current")
    args = p.parse_args()
    page = PAGE.read_text()
    if BEGIN not in page or END not in page:
        print(f"{PAGE}: no rules block ({BEGIN.strip()} ... {END})", file=sys.stderr)
        return 2
    head, rest = page.split(BEGIN, 1)
    old, tail = rest.split(END, 1)
    new = all_rules_markdown()
    if args.check:
        print("current" if old == new else "stale: run python experiments/rules_table.py")
        return 0 if old == new else 1
    PAGE.write_text(head + BEGIN + new + END + tail)
    print(f"wrote {len(RULES)} width rules, {len(DEPTH_RULES)} depth rules and {len(EXPERTS_RULES)} experts rules to "
          f"{PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
