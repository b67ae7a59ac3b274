"""The documentation site: it builds offline with --strict, every figure a page shows is read from its result file
(a changed file changes the page), every interval a page quotes is held by a result file, every other figure a page
types is held by the result file its paragraph or table names, the README's figures match those files, and no
docstring quotes a result."""

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
    for sft_summary in (ROOT / "tuned_examples" / "checkpoints").glob("*/sft_summary.json"):  # warm-starts' figures
        (tmp_path / sft_summary.relative_to(ROOT)).parent.mkdir(parents=True)
        shutil.copy(sft_summary, tmp_path / sft_summary.relative_to(ROOT))
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
    assert len(rows) == 9
    for row in rows:
        # An example of stages has a row per stage, whose results are <example>_<stage>.
        example, stage = re.search(r"`python tuned_examples/(\w+)\.py(?: --stage (\w+))?`", row).groups()
        name = f"{example}_{stage}" if stage else example
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


NUMBER = r"[+-]?\d+(?:\.\d+)?"
QUOTED_INTERVAL = re.compile(rf"(?<![\w.])({NUMBER})x?[ \t]+\[({NUMBER})x?,[ \t]+({NUMBER})x?\]")
"""A figure and its interval as a page writes it, "0.560 [0.511, 0.608]" or "1.50x [1.44, 1.56]", on one line once
`_prose` has joined the lines of its paragraph."""

RESULT_FOLDERS = ("tuned_examples/results", "benchmarks/results")


def _prose(markdown: str) -> str:
    """The page with its directives blanked and each paragraph's line breaks read as spaces, every character at its
    own offset (so an offset still names its line); table rows stay apart."""
    blanked = hooks.DIRECTIVE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), markdown)
    return re.sub(r"(?<=[^\n])\n(?=[ \t]*[^\s|])", " ", blanked)


def _numbers_of_each_object(data, into: list) -> list:
    """The numbers each dict of a JSON document holds directly, one list per dict, at any depth."""
    if isinstance(data, dict):
        into.append([v for v in data.values() if isinstance(v, (int, float)) and not isinstance(v, bool)])
    for item in data.values() if isinstance(data, dict) else data if isinstance(data, list) else ():
        _numbers_of_each_object(item, into)
    return into


def _as_written(number: float, like: str) -> str:
    """`number` at the precision of `like`, with a "+" where `like` shows one."""
    decimals = len(like.partition(".")[2])
    return format(number, f"{'+' if like.startswith('+') else ''}.{decimals}f")


def unbacked_intervals(pages, root: Path = ROOT) -> list[str]:
    """'page:line: interval' for every interval a page quotes that no result file holds: neither verbatim in a result
    table (.md) nor as three numbers of one JSON object that read as the figure, its low and its high end."""
    tables = "\n".join(p.read_text() for folder in RESULT_FOLDERS for p in sorted((root / folder).rglob("*.md")))
    objects = [numbers for folder in RESULT_FOLDERS for p in sorted((root / folder).rglob("*.json"))
               for numbers in _numbers_of_each_object(json.loads(p.read_text()), [])]

    def in_json(mean: str, low: str, high: str) -> bool:
        for numbers in objects:
            for i, m in enumerate(numbers):
                if _as_written(m, mean) != mean:
                    continue
                for j, lo in enumerate(numbers):
                    if j != i and lo <= m and _as_written(lo, low) == low and any(
                            k not in (i, j) and hi >= m and _as_written(hi, high) == high
                            for k, hi in enumerate(numbers)):
                        return True
        return False

    found = []
    for page in pages:
        markdown = page.read_text()
        for match in QUOTED_INTERVAL.finditer(_prose(markdown)):
            quoted = re.sub(r"\s+", " ", match.group(0))
            if quoted not in tables and not in_json(*match.groups()):
                line = markdown.count("\n", 0, match.start()) + 1
                found.append(f"{page.relative_to(root).as_posix()}:{line}: {quoted}")
    return found


def test_every_interval_a_page_quotes_is_in_a_result_file():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    assert unbacked_intervals(pages) == []


def test_an_invented_interval_is_reported_with_its_page_and_line(tmp_path):
    for folder in RESULT_FOLDERS:
        shutil.copytree(ROOT / folder, tmp_path / folder)
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir()
    shown = hooks.change("tuned_examples/results/memagent_dapo_summary.json")
    page.write_text(f"# A page\n\nThe change, {shown}, is backed;\nthis one, +0.123 [+0.045,\n+0.201], is not.\n\n"
                    "{{ change tuned_examples/results/memagent_dapo_summary.json }} | 1.37x [1.29, 1.45] |\n")
    assert unbacked_intervals([page], root=tmp_path) == ["docs/page.md:4: +0.123 [+0.045, +0.201]",
                                                         "docs/page.md:7: 1.37x [1.29, 1.45]"]


FIGURE = re.compile(r"(?<![\w.\[])(?<!\[[+-])[+-]?\d+\.\d{2,}(?![\d\]])")
"""A figure as a page types it: a number with two or more decimals, with the sign the page gives it. An interval's
ends ("[-0.041, +0.005]") are `unbacked_intervals`' to check; the figure before the bracket is one."""

FILE_NAME = re.compile(r"[\w./-]+\.(?:\{[\w,]+\}|json|md)(?![\w-])")
"""A result file as a page names it: `memagent_sampled.md`, `tuned_examples/results/memagent_length.json`,
`mem1_search_sft/sft_summary.json`, or several at once, `tuned_examples/results/memagent_length.{json,md,png}`."""

FENCE = re.compile(r"^[ \t]*(```|~~~).*?^[ \t]*\1[^\n]*$", re.M | re.S)
"""A fenced code block: commands, code and what they print."""

CODE_SPAN = re.compile(r"(`+)(?!`)(?:[^\n]|\n(?![ \t]*\n))*?(?<!`)\1(?!`)")
"""A code span, which may run over a line break of its paragraph: a command, a setting, a name."""

LIST_ITEM = re.compile(r"[ \t]*(?:[-*+]|\d+[.)])[ \t]")


def _blanked(pattern: re.Pattern, text: str, fill: str = " ") -> str:
    """`text` with every match of `pattern` filled with `fill`, its line breaks kept (so a line is still that line)."""
    return pattern.sub(lambda m: re.sub(r"[^\n]", fill, m.group(0)), text)


def _blocks(lines: list[str]) -> list[tuple[int, int]]:
    """(first, last) line index of each block of a page: a paragraph, a list item, a heading, or a whole table with
    the block right before it (the sentence that introduces the table, a code block between them left out)."""
    blocks, before = [], None
    for i, line in enumerate(lines):
        text = line.strip()
        kind = None if not text else "table" if text.startswith("|") else "heading" if text.startswith("#") else "text"
        if kind is not None:
            if kind == before and kind != "heading" and not LIST_ITEM.match(line):
                blocks[-1][1] = i
            else:
                blocks.append([i, i, kind])
        before = kind
    merged = []
    for first, last, kind in blocks:
        if kind == "table" and merged:
            merged[-1] = (merged[-1][0], last)
        else:
            merged.append((first, last))
    return merged


def _result_files(root: Path) -> dict[str, Path]:
    """Every result file by its path from the root: the results folders' JSON and Markdown tables, and the
    warm-starts' `sft_summary.json`."""
    files = [p for folder in RESULT_FOLDERS for p in sorted((root / folder).rglob("*")) if p.suffix in (".json", ".md")]
    files += sorted((root / "tuned_examples" / "checkpoints").glob("*/sft_summary.json"))
    return {p.relative_to(root).as_posix(): p for p in files}


def _named(text: str, files: dict[str, Path]) -> list[str]:
    """The result files a block names, each by a name (a path's last parts) that fits that one file alone."""
    named = []
    for name in FILE_NAME.findall(text):
        stem, brace, extensions = name.partition(".{")
        for one in [f"{stem}.{ext}" for ext in extensions.rstrip("}").split(",")] if brace else [name]:
            fits = [path for path in files if path == one or path.endswith("/" + one)]
            if len(fits) == 1 and fits[0] not in named:
                named.append(fits[0])
    return named


def _all_numbers(data) -> list:
    """Every number of a JSON document, at any depth."""
    if isinstance(data, dict):
        return [n for v in data.values() for n in _all_numbers(v)]
    if isinstance(data, list):
        return [n for v in data for n in _all_numbers(v)]
    return [data] if isinstance(data, (int, float)) and not isinstance(data, bool) else []


def _holds(file: Path, figure: str) -> bool:
    """Whether a result file holds a figure as written: a Markdown table as one of its numbers, a JSON file as a number
    that reads as the figure at its precision and sign."""
    if file.suffix == ".md":
        return figure in re.findall(r"(?<![\w.])[+-]?\d+\.\d+", file.read_text())
    return any(_as_written(n, figure) == figure for n in _all_numbers(json.loads(file.read_text())))


def unbacked_figures(pages, root: Path = ROOT) -> list[str]:
    """'page:line: figure, why' for every figure with two or more decimals that a page types (outside directives and
    code) and the result files its block names do not hold, or in a block that names no result file."""
    files = _result_files(root)
    found = []
    for page in pages:
        # Directives filled rather than blanked, so that a line of directives stays in its paragraph or table.
        text = _blanked(hooks.DIRECTIVE, _blanked(FENCE, page.read_text()), "~")
        lines, figure_lines = text.split("\n"), _blanked(CODE_SPAN, text).split("\n")
        for first, last in _blocks(lines):
            names = _named("\n".join(lines[first:last + 1]), files)
            for i in range(first, last + 1):
                for figure in FIGURE.findall(figure_lines[i]):
                    where = f"{page.relative_to(root).as_posix()}:{i + 1}: {figure}"
                    if not names:
                        found.append(f"{where}, in a block that names no result file")
                    elif not any(_holds(files[name], figure) for name in names):
                        found.append(f"{where}, not in {' or '.join(names)}")
    return found


def test_every_figure_a_page_types_is_in_the_result_file_its_block_names():
    assert unbacked_figures(sorted((ROOT / "docs").rglob("*.md"))) == []


def test_a_figure_its_named_file_lacks_or_that_names_no_file_is_reported_with_its_page_and_line(tmp_path):
    results = tmp_path / "tuned_examples" / "results"
    warm_start = tmp_path / "tuned_examples" / "checkpoints" / "toy_sft"
    results.mkdir(parents=True)
    warm_start.mkdir(parents=True)
    (results / "toy.json").write_text(json.dumps({"rows": [{"accuracy": 0.812, "change": -0.0184}]}))
    (results / "toy.md").write_text("| policy | 1x |\n|---|---|\n| RL | 0.714 [0.682, 0.746] |\n")
    (warm_start / "sft_summary.json").write_text(json.dumps({"final": {"nll": 1.2345}}))
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir()
    page.write_text("# A page\n\nOne sample is right for 0.714 of the questions\n(`toy.md`), not 0.715.\n\n"
                    "Accuracy at 1x (`tuned_examples/results/toy.json`):\n\n```bash\npython eval.py --lr 0.25\n```\n\n"
                    "| policy | 1x | change |\n|---|---|---|\n| RL | 0.812 [0.800, 0.830] | -0.018 |\n"
                    "| warm-start | 0.831 | +0.018 |\n\n"
                    "- naming no file: 0.746, with `kl_coef=0.05` and "
                    "{{ value tuned_examples/results/toy.json rows.0.accuracy .3f }}\n"
                    "- the warm-start's NLL, 1.23 (`toy_sft/sft_summary.json`), not 1.24\n")
    assert unbacked_figures([page], root=tmp_path) == [
        "docs/page.md:4: 0.715, not in tuned_examples/results/toy.md",
        "docs/page.md:15: 0.831, not in tuned_examples/results/toy.json",
        "docs/page.md:15: +0.018, not in tuned_examples/results/toy.json",
        "docs/page.md:17: 0.746, in a block that names no result file",
        "docs/page.md:18: 1.24, not in tuned_examples/checkpoints/toy_sft/sft_summary.json"]
