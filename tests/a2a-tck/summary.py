"""The closing lines of an A2A TCK run, from its reports/compatibility.json: requirements
passed per level (MUST, SHOULD, MAY), every MUST failure with what the kit said. Exits 1
when a MUST requirement failed or nothing ran."""

from __future__ import annotations

import json
import sys
from collections import Counter


def main(path: str) -> int:
    with open(path, encoding="utf-8") as report:
        requirements = json.load(report)["per_requirement"]
    counts: dict[str, Counter[str]] = {}
    for requirement in requirements.values():
        counts.setdefault(requirement["level"], Counter())[requirement["status"]] += 1
    failed_musts = {
        name: requirement
        for name, requirement in requirements.items()
        if requirement["level"] == "MUST" and requirement["status"] == "FAIL"
    }
    for name, requirement in sorted(failed_musts.items()):
        transports = [t for t, status in requirement["transports"].items() if status == "FAIL"]
        print(f"MUST {name} failed on {', '.join(transports)}:")
        for error in requirement["errors"][:3]:
            print(f"    {error[:300]}")
    levels = []
    for level in ("MUST", "SHOULD", "MAY"):
        count = counts.get(level, Counter())
        levels.append(
            f"{level} {count['PASS']} passed, {count['FAIL']} failed, "
            f"{count['SKIPPED']} skipped, {count['NOT TESTED']} not tested by the kit"
        )
    print("a2a tck (jsonrpc, http_json): " + "; ".join(levels))
    return 1 if failed_musts or not requirements else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
