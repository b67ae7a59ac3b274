"""The episode loop: the one function that runs a task through an env and a workflow.

    reset -> (prompt_ids -> respond -> on_response -> step -> observe)* -> Trajectory

A call whose `on_response` gives no action (None) is the workflow's own, such as ReSum's summary of its history: it
is a call of the trajectory like any other, and no env step or `observe` follows it.

Who answers is an argument: an engine (env runners, held-out evaluation), a greedy in-process engine (SFT's
evaluation) or the scripted expert (SFT's training rows). Episodes that run concurrently in one event loop share
a `BatchingResponder`, so every request pending at the same moment goes to the engine as one batch; env steps are
synchronous, so the batches are the same on every run with the same seeds.

An env whose `metadata["blocking_io"]` is true (a search env asking an HTTP server or a retrieval actor, Mem-α's
memory env asking its answerer) steps in a worker thread instead, so the event loop stays free while it waits. Its
steps end in whatever order the server answers, so the responder then works in rounds (`BatchingResponder.rounds`):
a batch goes out once every running episode waits for a reply, its requests in task order, and the batches stay the
same on every run with the same seeds. An env that cannot finish an episode through no fault of the policy ends it
with `info["failure"]` saying why; the trajectory carries it and is counted, not trained on. An env whose final
info carries "row_rewards" (one per call) sets each conversation's reward to its entry; the trajectory's reward
stays the sum of the step rewards.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np

from memrl.engines.base import GenerationOutput
from memrl.episode import Conversation, Trajectory, numeric_metrics
from memrl.workflows.base import Workflow

Respond = Callable[[list[int]], Awaitable[GenerationOutput]]
"""How an episode gets the reply to one prompt (token ids in, a GenerationOutput out)."""


@dataclass
class Task:
    """One trajectory to sample: which env instance to build and how to seed it."""

    seed: int
    """Seed passed to env.reset; tasks of one group share it so the group sees the same problem."""
    group_id: str
    """Trajectories of the same group are compared with each other (GRPO-style)."""
    traj_id: str
    """Unique id, used to check that every task comes back exactly once."""
    options: dict = field(default_factory=dict)
    """Passed to env.reset as `options` (e.g. an evaluation length)."""


async def run_episode(
    env: gym.Env,
    workflow: Workflow,
    task: Task,
    respond: Respond,
    *,
    max_calls: int,
    max_model_len: int | None = None,
    check_action: Callable[[str], None] | None = None,
    timers: dict[str, float] | None = None,
) -> Trajectory:
    """Run `task` on `env` under `workflow` until the env ends it or `max_calls` calls were made.

    `max_model_len`: a prompt that reaches it ends the episode unfinished (truncated, context_overflow), or fails
    if it is the first one. `check_action` sees every parsed action before the env steps (the expert checks that
    the workflow parses its reply back). `timers["env_s"]` accumulates the time spent inside the env.
    """
    timers = {} if timers is None else timers
    t0 = time.perf_counter()
    obs, info = env.reset(seed=task.seed, options=task.options or None)
    workflow.reset(obs, info)
    timers["env_s"] = timers.get("env_s", 0.0) + time.perf_counter() - t0
    conversations: list[Conversation] = []
    stepped: list[Conversation] = []  # the calls whose reply stepped the env
    total_reward = 0.0
    done = overflow = terminated = truncated = False
    while not done:
        prompt = workflow.prompt_ids()
        if max_model_len is not None and len(prompt) >= max_model_len:
            if not conversations:
                raise ValueError(f"task {task.traj_id} (seed {task.seed}): the first prompt has {len(prompt)} "
                                 f"tokens, and the engine's model holds {max_model_len}; shorten the task "
                                 "or serve a model with a longer context")
            # A history that outgrew the model's context ends the episode unfinished (truncated).
            overflow = True
            break
        out = await respond(prompt)
        action, spans = workflow.on_response(out.token_ids)
        conversation = Conversation(prompt_ids=prompt, response_ids=out.token_ids, logprobs=out.logprobs,
                                    spans=spans, reward=0.0, finish_reason=out.finish_reason,
                                    weight_version=out.weight_version)
        conversations.append(conversation)
        if action is None:
            # A call the workflow made for itself (ReSum's summary of its history): no env step follows it.
            done = len(conversations) >= max_calls
            continue
        if check_action is not None:
            check_action(action)
        t0 = time.perf_counter()
        if env.metadata.get("blocking_io"):
            step = asyncio.get_running_loop().run_in_executor(_io_threads(), env.step, action)
            obs, reward, terminated, truncated, info = await step
        else:
            obs, reward, terminated, truncated, info = env.step(action)
        timers["env_s"] += time.perf_counter() - t0
        total_reward += float(reward)
        conversation.reward = float(reward)
        stepped.append(conversation)
        done = terminated or truncated or len(conversations) >= max_calls
        if not done and workflow.blocking_io:
            await asyncio.get_running_loop().run_in_executor(_io_threads(), workflow.observe, obs, info)
        elif not done:
            workflow.observe(obs, info)
    rewards = info.get("row_rewards") if terminated or truncated else None
    if rewards is not None:
        # The env knows some rows' rewards only at the end (Mem-α's shared accuracy): it gives each call that
        # stepped it its own (a workflow's internal calls keep 0).
        if len(rewards) != len(stepped):
            raise RuntimeError(f"task {task.traj_id}: the env's row_rewards has {len(rewards)} entries for "
                               f"{len(stepped)} env steps; it must give one per step")
        for conversation, value in zip(stepped, rewards):
            conversation.reward = float(value)
    probes = workflow.probes(info)
    if probes:
        if len(probes) != len(conversations):
            raise RuntimeError(f"{type(workflow).__name__}.probes gave {len(probes)} entries for "
                               f"{len(conversations)} calls; it must give one per call")
        for conversation, named in zip(conversations, probes):
            conversation.probes = {name: np.asarray(ids, dtype=np.int32) for name, ids in named.items()}
    metrics = numeric_metrics(info.get("metrics", {}), f"task {task.traj_id}: env metric")
    metrics.update(numeric_metrics(workflow.metrics(), f"task {task.traj_id}: {type(workflow).__name__} metric"))
    metrics.update(
        num_calls=float(len(conversations)),
        internal_calls=float(len(conversations) - len(stepped)),
        peak_context_tokens=float(max(c.num_tokens for c in conversations)),
        total_tokens=float(sum(c.num_tokens for c in conversations)),
        response_tokens=float(sum(len(c.response_ids) for c in conversations)),
        # MEM1's dependency: each generated token depends on the prompt and the tokens generated before it.
        dependency=float(sum((2 * len(c.response_ids) + len(c.prompt_ids)) * len(c.response_ids) / 2
                             for c in conversations)),
        # Ended without the env finishing the task: its time limit, the call cap or the context.
        truncated=float(not terminated),
        context_overflow=float(overflow),
    )
    return Trajectory(conversations, reward=total_reward, group_id=task.group_id, traj_id=task.traj_id,
                      metrics=metrics, failure=str(info.get("failure", "")))


def run_sync(coroutine: Awaitable):
    """Runs `coroutine` to completion on an event loop of its own and returns its result, from any thread: where the
    calling thread already runs an event loop (a notebook's), in a thread of its own.

    The result is handed back outside the loop's main task. `asyncio.run`, on the main thread, restores the Ctrl-C
    handler as it closes, and CPython's signal module formats the handler it replaces, with the finished main task
    and its result, into an error message it then discards: for a batch of episodes, seconds spent writing every
    array of every trajectory into a string."""
    result = []

    async def main() -> None:
        result.append(await coroutine)

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(main())
    else:
        with ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, main()).result()
    return result[0]


@functools.lru_cache(maxsize=1)
def _io_threads() -> ThreadPoolExecutor:
    """The threads env steps that wait on I/O run in (one pool per process; they wait, they do not compute)."""
    return ThreadPoolExecutor(max_workers=64, thread_name_prefix="env-io")


class BatchingResponder:
    """A `Respond` that gathers the requests of concurrently running episodes into engine batches.

    `generate_batch(prompts)` answers one batch; when it raises, every request of that batch fails with it. By
    default a batch holds every request pending when the event loop comes back to the first of them (synchronous
    env steps make that the same set on every run). With `rounds` set, a batch goes out only once `rounds()`
    requests wait (the number of episodes running, each of which waits for one reply at a time), sorted by the
    `key` each request comes with (its task's place in the call), so timing decides neither which requests share a
    batch nor their order in it; the runner calls `check` when an episode ends.
    """

    def __init__(self, generate_batch: Callable[[list[list[int]]], Awaitable[list[GenerationOutput]]]):
        self.generate_batch = generate_batch
        self._pending: list[tuple[int, list[int], asyncio.Future]] = []
        self.rounds: Callable[[], int] | None = None

    async def __call__(self, prompt_ids: list[int], key: int = 0) -> GenerationOutput:
        future = asyncio.get_running_loop().create_future()
        self._pending.append((key, prompt_ids, future))
        if self.rounds is not None:
            self.check()
        elif len(self._pending) == 1:
            # The first request of a round schedules one flush for everything queued before the event loop comes
            # back to it.
            asyncio.get_running_loop().call_soon(lambda: asyncio.ensure_future(self._flush()))
        return await future

    def check(self) -> None:
        """In rounds: send the batch once every running episode waits for its reply."""
        self._pending = [p for p in self._pending if not p[2].done()]  # requests of cancelled episodes go
        if self._pending and len(self._pending) >= self.rounds():
            batch, self._pending = sorted(self._pending, key=lambda p: p[0]), []
            asyncio.ensure_future(self._send(batch))

    async def _flush(self) -> None:
        batch, self._pending = self._pending, []
        await self._send(batch)

    async def _send(self, batch: list[tuple[int, list[int], asyncio.Future]]) -> None:
        try:
            outputs = await self.generate_batch([p for _, p, _ in batch])
        except Exception as exc:
            for _, _, future in batch:
                if not future.done():  # an episode cancelled meanwhile no longer waits
                    future.set_exception(exc)
            return
        for (_, _, future), out in zip(batch, outputs):
            if not future.done():
                future.set_result(out)


class ExpertResponder:
    """A `Respond` for one episode that replies with the env's scripted expert, written as the workflow would.

    The env's unwrapped instance implements `expert_action() -> str` (the right action now) and the workflow
    `expert_response(action) -> str` (the reply its `on_response` parses back to that action); the reply's ids are
    the tokenized response plus the EOS stop token. An env that also implements `expert_memory() -> str | None`
    says what a memory agent should keep now; when it gives a text, the workflow gets it as
    `expert_response(action, memory=text)`. Pass `check_action` to `run_episode` so a workflow whose parse
    does not give the action back is named.
    """

    def __init__(self, env: gym.Env, workflow: Workflow, eos_token_id: int):
        self.expert_action = getattr(env.unwrapped, "expert_action", None)
        if not callable(self.expert_action):
            raise ValueError(
                f"env {env.spec.id if env.spec else '?'!r} ({type(env.unwrapped).__name__}) has no expert_action(); "
                "SFT warm-starts need the unwrapped env to implement expert_action() -> str, the right action in the "
                "current state")
        if not callable(getattr(workflow, "expert_response", None)):
            raise ValueError(
                f"workflow {type(workflow).__name__} has no expert_response(); SFT warm-starts need it to implement "
                "expert_response(action) -> str, the reply its on_response parses back to the action")
        self.expert_memory = getattr(env.unwrapped, "expert_memory", None)
        self.workflow = workflow
        self.eos_token_id = eos_token_id
        self._action = self._text = ""

    async def __call__(self, prompt_ids: list[int]) -> GenerationOutput:
        self._action = self.expert_action()
        memory = self.expert_memory() if callable(self.expert_memory) else None
        self._text = (self.workflow.expert_response(self._action) if memory is None
                      else self.workflow.expert_response(self._action, memory=memory))
        ids = self.workflow.text_ids(self._text) + [self.eos_token_id]
        return GenerationOutput(token_ids=ids, logprobs=[0.0] * len(ids), finish_reason="stop", weight_version=0)

    def check_action(self, parsed: str) -> None:
        """Raise when the workflow parsed the expert's reply to something other than the expert's action."""
        if parsed != self._action:
            raise ValueError(
                f"{type(self.workflow).__name__}.expert_response({self._action!r}) gave {self._text!r}, which its "
                f"on_response parses to {parsed!r}; it must parse back to the expert action")
