"""DAPO on the Echo toy env: the whole runtime end to end (vLLM engines, ZeRO-3 learners, weight broadcast).

CPU default:  python tuned_examples/echo_dapo.py
GPUs:         python tuned_examples/echo_dapo.py --model /path/to/Qwen2.5-0.5B-Instruct --num-gpus 8
"""

from __future__ import annotations

from pathlib import Path

from memrl.algorithms import DAPOConfig
from memrl.experiment import RUNS, default_model, init_ray, parser, size_for_gpus, train, use_engine


def config(model: str) -> DAPOConfig:
    """CPU defaults: 2 env runners on one vLLM engine, 2 ZeRO-3 learners, a dense similarity reward."""
    return (DAPOConfig()
            .environment("memrl/Echo-v0", env_config={"num_turns": 2, "reward": "similarity"})
            .env_runners(num_env_runners=2, num_envs_per_env_runner=8, engine="vllm", max_tokens=8,
                         engine_config={"kv_cache_bytes": 128 * 1024**2})
            .learners(model_path=model, num_learners=2, token_budget=2048)
            .training(lr=3e-4, tasks_per_iteration=8, group_size=8)
            .evaluation(evaluation_num_tasks=64)
            .debugging(seed=0, wandb_project="memrl-echo"))


def main() -> None:
    args = parser(__doc__).parse_args()
    init_ray(args.num_gpus)
    cfg = config(args.model or default_model())
    if args.num_gpus:
        cfg = use_engine(size_for_gpus(cfg, args.num_gpus), args.engine)
    train(cfg, args.iterations or 10, args.out or RUNS / Path(__file__).stem)


if __name__ == "__main__":
    main()
