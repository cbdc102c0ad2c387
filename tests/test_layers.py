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


def import_graph() -> dict[str, set[str]]:
    """Each bert_demo module and the bert_demo modules it imports anywhere: at the top, inside a function, or for
    type checking only."""
    modules = {module_of(path).removesuffix(".__init__"): path for path in PACKAGE.rglob("*.py")}
    return {name: {m for m in imports(path) if m in modules and m != name} for name, path in modules.items()}


def a_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of `graph`, its modules in order and the first again at the end; None where there is none."""
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for after in sorted(graph[node]):
            if state.get(after) == "open":
                return path[path.index(after):] + [after]
            if after not in state and (found := visit(after, path)):
                return found
        state[node] = "done"
        path.pop()
        return None

    return next((found for node in sorted(graph) if node not in state and (found := visit(node, []))), None)


def test_imports_run_one_way_no_module_reaches_itself_even_through_imports_inside_functions():
    assert a_cycle(import_graph()) is None, " -> ".join(a_cycle(import_graph()) or [])


def test_the_cycle_check_finds_a_cycle_of_three_and_none_in_a_chain():
    assert a_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert a_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


APP_LAYERS = ["text", "policy", "verdict", "visitors", "folders", "uploads", "guards", "machine", "state", "runs",
              "registry", "handlers", "queries", "tabs", "header", "ui"]  # the app's modules and folders, bottom up
SIBLINGS = ("guards", "state", "runs")  # the parts the registry ties together: none imports another


def app_layer(module: str) -> str | None:
    """The app's layer of a module ("bert_demo.app.runs.slot": runs), None outside the app or for its package."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "app" else None


def test_the_apps_folders_and_modules_import_one_way_from_the_text_up_to_the_page():
    """The registry sits above the state and the runs it ties together, the handlers above it, the tabs above them
    and the header and page on top (issue 81: the registry had sat in state/ and imported runs/, which import
    state/; the header imported the tabs, two of which imported the header)."""
    assert {app_layer(module_of(p)) for p in (PACKAGE / "app").glob("*") if p.stem != "__init__"
            and p.name != "__pycache__"} == set(APP_LAYERS)
    upward = []
    for path in (PACKAGE / "app").rglob("*.py"):
        here = app_layer(module_of(path))
        for imported in imports(path):
            there = app_layer(imported)
            if here and there and APP_LAYERS.index(there) > APP_LAYERS.index(here):
                upward.append(f"{module_of(path)} ({here}) imports {imported} ({there})")
    assert not upward, "\n".join(upward)


def sibling_imports(paths) -> list[str]:
    """The imports from one of the app's SIBLINGS into another, read from the files at `paths`."""
    found = []
    for path in paths:
        here = app_layer(module_of(path))
        for imported in imports(path):
            there = app_layer(imported)
            if here in SIBLINGS and there in SIBLINGS and there != here:
                found.append(f"{module_of(path)} ({here}) imports {imported} ({there})")
    return found


def test_the_guards_the_state_and_the_runs_never_import_one_another_only_the_registry_above_ties_them():
    """Issue 81: the runs had imported the state (the disk, uploads, the catalog's types) and the guards (the address
    rule), the state the guards (who a visitor is). What they share sits below them: who a visitor is
    (`visitors`), what a model folder holds (`folders`), a visitor's private copies (`uploads`), the app's caps
    (`policy`); the catalog wraps the run's live weights itself."""
    found = sibling_imports((PACKAGE / "app").rglob("*.py"))
    assert not found, "\n".join(found)


def test_the_sibling_check_sees_a_run_importing_the_state(tmp_path):
    """The check itself can fail: a module of runs/ that imported the catalog would be found."""
    folder = tmp_path / "bert_demo" / "app" / "runs"
    folder.mkdir(parents=True)
    (folder / "job.py").write_text("from bert_demo.app.state.catalog import Loaded\n")
    global PACKAGE
    real, PACKAGE = PACKAGE, tmp_path / "bert_demo"
    try:
        assert sibling_imports([folder / "job.py"]) == [
            "bert_demo.app.runs.job (runs) imports bert_demo.app.state.catalog (state)"]
    finally:
        PACKAGE = real
