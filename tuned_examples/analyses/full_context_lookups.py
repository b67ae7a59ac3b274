"""Where the full-context baseline goes wrong: each lookup of its reply scored on its own, against guessing.

    python tuned_examples/analyses/full_context_lookups.py  # the shipped baseline, 2 to 10 documents
    python tuned_examples/analyses/full_context_lookups.py --checkpoint runs/deep/full_context_8_layers_sft

The baseline answers "Where was the employer of X born?" in one call by quoting two facts, "X works for Y." (the
first lookup: Y, found by X, which the question names) and "Y was born in Z." (the second: Z, found by Y, which only
the reply names), then \\boxed{Z}. Fed the expert's reply token by token (teacher forcing), the policy's greedy
choice at Y and at Z shows which lookup fails, free of the errors an earlier token would carry into a sampled reply.
Beside each: what guessing scores, picking one of the context's "was born in" sentences at random, or one of those
after the employer's document (the second fact always comes after the first). A lookup that scores what guessing
after the first fact scores has learnt where the answer sits, not which sentence holds it.

Per length: each lookup's accuracy with its 95% interval (Wilson) and both guessing levels, on held-out questions.
Writes lookups.json and lookups.md to --out.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as hf_logging

from memrl_envs.multihop import FACT_RE
from memrl.algorithms.sft import expert_episodes
from memrl.seeds import heldout_env_seeds
from memrl.stats import wilson_interval
from memrl.experiment import RUNS, require_checkpoint
from memrl_tuned_examples.tasks.memagent import BASELINE, NUM_DOCS, cpu_task

LENGTHS = (2, 4, 6, 8, NUM_DOCS)
"""Documents per question: the lengths the baseline was trained on, all inside its window."""
LOOKUPS = {"employer": " works for", "city": " born in"}
"""Each scored lookup and the words of the expert's reply just before it."""


def guessing(context: str, question_subject: str) -> tuple[float, float]:
    """Chance of picking the right city by guessing among the context's "was born in" sentences: among all of them,
    and among those after the document where `question_subject` works for someone."""
    facts = [FACT_RE.match(line.split(": ", 1)[1]) for line in context.split("\n")]
    born = [i for i, f in enumerate(facts) if f and f.group(2) == "was born in"]
    first = next(i for i, f in enumerate(facts) if f and f.group(2) == "works for" and f.group(1) == question_subject)
    after = [i for i in born if i > first]
    if not after:
        raise ValueError(f"no 'was born in' sentence after {question_subject}'s employer in the context")
    return 1 / len(born), 1 / len(after)


def lookup_positions(tokenizer, response_ids: list[int]) -> dict[str, int]:
    """Index in the reply of the first token of each lookup's answer (the name just after LOOKUPS' words)."""
    positions = {}
    for i in range(1, len(response_ids)):
        prefix = tokenizer.decode(response_ids[:i])
        for name, words in LOOKUPS.items():
            if name not in positions and prefix.endswith(words):
                positions[name] = i
    missing = sorted(set(LOOKUPS) - set(positions))
    if missing:
        raise ValueError(f"the expert reply {tokenizer.decode(response_ids)!r} has no {missing} lookup")
    return positions


def score(checkpoint: Path, model, tokenizer, num_docs: int, num_tasks: int, seed: int = 0) -> dict:
    """Teacher-forced greedy accuracy of `model` (loaded from `checkpoint`) at each lookup and the guessing levels on
    `num_tasks` held-out questions."""
    env_config, workflow_config = cpu_task("full_context", str(checkpoint), num_docs=num_docs)
    right = {name: 0 for name in LOOKUPS}
    guesses = []
    for env_seed in heldout_env_seeds(seed, num_tasks):
        (episode,) = expert_episodes("memrl/ChunkStream-v0", env_config, "full_context", workflow_config, tokenizer,
                                     1, env_seed)
        call = episode.conversations[0]
        prompt, reply = call.prompt_ids.tolist(), call.response_ids.tolist()
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([prompt + reply])).logits[0, len(prompt) - 1:-1]
        greedy = logits.argmax(-1).tolist()
        for name, i in lookup_positions(tokenizer, reply).items():
            right[name] += greedy[i] == reply[i]
        context = tokenizer.decode(prompt).split("<section> ", 1)[1].split(" </section>", 1)[0]
        subject = FACT_RE.match(tokenizer.decode(reply).split(": ", 1)[1]).group(1)
        guesses.append(guessing(context, subject))
    row = {"num_docs": num_docs, "num_tasks": num_tasks}
    for name, hits in right.items():
        row[name] = hits / num_tasks
        row[f"{name}_interval"] = list(wilson_interval(hits, num_tasks))
    row["guess_any_born"], row["guess_born_after_employer"] = np.mean(guesses, axis=0).tolist()
    return row


def markdown(checkpoint: Path, rows: list[dict]) -> str:
    path = checkpoint.resolve()
    shown = path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path  # no machine's root in the table
    lines = [f"Teacher-forced lookups of `{shown}` ({rows[0]['num_tasks']} held-out questions per length, greedy; "
             "95% intervals)", "",
             "| documents | employer (hop 1) | city (hop 2) | guessing a born city | guessing one after the employer |",
             "|---|---|---|---|---|"]
    for r in rows:
        cells = [f"{r[n]:.3f} [{r[n + '_interval'][0]:.3f}, {r[n + '_interval'][1]:.3f}]" for n in LOOKUPS]
        lines.append(f"| {r['num_docs']} | {cells[0]} | {cells[1]} | {r['guess_any_born']:.3f} | "
                     f"{r['guess_born_after_employer']:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", type=Path, default=BASELINE, help=f"full-context policy (default: {BASELINE})")
    p.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS), help="documents per question")
    p.add_argument("--num-tasks", type=int, default=200, help="held-out questions per length")
    p.add_argument("--out", type=Path, default=RUNS / "full_context_lookups", help="where to write the table")
    args = p.parse_args(argv)
    checkpoint = require_checkpoint(p, "--checkpoint", args.checkpoint)
    if args.num_tasks < 1:
        p.error(f"--num-tasks must be at least 1, got {args.num_tasks}")
    if any(not 2 <= n <= NUM_DOCS for n in args.lengths):
        p.error(f"--lengths must be from 2 (the two gold documents) to {NUM_DOCS} (what the baseline's window holds "
                f"whole), got {args.lengths}")
    hf_logging.disable_progress_bar()  # the table is the output
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForCausalLM.from_pretrained(checkpoint).eval()
    rows = [score(checkpoint, model, tokenizer, n, args.num_tasks) for n in args.lengths]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "lookups.json").write_text(json.dumps(rows, indent=2))
    table = markdown(checkpoint, rows)
    (args.out / "lookups.md").write_text(table)
    print(table, end="")
    return rows


if __name__ == "__main__":
    main()
