"""docs/modules.md names every module of the package, under the section of its folder: a newcomer reads there what
each holds (README says every module is there)."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = {"bert_demo": "The BERT itself", "data": "Text and examples", "training": "Runs",
            "inspection": "Looking inside", "app": "The app"}


def section(doc: str, title: str) -> str:
    start = doc.index(f"## {title}")
    end = doc.find("\n## ", start + 1)
    return doc[start:end if end > 0 else None]


def test_every_module_is_named_in_its_folders_section():
    doc = (ROOT / "docs" / "modules.md").read_text()
    missing = []
    for path in sorted((ROOT / "bert_demo").rglob("*.py")):
        if path.name == "__init__.py":
            continue
        parts = path.relative_to(ROOT).parts
        text = section(doc, SECTIONS[parts[1] if len(parts) > 2 else "bert_demo"])
        if not re.search(rf"`{re.escape(path.stem)}(\.py)?[`, (]", text):
            missing.append(str(path.relative_to(ROOT)))
    assert not missing, f"docs/modules.md does not name {missing}"
