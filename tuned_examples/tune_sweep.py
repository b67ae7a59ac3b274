"""A Ray Tune sweep over DAPO's learning rate on the Echo toy env (every trial is a full memrl Algorithm).

CPU default:  python tuned_examples/tune_sweep.py
"""

from __future__ import annotations

from pathlib import Path

from ray import tune

from memrl.algorithms import DAPO, DAPOConfig
from memrl.experiment import RUNS, default_model, init_ray, parser


def run_sweep(model: str, iterations: int, storage: Path, lrs: tuple[float, ...] = (1e-4, 1e-3)) -> tune.ResultGrid:
    """Grid over `lrs`; each trial runs `iterations` iterations on the torch engine with one learner."""
    config = (DAPOConfig()
              .environment("memrl/Echo-v0", env_config={"num_turns": 2, "reward": "similarity"})
              .env_runners(num_env_runners=1, num_envs_per_env_runner=8, engine="torch", max_tokens=8)
              .learners(model_path=str(Path(model).absolute()), num_learners=1, token_budget=2048)
              .training(lr=tune.grid_search(list(lrs)), tasks_per_iteration=4, group_size=4))
    tuner = tune.Tuner(
        DAPO,
        param_space=config,
        tune_config=tune.TuneConfig(metric="reward_mean", mode="max"),
        run_config=tune.RunConfig(storage_path=str(storage.absolute()), name="echo_lr",
                                  stop={"training_iteration": iterations}, verbose=1),
    )
    return tuner.fit()


def main() -> None:
    args = parser(__doc__).parse_args()
    init_ray(args.num_gpus)
    grid = run_sweep(args.model or default_model(), args.iterations or 3, args.out or RUNS / "tune")
    best = grid.get_best_result()
    print(f"best lr {best.config['training']['lr']}: reward_mean {best.metrics['reward_mean']:.3f}")


if __name__ == "__main__":
    main()
