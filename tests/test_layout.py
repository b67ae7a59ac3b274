"""The direction of the imports: the core (memrl/) never reaches into the sample envs, the tuned examples or the
benchmarks, the envs never into the examples or benchmarks, and nothing imports a folder by its checkout name."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
INSTALLED = {"envs": "memrl_envs", "tuned_examples": "memrl_tuned_examples", "benchmarks": "memrl_benchmarks"}
"""Each top-level folder beside memrl/ and the name it installs as (pyproject.toml's package-dir)."""


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute import in the file, at any depth (function-level imports included), and of
    every string constant outside docstrings that names a dotted module the way entry points and import_module do."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found.append((node.lineno, node.module))
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
              and ("." in node.value or ":" in node.value)
              and node.value.split(":")[0].replace(".", "").replace("_", "").isalnum()):
            found.append((node.lineno, node.value.split(":")[0]))
    return sorted(found)


def offences(folder: str, forbidden: set[str]) -> list[str]:
    return [f"{path.relative_to(ROOT)}:{line} imports {module}"
            for path in sorted((ROOT / folder).rglob("*.py"))
            for line, module in imported_modules(path)
            if module.split(".")[0] in forbidden]


def test_the_core_imports_none_of_the_packages_built_on_it():
    assert offences("memrl", set(INSTALLED) | set(INSTALLED.values())) == []


def test_the_envs_import_only_the_core():
    assert offences("envs", {"tuned_examples", "benchmarks", "memrl_tuned_examples", "memrl_benchmarks"}) == []


@pytest.mark.parametrize("folder", ["memrl", "envs", "tuned_examples", "benchmarks", "tests"])
def test_nothing_imports_a_folder_by_its_checkout_name(folder):
    # `import envs` works in a checkout (its root on sys.path) and fails once installed, where the folder is
    # memrl_envs: one import name per folder.
    assert offences(folder, set(INSTALLED)) == []


def test_tuned_scripts_share_only_the_tasks():
    # An example, a warm-start recipe or an analysis imports the CPU task it runs on from tuned_examples/tasks/, never
    # another script: each reads on its own. compare.py alone runs the warm-start recipes, every one with its budget.
    imports = [f"{path.relative_to(ROOT)}:{line} imports {module}"
               for path in sorted((ROOT / "tuned_examples").rglob("*.py"))
               for line, module in imported_modules(path)
               if module.split(".")[0] == "memrl_tuned_examples"
               and not module.startswith("memrl_tuned_examples.tasks")
               and not (path.name == "compare.py" and module == "memrl_tuned_examples.warm_starts")]
    assert imports == []
    assert {p.name for p in (ROOT / "tuned_examples").iterdir() if p.is_dir() and p.name != "__pycache__"} == \
        {"tasks", "warm_starts", "analyses", "checkpoints", "results"}


def test_no_module_imports_another_modules_private_names():
    private = [f"{path.relative_to(ROOT)}:{node.lineno} imports {node.module}.{alias.name}"
               for folder in ("memrl", "envs")
               for path in sorted((ROOT / folder).rglob("*.py"))
               for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, ast.ImportFrom) and node.level == 0
               and node.module.split(".")[0] in ("memrl", "memrl_envs")
               for alias in node.names if alias.name.startswith("_")]
    assert private == []


def test_the_walk_sees_every_kind_of_import(tmp_path):
    # The checks above are only as good as this reader: it must catch each way a module can be named.
    source = ('"""Docstring naming memrl_envs.search."""\nimport memrl_envs\nfrom memrl_envs.search import X\n'
              'def f():\n    from memrl_envs import echo\n    return "memrl_envs.echo:EchoEnv"\n'
              'from . import sibling\n')
    (tmp_path / "m.py").write_text(source)
    assert imported_modules(tmp_path / "m.py") == [(2, "memrl_envs"), (3, "memrl_envs.search"),
                                                   (5, "memrl_envs"), (6, "memrl_envs.echo")]


def _absolute_paths(value) -> list[str]:
    if isinstance(value, dict):
        return [p for item in value.values() for p in _absolute_paths(item)]
    if isinstance(value, list):
        return [p for item in value for p in _absolute_paths(item)]
    return [value] if isinstance(value, str) and value.startswith(("/work", "/tmp", "/home", "/root", "/Users")) else []


def test_no_shipped_record_names_a_build_machines_directories():
    import json

    records = [*ROOT.glob("tuned_examples/checkpoints/*/*.json"), *ROOT.glob("tuned_examples/results/*.json"),
               *ROOT.glob("benchmarks/results/*.json")]
    assert len(records) > 20
    found = {str(p.relative_to(ROOT)): paths for p in records if (paths := _absolute_paths(json.loads(p.read_text())))}
    assert found == {}
