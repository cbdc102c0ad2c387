"""A random sample of mutmut's faults in the Step by step tab's modules, among those a test reaches: a whole run takes
hours on two cores, a sample of 300 tells the share killed to about ±5 points (benchmarks/README.md, "Tests that
bite"). Run in a worktree after `mutmut run` has generated the faults and its stats (stop it once it reports
"Running mutation testing"), then run the names it prints:

    python benchmarks/mutation_sample.py > sample.txt && mutmut run $(cat sample.txt) && mutmut results --all true
"""
from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
from pathlib import Path


def reached_faults(root: Path) -> list[str]:
    """Every fault mutmut made, in name order, whose function a selected test reaches (mutmut-stats.json)."""
    stats = json.loads((root / "mutants" / "mutmut-stats.json").read_text())
    reached = {name for name, tests in stats["tests_by_mangled_function_name"].items() if tests}
    listed = subprocess.run(["mutmut", "results", "--all", "true"], cwd=root, capture_output=True, text=True,
                            check=True).stdout
    names = sorted(re.findall(r"^\s+(\S+__mutmut_\d+):", listed, re.M))
    print(f"{len(names)} faults, {sum(n.split('__mutmut_')[0] in reached for n in names)} reached by a test",
          file=sys.stderr)
    return [name for name in names if name.split("__mutmut_")[0] in reached]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=Path("."), help="the worktree mutmut ran in")
    parser.add_argument("-n", type=int, default=300, help="faults in the sample")
    parser.add_argument("--seed", type=int, default=78)
    args = parser.parse_args()
    random.seed(args.seed)
    print("\n".join(random.sample(reached_faults(args.root), args.n)))


if __name__ == "__main__":
    main()
