"""MEM1 on WebShop: a shopping agent whose <summary> replaces its whole history each turn, trained with PPO (a critic
and GAE) on each trajectory stitched into one sequence, on the shop's purchase reward.

CPU default:              python tuned_examples/mem1_webshop_ppo.py
The ReAct baselines:      python tuned_examples/mem1_webshop_ppo.py --workflow webshop_react   # same budget
                          python tuned_examples/mem1_webshop_ppo.py --workflow webshop_react_truncated
Over seeds:               python tuned_examples/mem1_webshop_ppo.py --seed 1   # runs/mem1_webshop_ppo_seed1
GPUs, the paper's preset: python tuned_examples/mem1_webshop_ppo.py --model /ckpt/Qwen2.5-7B --num-gpus 4 \\
                              [--data /data/webshop]

The CPU default starts from the warm-start of the embedded tiny model that tuned_examples/warm_starts/webshop_sft.py
builds, on the CPU task of tuned_examples/tasks/webshop.py (the generated catalog, three products a page, ten turns, -1
for a reply without an action), trains with PPO on a vLLM engine, two DeepSpeed ZeRO-3 policy learners and two critic
learners, and evaluates greedily on 500 held-out tasks of the test goals before and after. --workflow webshop_react
trains the full-history ReAct baseline from its own warm-start with the same settings and budget (written to
runs/mem1_webshop_ppo_react), and --workflow webshop_react_truncated the ReAct baseline whose context keeps the latest
turns that fit its window, from the same warm-start (runs/mem1_webshop_ppo_react_truncated). --data points the GPU
preset at the original WebShop files (memrl_envs.webshop_catalog.load_catalog). The policy is written to <out>/model.
"""

from __future__ import annotations

from pathlib import Path

from memrl.algorithms import PPOConfig
from memrl.experiment import parser, run_example, size_for_gpus
from memrl_tuned_examples.tasks.webshop import HELDOUT, MAX_TOKENS, MAX_TURNS, env_config, warm_start, workflow_config

CPU_ITERATIONS = 25
"""Training iterations of the CPU default (about 40 s each)."""
PAPER = {"tasks_per_iteration": 64, "lr": 1e-6, "critic_lr": 1e-5, "max_tokens": 1024}
"""MEM1's published RL settings (batch 64, actor lr 1e-6, critic lr 1e-5, temperature 1), at most 10 turns."""


WORKFLOWS = ("webshop_mem1", "webshop_react", "webshop_react_truncated")
"""Policies this example trains: MEM1, or the ReAct baseline with its whole history or truncated to its window."""


def config(model: str | Path | None = None, workflow: str = "webshop_mem1") -> PPOConfig:
    """The CPU default: 32 tasks per iteration (one trajectory each; half MEM1's batch, which fits twice the updates
    in the 20 minutes), sampled at temperature 0.7 (at 1 the tiny model's rollouts stray far from its greedy ones) and
    trained exactly on-policy at that temperature (tempered_logprobs: the learner scores logits / 0.7; trained on the
    model's own distribution instead, its entropy grew every iteration and the greedy policy drifted), four optimizer
    steps of 8 tasks per iteration (MEM1 takes one of 64; four move the policy four times as often for about the same
    learner time), one vLLM engine fed by one env runner of 32 envs (several runners feed it in whatever order they
    come, and its prefix cache then holds the shared task prompt's blocks from one runner's batch or another's, whose
    last bits differ: runs would not repeat), 2 + 2 ZeRO-3 learners. MEM1 trains one row per call: its calls share
    no prefix beyond the short task prompt, so stitching them saves nothing and its tree attention mask made the
    learner step three times slower here; ReAct's calls share their whole history, which stitching trains once.
    Truncated ReAct trains one row per call as MEM1 does: once its window fills, each call's context starts at
    another turn, so its calls share little beyond the task prompt (stitched, the window's sliding turns made a
    tree the learner took several minutes an iteration over). Stitched or not, each response token gets the same
    context, advantage and return (memrl.learner.advantages.token_advantages): only the cost differs."""
    model = str(model or warm_start(workflow))
    return (PPOConfig()
            .environment("memrl/WebShop-v0", env_config=env_config("train"))
            .env_runners(num_env_runners=1, num_envs_per_env_runner=32, workflow=workflow,
                         workflow_config=workflow_config(workflow), engine="vllm", max_tokens=MAX_TOKENS,
                         max_calls_per_episode=MAX_TURNS, engine_config={"kv_cache_bytes": 256 * 1024**2},
                         temperature=0.7)
            .learners(model_path=model, num_learners=2, token_budget=32768)
            .training(lr=5e-5, critic_lr=1e-4, critic_warmup_iterations=2, tasks_per_iteration=32,
                      num_minibatches=4, stitch_trajectories=workflow == "webshop_react", use_rollout_logprobs=False,
                      tempered_logprobs=True)
            .evaluation(**HELDOUT, evaluation_env_config={"split": "test"})
            .debugging(seed=0, wandb_project="memrl-mem1-webshop"))


def paper_config(model: str, num_gpus: int, data_dir: str | None, workflow: str = "webshop_mem1") -> PPOConfig:
    """MEM1's WebShop preset on GPUs: the original page size and the workflow's full prompt, on the original files
    when `data_dir` holds them (else the generated catalog)."""
    env = {"split": "train", "max_turns": MAX_TURNS, "malformed_reward": -1.0,
           **({"data_dir": data_dir} if data_dir else {})}
    cfg = (PPOConfig()
           .environment("memrl/WebShop-v0", env_config=env)
           .env_runners(num_envs_per_env_runner=64, workflow=workflow, max_tokens=PAPER["max_tokens"],
                        max_calls_per_episode=MAX_TURNS)
           .learners(model_path=model, token_budget=65536)
           .training(lr=PAPER["lr"], critic_lr=PAPER["critic_lr"], tasks_per_iteration=PAPER["tasks_per_iteration"])
           .evaluation(evaluation_num_tasks=500, evaluation_env_config={"split": "test"})
           .debugging(seed=0, wandb_project="memrl-mem1-webshop"))
    return size_for_gpus(cfg, num_gpus)


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--data", help="GPU runs: directory with the original WebShop files, else the generated catalog")
    p.add_argument("--workflow", choices=WORKFLOWS, default="webshop_mem1",
                   help="the policy to train: MEM1 (default), or ReAct with its whole history or truncated")
    args = p.parse_args()
    if not args.num_gpus and not args.model and not (warm_start(args.workflow) / "config.json").is_file():
        p.error(f"the CPU default starts from {warm_start(args.workflow)}; build it first: "
                f"python tuned_examples/warm_starts/webshop_sft.py "
                f"--workflow {warm_start(args.workflow).name.removesuffix('_sft')}")
    name = Path(__file__).stem + ("" if args.workflow == "webshop_mem1" else args.workflow.removeprefix("webshop"))
    run_example(p, args, name, lambda: config(args.model, args.workflow),
                lambda: paper_config(args.model, args.num_gpus, args.data, args.workflow), CPU_ITERATIONS)


if __name__ == "__main__":
    main()
