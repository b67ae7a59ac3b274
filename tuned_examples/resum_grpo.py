"""ReSum: a ReAct search agent whose history is replaced by a summary when its context fills, trained with ReSum-GRPO
(the trajectory's group advantage broadcast to every segment between summaries).

CPU default:              python tuned_examples/resum_grpo.py
GPUs, ReSum's preset:     python tuned_examples/resum_grpo.py --model /ckpt/WebSailor-30B --num-gpus 8 \\
                              --qa /data/train.jsonl --retriever http://127.0.0.1:8000/retrieve \\
                              --summarizer http://127.0.0.1:6002/v1 --summarizer-model ReSum-Tool-30B-A3B

The CPU default starts from the shipped warm-start of the embedded tiny model (tuned_examples/warm_starts/search_sft.py
--workflow resum) on the CPU task of tuned_examples/tasks/search.py (two questions per task, summed exact match,
0-2), with a 256-token context budget that the history outgrows after about two searches: the policy writes its own
summaries, and those calls are trained with the trajectory's advantage like the others. It trains on a vLLM engine
and two DeepSpeed ZeRO-3 learners and evaluates on 2000 held-out tasks before and after. The policy is written to
<out>/model.

The GPU preset runs ReSum's agent settings: a context of 32K tokens less 1000 for the reply (summaries from 0.9 of
it), at most 60 calls, sampling at temperature 0.6 and top_p 0.95; with --summarizer the summaries come from a
separate summary model (ReSum's ReSumTool-30B behind vLLM's server), else the policy writes them.
"""

from __future__ import annotations

from pathlib import Path

from memrl.algorithms import GRPOConfig
from memrl_tuned_examples.tasks.search import cpu_preset, paper_preset, run_search_example

CPU_ITERATIONS = 80
"""Training iterations of the CPU default (about 10 s each)."""
PAPER = {"max_context_tokens": 32 * 1024 - 1000, "max_calls": 60, "temperature": 0.6, "top_p": 0.95,
         "group_size": 8, "lr": 1e-6}
"""ReSum's agent (react_agent.py: MAX_CONTEXT 32K less 1000, MAX_LLM_CALL_PER_RUN 60, temperature 0.6, top_p 0.95)
and the search presets' GRPO settings (group of 8, lr 1e-6)."""


def config(model: str | Path | None = None) -> GRPOConfig:
    """The CPU default: 8 tasks x 8 trajectories per iteration sampled at temperature 0.7, one vLLM engine, two
    ZeRO-3 learners."""
    return cpu_preset(GRPOConfig(), "resum", model, reward="em_sum").training(lr=1e-4, tasks_per_iteration=8,
                                                                             group_size=8)


def paper_config(model: str, num_gpus: int, qa_path: str | None, retriever: str | None,
                 summarizer: str | None = None, summarizer_model: str | None = None) -> GRPOConfig:
    """ReSum's agent settings on GPUs with the workflow's default prompts (search_agents.paper_preset for the data
    options); `summarizer` an http(s) API base of a summary model served as `summarizer_model`."""
    workflow = {"max_context_tokens": PAPER["max_context_tokens"]}
    if summarizer:
        workflow.update(summarizer=summarizer, summarizer_model=summarizer_model or "default")
    cfg = paper_preset(GRPOConfig(), "resum", "em_sum", PAPER["max_calls"], model, num_gpus, qa_path, retriever,
                       workflow_config=workflow)
    return (cfg.env_runners(temperature=PAPER["temperature"], top_p=PAPER["top_p"])
            .training(lr=PAPER["lr"], group_size=PAPER["group_size"]))


def main() -> None:
    run_search_example(__doc__, Path(__file__).stem, config, paper_config, CPU_ITERATIONS,
                       gpu_options={"summarizer": "GPU runs: API base of the summary model (ReSum's ReSumTool-30B "
                                                  "behind vLLM's server), else the policy summarizes",
                                    "summarizer_model": "GPU runs: the summary model's served name"})


if __name__ == "__main__":
    main()
