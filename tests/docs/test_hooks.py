"""The documentation site: it builds offline with --strict, every figure a page shows is read from its result file
(a changed file changes the page), the README's figures match those files, and no docstring quotes a result."""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load_hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hooks = _load_hooks()


def test_the_site_builds_offline_with_strict_and_shows_the_figures_and_plots(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    site = tmp_path / "site"
    home = (site / "index.html").read_text()
    assert "{{" not in home and hooks.headline("memagent_dapo").replace("**", "") in re.sub(r"</?strong>", "", home)
    memagent = (site / "methods" / "memagent" / "index.html").read_text()
    assert "../../results/memagent_dapo_curve.png" in memagent
    assert (site / "results" / "memagent_dapo_curve.png").read_bytes() == \
        (ROOT / "tuned_examples" / "results" / "memagent_dapo_curve.png").read_bytes()
    # The API reference is generated from the docstrings.
    assert "Deadlines of every remote wait" in (site / "api" / "config" / "index.html").read_text()


def test_a_changed_result_file_changes_every_page_that_shows_it(tmp_path):
    for folder in ("tuned_examples/results", "benchmarks/results"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    summary = tmp_path / "tuned_examples" / "results" / "memagent_dapo_summary.json"
    data = json.loads(summary.read_text())
    data["eval_after"]["reward_mean"] = 0.7771
    data["change"]["mean"] = 0.1346
    summary.write_text(json.dumps(data))
    shown = {}
    for page in sorted((ROOT / "docs").rglob("*.md")):
        before, after = hooks.render(page.read_text()), hooks.render(page.read_text(), root=tmp_path)
        if before != after:
            shown[page.relative_to(ROOT / "docs").as_posix()] = after
    assert {"index.md", "methods/memagent.md"} <= set(shown)
    for page in shown.values():
        assert "0.777" in page and "+0.135" in page


def test_a_directive_that_names_nothing_fails_naming_it():
    with pytest.raises(hooks.FigureError, match=r"\{\{ value tuned_examples/results/none.json a .3f \}\}: no result "
                                                r"file tuned_examples/results/none.json"):
        hooks.render("x {{ value tuned_examples/results/none.json a .3f }}")
    with pytest.raises(hooks.FigureError, match=r"no 'eval_later' on the way to 'eval_later.reward_mean'"):
        hooks.render("{{ value tuned_examples/results/memagent_dapo_summary.json eval_later.reward_mean .3f }}")
    with pytest.raises(hooks.FigureError, match=r"takes 1 argument\(s\), got 2"):
        hooks.render("{{ headline memagent_dapo extra }}")


def test_the_readme_methods_table_and_quick_start_match_their_result_files():
    readme = (ROOT / "README.md").read_text()
    rows = [line for line in readme.splitlines() if line.startswith("| [") and "tuned_examples/" in line]
    assert len(rows) == 6
    for row in rows:
        name = re.search(r"`python tuned_examples/(\w+)\.py`", row).group(1)
        assert hooks.headline(name) in row, name
    summary = hooks.read_json("tuned_examples/results/memagent_dapo_summary.json")
    for when in ("before", "after"):
        shown = hooks.interval("tuned_examples/results/memagent_dapo_summary.json", f"eval_{when}.reward")
        assert f"held-out reward {when} training: {shown} over 400 tasks" in readme
    assert f"change on the same tasks: {hooks.change('tuned_examples/results/memagent_dapo_summary.json')}" in readme
    assert f"wrote runs/memagent_dapo in {summary['wall_s']:.0f} s" in readme


def test_the_readme_stays_short_and_reaches_every_page():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 220
    assert readme.index("make train") < readme.index("## Methods")
    linked = set(re.findall(r"\]\((docs/[^)#]+)", readme))
    for page in ("docs/methods/memagent.md", "docs/methods/search.md", "docs/methods/memalpha.md",
                 "docs/methods/webshop.md", "docs/envs/chunk_stream.md", "docs/envs/search.md",
                 "docs/envs/memory_store.md", "docs/envs/webshop.md", "docs/tutorial.md"):
        assert page in linked, page
    assert all((ROOT / page).is_file() for page in linked)


INTERVAL = re.compile(r"[+-]?\d\.\d{3} \[[+-]?\d\.\d{3}, [+-]?\d\.\d{3}\]|(?<![\w.])[+-]0\.\d{3}\b")
"""A measured figure with its 95% interval, or a signed change, as results are quoted."""


@pytest.mark.parametrize("folder", ["memrl", "envs", "tuned_examples"])
def test_no_docstring_or_comment_quotes_a_measured_result(folder):
    quoted = [f"{path.relative_to(ROOT)}:{i}" for path in sorted((ROOT / folder).rglob("*.py"))
              for i, line in enumerate(path.read_text().splitlines(), 1) if INTERVAL.search(line)]
    assert quoted == []


def test_no_page_names_a_machine_path():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    assert [p.name for p in pages if re.search(r"/work/|/root/|/home/\w+|/Users/\w+", p.read_text())] == []
