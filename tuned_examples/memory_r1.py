"""Memory-R1: a Memory Manager that edits a memory bank (ADD, UPDATE, DELETE, NONE) and an Answer Agent that selects
the memories it needs and answers, each trained with GRPO on exact match: the manager first, scored by a frozen
Answer Agent, then the Answer Agent on the banks that trained manager writes.

CPU default, stage 1:  python tuned_examples/memory_r1.py --stage manager
CPU default, stage 2:  python tuned_examples/memory_r1.py --stage answer
GPUs, the paper's preset:
    python tuned_examples/memory_r1.py --stage manager --model /ckpt/Qwen2.5-7B-Instruct --num-gpus 4 \\
        --answerer http://127.0.0.1:8001/v1
    python tuned_examples/memory_r1.py --stage answer --model /ckpt/Qwen2.5-7B-Instruct --num-gpus 4 \\
        --manager runs/memory_r1_manager/model

Each task is a conversation about friends whose homes and employers change (memrl/MemoryBank-v0); questions ask what
holds at its end. Stage manager: each turn with facts is one call, whose JSON of mem0 events the env applies to the
bank; after the last turn the frozen Answer Agent answers from the bank and every call of the episode gets the mean
exact match. Stage answer: the banks are written first by the fixed manager (--manager, by default stage 1's trained
policy), greedily, for every task the stage will meet; each episode is one question, and its reply (the selected
memories, then **Answer:**) gets the answer's exact match.

On CPU both agents start from the shipped warm-starts of the embedded tiny model (tuned_examples/warm_starts/
memory_r1_sft.py): a manager that learned from an expert updating a changed fact only some of the time, and an
Answer Agent that learned from an expert reading the most recent entry only some of the time (it is the manager
stage's frozen Answer Agent too, served by a chat actor). Held-out exact match is measured on the same tasks before
and after training, with 95% intervals and the paired change; the policy is written to <out>/model.

On GPUs: the paper's settings (128 rollouts per step as 16 tasks x 8, lr 1e-6, sampling at temperature 1 and greedy
evaluation, prompts up to 4096 tokens and replies up to 2048), the paper's prompts, and the frozen Answer Agent an
OpenAI-compatible endpoint (--answerer URL) or a local checkpoint served on GPUs of its own (--answerer PATH
--answerer-gpus N).
"""

from __future__ import annotations

from pathlib import Path

from memrl.algorithms import GRPOConfig
from memrl.experiment import RUNS, parser, require_checkpoint, run_example, size_for_gpus
from memrl.seeds import heldout_env_seeds, training_env_seeds
from memrl_tuned_examples.tasks.memory_r1 import (
    ANSWER_WARM_START,
    CPU_ANSWER_TOKENS,
    CPU_MANAGER_TOKENS,
    MANAGER_WARM_START,
    env_config,
    served_answer_agent,
)

STAGES = ("manager", "answer")
"""The two stages, in the paper's order."""
CPU_ITERATIONS = {"manager": 30, "answer": 300}
"""Training iterations of each CPU stage: an answer-stage iteration (one short call per episode) takes a tenth of a
manager-stage one (six calls, each a JSON list of changes)."""
CPU_EVAL_TASKS = 300
"""Held-out tasks of each CPU stage (conversations for the manager, questions for the Answer Agent)."""
PAPER = {"tasks_per_iteration": 16, "group_size": 8, "lr": 1e-6, "temperature": 1.0, "max_prompt_tokens": 4096,
         "max_tokens": 2048}
"""Memory-R1's training settings (appendix D): 128 rollouts per step, actor lr 1e-6, temperature 1 for rollouts and
greedy decoding for evaluation, 4096 prompt and 2048 response tokens. The group size is not given; 8 is GRPO's usual
one."""
GPU_TASK = {"num_people": 8, "num_turns": 20, "num_questions": 6}
"""Synthetic conversations at GPU scale: eight friends over twenty turns, six questions."""


def run_name(stage: str) -> str:
    """The run directory under runs/ of a stage: memory_r1_<stage>."""
    return f"memory_r1_{stage}"


def answer_stage_seeds(iterations: int, num_eval_tasks: int, tasks_per_iteration: int, seed: int = 0) -> list[int]:
    """Every env seed an answer stage of `iterations` iterations meets (memrl.seeds): each iteration's training
    seeds (and one iteration more, which a run may sample ahead) and the held-out ones."""
    train = [s for it in range(iterations + 1) for s in training_env_seeds(seed, it, 0, tasks_per_iteration)]
    return sorted(set(train + heldout_env_seeds(seed, num_eval_tasks)))


WRITE_BANKS_TIMEOUT_S = 3 * 3600
"""The longest write_banks waits for the manager's banks before it stops the writer and fails."""


def write_banks(manager: str | Path, seeds: list[int], out: Path, max_tokens: int, task: dict, engine: str = "vllm",
                timeout_s: float = WRITE_BANKS_TIMEOUT_S, **engine_options) -> Path:
    """The banks the fixed `manager` writes, greedily, for the tasks of `seeds` (one <instance_id>.json each in `out`,
    memrl/MemoryBank-v0's dump_dir), on an `engine` (an ENGINES name) with `engine_options`; returns `out`.

    The engine runs in a process of its own, so its start-up output goes to <out>.log rather than the console (as an
    actor's does) and its memory goes back before the run's own engines start."""
    import multiprocessing

    if not (Path(manager) / "config.json").is_file():
        raise FileNotFoundError(f"the manager {str(manager)!r} is not a Hugging Face checkpoint (no config.json)")
    out.mkdir(parents=True, exist_ok=True)
    log = out.with_suffix(".log")
    print(f"writing the banks of {len(seeds)} tasks with {manager} (log: {log})", flush=True)
    writer = multiprocessing.get_context("spawn").Process(
        target=_write_banks, args=(str(manager), seeds, str(out), max_tokens, task, engine, engine_options, str(log)))
    writer.start()
    writer.join(timeout_s)
    if writer.is_alive():
        writer.kill()
        writer.join()
        raise TimeoutError(f"the manager did not write the banks of {len(seeds)} tasks within {timeout_s:.0f} s "
                           f"(timeout_s); its output is in {log}")
    if writer.exitcode != 0:
        raise RuntimeError(f"writing the banks failed (exit code {writer.exitcode}); its output is in {log}")
    return out


def _write_banks(manager: str, seeds: list[int], out: str, max_tokens: int, task: dict, engine: str,
                 engine_options: dict, log: str) -> None:
    """write_banks' process: its output to `log`, then the greedy episodes that dump the banks."""
    import os

    with open(log, "w") as file:  # the descriptors, so that what C++ and subprocesses print goes there too
        for stream in (1, 2):
            os.dup2(file.fileno(), stream)
    from transformers import AutoTokenizer

    from memrl.algorithms.sft import greedy_rewards
    from memrl.engines import engine_class

    writer = engine_class(engine)(manager, **engine_options)
    greedy_rewards(writer, "memrl/MemoryBank-v0", {**task, "role": "manager", "dump_dir": out},
                   "last_observation", {}, AutoTokenizer.from_pretrained(manager), seeds, max_tokens)


def manager_config(model: str | Path | None = None, answerer: str | Path | None = None) -> GRPOConfig:
    """The CPU manager stage: 8 tasks x 8 rollouts per iteration at temperature 1 on one vLLM engine fed by one env
    runner of 64 envs, two ZeRO-3 learners; the frozen Answer Agent is a URL or a local checkpoint (by default the
    shipped CPU one) served as a chat actor."""
    cfg, where = served_answer_agent(GRPOConfig(), answerer or ANSWER_WARM_START)
    return _cpu(cfg, model or MANAGER_WARM_START, env_config("manager", where), CPU_MANAGER_TOKENS)


def answer_config(model: str | Path | None = None, manager: str | Path | None = None,
                  iterations: int = CPU_ITERATIONS["answer"], banks: Path | None = None) -> GRPOConfig:
    """The CPU answer stage on the banks `manager` writes (by default the manager stage's trained policy) into
    `banks` (default runs/memory_r1_answer/banks) for every task the stage meets; its settings are the manager
    stage's."""
    manager = manager or RUNS / run_name("manager") / "model"
    banks = write_banks(manager, answer_stage_seeds(iterations, CPU_EVAL_TASKS, 8), banks or
                        RUNS / run_name("answer") / "banks", CPU_MANAGER_TOKENS, env_config("manager"),
                        kv_cache_bytes=256 * 1024**2)
    return _cpu(GRPOConfig(), model or ANSWER_WARM_START, env_config("answer", banks_dir=str(banks)),
                CPU_ANSWER_TOKENS)


def _cpu(cfg: GRPOConfig, model: str | Path, env: dict, max_tokens: int) -> GRPOConfig:
    return (cfg
            .environment("memrl/MemoryBank-v0", env_config=env)
            .env_runners(num_env_runners=1, num_envs_per_env_runner=64, workflow="last_observation", engine="vllm",
                         max_tokens=max_tokens, temperature=1.0, engine_config={"kv_cache_bytes": 256 * 1024**2})
            .learners(model_path=str(model), num_learners=2, token_budget=32768)
            .training(lr=1e-4, tasks_per_iteration=8, group_size=8)
            .evaluation(evaluation_num_tasks=CPU_EVAL_TASKS)
            .debugging(seed=0, wandb_project="memrl-memory-r1"))


def paper_config(stage: str, model: str, num_gpus: int, answerer: str | None = None, answerer_gpus: int = 1,
                 banks: Path | None = None) -> GRPOConfig:
    """Memory-R1's preset for `stage` on `num_gpus` GPUs for the policy: the paper's prompts and settings (PAPER) on
    GPU_TASK. The manager is answered by `answerer`: an http(s) URL, "actor:NAME", or a local checkpoint served on
    `answerer_gpus` GPUs of their own (greedy, 2048 tokens, as the paper evaluates); the Answer Agent reads `banks`
    (a fixed manager's, written by write_banks)."""
    cfg = GRPOConfig()
    if stage == "manager":
        cfg, where = served_answer_agent(cfg, answerer, max_tokens=PAPER["max_tokens"], num_gpus=answerer_gpus)
        env = {**GPU_TASK, "role": "manager", "answerer": where, "answerer_max_tokens": PAPER["max_tokens"]}
    else:
        env = {**GPU_TASK, "role": "answer", "banks_dir": str(banks)}
    max_model_len = PAPER["max_prompt_tokens"] + PAPER["max_tokens"]
    cfg = (cfg
           .environment("memrl/MemoryBank-v0", env_config=env)
           .env_runners(num_envs_per_env_runner=64, workflow="last_observation", max_tokens=PAPER["max_tokens"],
                        temperature=PAPER["temperature"])
           .learners(model_path=model, token_budget=2 * max_model_len)
           .training(lr=PAPER["lr"], tasks_per_iteration=PAPER["tasks_per_iteration"],
                     group_size=PAPER["group_size"])
           .evaluation(evaluation_num_tasks=256)
           .debugging(seed=0, wandb_project="memrl-memory-r1"))
    cfg = size_for_gpus(cfg, num_gpus)
    return cfg.env_runners(engine_config={**cfg.env_runners_cfg.engine_config, "max_model_len": max_model_len})


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--stage", choices=STAGES, required=True,
                   help="train the Memory Manager (frozen Answer Agent) or the Answer Agent (fixed manager); writes "
                   "to runs/memory_r1_<stage>")
    p.add_argument("--answerer", help="stage manager: the frozen Answer Agent, an OpenAI-compatible API base "
                   "(http://HOST:PORT/v1) or a local checkpoint (CPU default: the shipped Answer Agent; needed with "
                   "--num-gpus)")
    p.add_argument("--answerer-gpus", type=int, default=1,
                   help="GPUs that serve a local --answerer checkpoint, taken from --num-gpus; unused for a URL")
    p.add_argument("--manager", type=Path,
                   help="stage answer: the fixed Memory Manager that writes the banks (default: "
                   "runs/memory_r1_manager/model, stage manager's trained policy)")
    args = p.parse_args()
    if args.stage == "manager" and args.manager:
        p.error("--manager is the answer stage's fixed manager; the manager stage trains --model")
    if args.stage == "answer" and args.answerer:
        p.error("--answerer scores the manager stage; the answer stage's policy is the Answer Agent")
    if args.stage == "answer":
        args.manager = require_checkpoint(p, "--manager", args.manager or RUNS / run_name("manager") / "model")
    url = args.answerer if args.answerer and args.answerer.startswith(("http://", "https://")) else None
    policy_gpus = args.num_gpus - (0 if url or args.stage == "answer" else args.answerer_gpus)
    if args.num_gpus and args.stage == "manager" and not args.answerer:
        p.error("--num-gpus needs --answerer: an OpenAI-compatible URL or a local checkpoint that answers from the bank")
    if args.num_gpus and policy_gpus < 1:
        p.error(f"--num-gpus {args.num_gpus} leaves no GPU for the policy beside the answerer's {args.answerer_gpus} "
                "(--answerer-gpus)")
    out = args.out or RUNS / run_name(args.stage)
    iterations = args.iterations or CPU_ITERATIONS[args.stage]

    def cpu() -> GRPOConfig:
        if args.stage == "manager":
            return manager_config(args.model, args.answerer)
        return answer_config(args.model, args.manager, iterations, out / "banks")

    def gpu() -> GRPOConfig:
        banks = out / "banks"
        if args.stage == "answer" and not args.plan:
            seeds = answer_stage_seeds(args.iterations or 200, 256, PAPER["tasks_per_iteration"])
            write_banks(args.manager, seeds, banks, PAPER["max_tokens"], GPU_TASK, dtype="bfloat16",
                        max_model_len=PAPER["max_prompt_tokens"] + PAPER["max_tokens"])
        return paper_config(args.stage, args.model, policy_gpus, args.answerer, args.answerer_gpus, banks)

    run_example(p, args, run_name(args.stage), cpu, gpu, cpu_iterations=CPU_ITERATIONS[args.stage])


if __name__ == "__main__":
    main()
