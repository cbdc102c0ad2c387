"""The package's folders draw its layers, and imports run one way: the BERT itself, then the data, then training,
then inspection, then the app; the command line and app.py on top. Read from the code's own import statements."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "bert_demo"
LAYERS = ["bert", "data", "training", "inspection", "app", "entry"]  # from the bottom up


def layer(module: str) -> str:
    """The layer of a module of bert_demo, by its folder ("bert_demo.training.loop": training)."""
    parts = module.split(".")
    if parts[1:2] == ["__main__"]:
        return "entry"
    return parts[1] if len(parts) > 2 and parts[1] in LAYERS else "bert"


def imports(path: Path) -> set[str]:
    """The bert_demo modules a file imports (a `from bert_demo.x import y` names y where y is a module of x)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("bert_demo")}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("bert_demo"):
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                is_module = (PACKAGE.parent / Path(*candidate.split("."))).with_suffix(".py").is_file() or \
                    (PACKAGE.parent / Path(*candidate.split("."))).is_dir()
                found.add(candidate if is_module else node.module)
    return found


def module_of(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)


def test_no_module_imports_one_of_a_higher_layer():
    upward = []
    for path in PACKAGE.rglob("*.py"):
        here = layer(module_of(path))
        for imported in imports(path):
            if LAYERS.index(layer(imported)) > LAYERS.index(here):
                upward.append(f"{module_of(path)} ({here}) imports {imported} ({layer(imported)})")
    assert not upward, "\n".join(upward)


def test_the_bert_itself_is_the_model_its_config_tokenizer_checkpoints_and_inference():
    top = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")
    assert top == ["__main__", "checkpoint", "config", "inference", "model", "processes", "tokenizer"]
    assert sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__") == [
        "app", "data", "inspection", "training"]


def test_the_layer_check_sees_an_upward_import(tmp_path):
    """The check itself can fail: a data module that imported training would be found."""
    file = tmp_path / "pairs.py"
    file.write_text("from bert_demo.training.loop import Run\n")
    assert layer("bert_demo.data.pairs") == "data" and layer(next(iter(imports(file)))) == "training"
