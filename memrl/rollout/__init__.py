"""Rollouts: the episode loop (`loop.py`), the env runner actors that drive it against an engine
(`env_runner.py`) and the group that spreads tasks over them and survives a runner's death (`env_runner_group.py`)."""

from memrl.rollout.env_runner import EngineFailed, EnvRunner, EnvRunnerSpec, EpisodeFailed
from memrl.rollout.env_runner_group import EnvRunnerGroup
from memrl.rollout.loop import BatchingResponder, ExpertResponder, Task, run_episode, run_sync

__all__ = ["BatchingResponder", "EngineFailed", "EnvRunner", "EnvRunnerGroup", "EnvRunnerSpec", "EpisodeFailed",
           "ExpertResponder", "Task", "run_episode", "run_sync"]
