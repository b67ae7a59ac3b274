"""The documentation site's figures, read from the result files when the site is built (an MkDocs hook).

A page never types a measured number: it names where the number lives, and the build writes it in. So a rerun that
rewrites a result JSON changes every page that shows it, and a page cannot drift from its file. The directives:

- `{{ value FILE KEY FORMAT }}`: one number of a JSON file (KEY dotted, list items by index) in a Python format spec,
  scaled first by a factor before a "*" ("1000*.0f": seconds as milliseconds), e.g.
  `{{ value tuned_examples/results/memagent_dapo_summary.json wall_s .0f }}`;
- `{{ count FILE KEY }}`: how many items the list at KEY holds (a run's iterations);
- `{{ interval FILE PREFIX }}`: a mean and its 95% interval, from PREFIX_mean, PREFIX_ci_low and PREFIX_ci_high
  ("0.560 [0.511, 0.608]"), e.g. `{{ interval tuned_examples/results/memagent_dapo_summary.json eval_after.reward }}`;
- `{{ change FILE }}`: a run's paired change with its interval, from its "change" ("+0.083 [+0.044, +0.121]");
- `{{ headline NAME }}`: a tuned example's held-out result from `tuned_examples/results/NAME_summary.json`: the
  score before and after training with their 95% intervals, and the paired change with its own;
- `{{ table FILE }}`: a Markdown table a command wrote (`tuned_examples/results/*.md`).

Paths are relative to the repository root. A missing file or key fails the build, naming the directive. The
result plots (`tuned_examples/results/*.png`, `benchmarks/results/*.png`) are served under `results/` and
`benchmarks/results/`, so a page shows one as `![curve](../results/memagent_dapo_curve.png)`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
"""The repository root every directive's path is relative to."""

PLOT_DIRS = {"results": "tuned_examples/results", "benchmarks/results": "benchmarks/results"}
"""Site folder -> repository folder of the PNG files the pages show."""

DIRECTIVE = re.compile(r"\{\{\s*(value|count|interval|change|headline|table)\s+([^}]*?)\s*\}\}")


class FigureError(ValueError):
    """A directive names a file or key that does not exist, or is malformed."""


def lookup(data, key: str):
    """The item of nested dicts and lists at a dotted key ("eval_after.reward_mean", "rows.0.score")."""
    for part in key.split("."):
        try:
            data = data[int(part)] if isinstance(data, list) else data[part]
        except (KeyError, IndexError, ValueError, TypeError):
            raise FigureError(f"no {part!r} on the way to {key!r}") from None
    return data


def read_json(path: str, root: Path = ROOT) -> dict:
    file = root / path
    if not file.is_file():
        raise FigureError(f"no result file {path}")
    return json.loads(file.read_text())


def value(path: str, key: str, fmt: str, root: Path = ROOT) -> str:
    """The number formatted by `fmt` (Python's format spec); "1000*.0f" scales it first (seconds to milliseconds)."""
    number = lookup(read_json(path, root), key)
    scale, _, spec = fmt.rpartition("*")
    try:
        return format(number * float(scale) if scale else number, spec)
    except ValueError as e:
        raise FigureError(f"format {fmt!r}: {e}") from None


def count(path: str, key: str, root: Path = ROOT) -> str:
    items = lookup(read_json(path, root), key)
    if not isinstance(items, list):
        raise FigureError(f"{key!r} is not a list")
    return str(len(items))


def interval(path: str, prefix: str, root: Path = ROOT) -> str:
    data = read_json(path, root)
    mean, low, high = (lookup(data, f"{prefix}_{end}") for end in ("mean", "ci_low", "ci_high"))
    return f"{mean:.3f} [{low:.3f}, {high:.3f}]"


def change(path: str, root: Path = ROOT) -> str:
    c = lookup(read_json(path, root), "change")
    return f"{c['mean']:+.3f} [{c['ci_low']:+.3f}, {c['ci_high']:+.3f}]"


def headline(name: str, root: Path = ROOT) -> str:
    """A tuned example's held-out score (the summary's "score", reward unless the example names another) before and
    after training with 95% intervals, and the paired change with its own: '0.560 [0.511, 0.608] → 0.642 [0.594,
    0.688], change **+0.083 [+0.044, +0.121]** on 400 held-out tasks'."""
    path = f"tuned_examples/results/{name}_summary.json"
    summary = read_json(path, root)
    key = summary.get("score") or "reward"
    return (f"{interval(path, f'eval_before.{key}', root)} → {interval(path, f'eval_after.{key}', root)}, change "
            f"**{change(path, root)}** on {int(lookup(summary, 'eval_after.num_tasks'))} held-out tasks")


def table(path: str, root: Path = ROOT) -> str:
    file = root / path
    if not file.is_file():
        raise FigureError(f"no table file {path}")
    return file.read_text().strip()


def render(markdown: str, root: Path = ROOT) -> str:
    """The page with every directive replaced by what it names."""

    def replace(match: re.Match) -> str:
        kind, args = match.group(1), match.group(2).split()
        wanted = {"value": 3, "count": 2, "interval": 2, "change": 1, "headline": 1, "table": 1}[kind]
        if len(args) != wanted:
            raise FigureError(f"{match.group(0)} takes {wanted} argument(s), got {len(args)}")
        try:
            return {"value": value, "count": count, "interval": interval, "change": change, "headline": headline,
                    "table": table}[kind](*args, root=root)
        except FigureError as e:
            raise FigureError(f"{match.group(0)}: {e}") from None

    return DIRECTIVE.sub(replace, markdown)


# -- MkDocs hook events ---------------------------------------------------------------------------------------------


def on_page_markdown(markdown: str, **_) -> str:
    return render(markdown)


def on_files(files, config, **_):
    """Serve the result plots beside the pages."""
    from mkdocs.structure.files import File

    for site_dir, repo_dir in PLOT_DIRS.items():
        for png in sorted((ROOT / repo_dir).glob("*.png")):
            files.append(File.generated(config, f"{site_dir}/{png.name}", abs_src_path=str(png)))
    return files
