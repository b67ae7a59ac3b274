"""TRL's GRPOTrainer on the shared GRPO workload of benchmarks/vs_trl.py, run in TRL's own environment.

    .venv-trl/bin/python benchmarks/trl_grpo_worker.py '<json settings>'

Not a memrl module: it imports only TRL, its dependencies and benchmarks/common.py (the standard library alone), so it
runs in an environment that has TRL and not memrl (`make bench-trl-env` builds one). The settings (model path, prompt texts, their target words, steps, seed,
learning rate, completion length, group size) come as one JSON argument from benchmarks/vs_trl.py; the figures go
to stdout as one JSON line prefixed with "RESULT ". Start-up counts from this process's creation to the start of
the first optimizer step.
"""

from __future__ import annotations

import difflib
import json
import sys
import time

# benchmarks/common.py, beside this script: memrl is not installed in TRL's environment, and a script's own folder
# comes first on its import path.
from common import process_start


def main() -> None:
    started = process_start()
    settings = json.loads(sys.argv[1])

    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(settings["threads"])
    words = dict(zip(settings["prompts"], settings["words"]))

    def echo_similarity(prompts, completions, **_):
        """The Echo env's similarity reward: difflib ratio of the stripped, lower-cased reply to the word."""
        return [difflib.SequenceMatcher(None, c.strip().lower(), words[p]).ratio()
                for p, c in zip(prompts, completions)]

    class StepTimes(TrainerCallback):
        def __init__(self):
            self.begins, self.ends = [], []

        def on_step_begin(self, args, state, control, **kwargs):
            self.begins.append(time.time())

        def on_step_end(self, args, state, control, **kwargs):
            self.ends.append(time.time())

    num_prompts, group = len(settings["prompts"]), settings["group_size"]
    steps = settings["warmup_steps"] + settings["steps"]
    # One optimizer step per batch of num_prompts x group completions: every completion of a step is generated
    # in one go and trained on once (num_iterations=1), with no reference model (beta=0) and without recomputing
    # activations in the backward pass (TRL's default turns gradient checkpointing on), as memrl's GRPO does.
    config = GRPOConfig(
        output_dir=settings["out"], use_cpu=True, bf16=False, seed=settings["seed"], learning_rate=settings["lr"],
        per_device_train_batch_size=num_prompts * group, gradient_accumulation_steps=1, steps_per_generation=1,
        num_generations=group, num_iterations=1, beta=0.0, max_completion_length=settings["max_tokens"],
        temperature=1.0, top_p=1.0, top_k=0, max_steps=steps, logging_steps=1, save_strategy="no", report_to=[],
        disable_tqdm=True, dataloader_num_workers=0, gradient_checkpointing=False)
    dataset = Dataset.from_dict({"prompt": settings["prompts"] * steps})
    times = StepTimes()
    trainer = GRPOTrainer(model=settings["model"], reward_funcs=echo_similarity, args=config, train_dataset=dataset,
                          callbacks=[times])
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "completions/mean_length" in entry]
    print("RESULT " + json.dumps({
        "startup_s": times.begins[0] - started,
        "step_s": [e - b for b, e in zip(times.begins, times.ends)],
        "completion_tokens_mean": [entry["completions/mean_length"] for entry in logs],
        "reward_mean": [entry.get("reward", float("nan")) for entry in logs],
    }), flush=True)


if __name__ == "__main__":
    main()
