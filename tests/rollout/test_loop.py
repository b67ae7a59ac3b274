"""The episode loop: one function whatever answers (scripted, expert, batched engine), and what it records."""

import asyncio

import gymnasium as gym
import pytest
from transformers import AutoTokenizer

import memrl_envs  # noqa: F401  (registers memrl/ ids)
from memrl.engines.base import GenerationOutput
from memrl.rollout import BatchingResponder, ExpertResponder, Task, run_episode, run_sync
from memrl.workflows.base import LastObservationWorkflow


@pytest.fixture(scope="module")
def tokenizer(tiny_checkpoint):
    return AutoTokenizer.from_pretrained(tiny_checkpoint)


def _reply(tokenizer, text: str) -> GenerationOutput:
    ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
    return GenerationOutput(token_ids=ids, logprobs=[-0.5] * len(ids), finish_reason="stop", weight_version=3)


def test_scripted_replies_become_conversations_with_the_env_rewards(tokenizer):
    env = gym.make("memrl/Echo-v0", num_turns=3, reward="exact")
    prompts = []

    async def respond(prompt_ids):
        prompts.append(prompt_ids)
        return _reply(tokenizer, env.unwrapped.expert_action())

    timers = {}
    traj = asyncio.run(run_episode(env, LastObservationWorkflow(tokenizer), Task(seed=5, group_id="g", traj_id="t"),
                                   respond, max_calls=10, timers=timers))
    assert len(traj.conversations) == 3 and traj.traj_id == "t" and traj.group_id == "g"
    assert [c.prompt_ids.tolist() for c in traj.conversations] == prompts
    assert traj.reward == pytest.approx(sum(c.reward for c in traj.conversations)) and traj.reward > 0
    assert all(c.weight_version == 3 and c.logprobs[0] == -0.5 for c in traj.conversations)
    assert traj.metrics["num_calls"] == 3 and traj.metrics["truncated"] == 0 and timers["env_s"] > 0


def test_max_calls_truncates_and_the_context_limit_ends_or_names_the_episode(tokenizer):
    env = gym.make("memrl/Echo-v0", num_turns=5)

    async def respond(prompt_ids):
        return _reply(tokenizer, "x")

    task = Task(seed=1, group_id="g", traj_id="t")
    traj = asyncio.run(run_episode(env, LastObservationWorkflow(tokenizer), task, respond, max_calls=2))
    assert len(traj.conversations) == 2 and traj.metrics["truncated"] == 1
    limited = gym.wrappers.TimeLimit(gym.make("memrl/Echo-v0", num_turns=5), max_episode_steps=2)
    traj = asyncio.run(run_episode(limited, LastObservationWorkflow(tokenizer), task, respond, max_calls=10))
    assert len(traj.conversations) == 2 and traj.metrics["truncated"] == 1, "the env's time limit is a truncation"
    with pytest.raises(ValueError, match="the first prompt has .* tokens, and the engine's model holds 3"):
        asyncio.run(run_episode(env, LastObservationWorkflow(tokenizer), task, respond, max_calls=2, max_model_len=3))


def test_an_env_metric_that_is_not_a_number_is_named(tokenizer):
    class Verdict(gym.Wrapper):
        def step(self, action):
            obs, reward, terminated, truncated, info = self.env.step(action)
            return obs, reward, True, truncated, {**info, "metrics": {"em": 1, "verdict": "good"}}

    async def respond(prompt_ids):
        return _reply(tokenizer, "x")

    env = Verdict(gym.make("memrl/Echo-v0"))
    with pytest.raises(TypeError, match="task t: env metric 'verdict' = 'good' is not a number"):
        asyncio.run(run_episode(env, LastObservationWorkflow(tokenizer), Task(seed=1, group_id="g", traj_id="t"),
                                respond, max_calls=2))


UNICODE_CONTEXT = "Document 1:\nMalmö\nLindström lives in Malmö – by the sea.\n\nDocument 2:\n東京\n東京 is a city."


@pytest.mark.parametrize("kind", ["memagent", "mem1"])
def test_unicode_questions_and_passages_round_trip_through_env_workflow_tokenizer_and_arrow(tokenizer, tmp_path,
                                                                                          kind):
    import json

    from memrl.episode import from_arrow, to_arrow
    from memrl.workflows import workflow_class

    question = "Who lives in Malmö – or in 東京?"
    if kind == "memagent":
        row = {"context": UNICODE_CONTEXT, "input": question, "answers": ["Lindström"], "num_docs": 2, "index": 0}
        (tmp_path / "eval_2.json").write_text(json.dumps([row], ensure_ascii=False), encoding="utf-8")
        env = gym.make("memrl/ChunkStream-v0", task="file", data_path=str(tmp_path / "eval_2.json"), chunk_tokens=64)
        # the chunk in the first prompt, the memory written to it in the next
        reply, shown = "Lindström lives in Malmö.", ["Lindström lives in Malmö – by the sea.", "東京 is a city."]
    else:
        row = {"prompt": [{"role": "user", "content": f"Answer the following questions: {question}\n"}],
               "reward_model": {"ground_truth": {"target": [["Lindström"]]}}}
        (tmp_path / "qa.jsonl").write_text(json.dumps(row, ensure_ascii=False), encoding="utf-8")
        (tmp_path / "wiki.jsonl").write_text(json.dumps({"id": "0", "contents": "Malmö\nLindström lives in Malmö."},
                                                        ensure_ascii=False), encoding="utf-8")
        env = gym.make("memrl/Search-v0", data="file", qa_path=str(tmp_path / "qa.jsonl"),
                       corpus_path=str(tmp_path / "wiki.jsonl"), max_turns=2)
        reply, shown = "<think>Malmö</think><search>Malmö</search>", ["Doc 1(Title: Malmö) Lindström lives in Malmö."]
    workflow = workflow_class(kind)(tokenizer)

    async def respond(prompt_ids):
        return _reply(tokenizer, reply)

    traj = asyncio.run(run_episode(env, workflow, Task(seed=0, group_id="g", traj_id="t"), respond, max_calls=2))
    (back,) = from_arrow(to_arrow([traj]))
    prompts = [tokenizer.decode(c.prompt_ids) for c in back.conversations]
    assert question in prompts[0] and len(prompts) == 2
    assert all(text in "".join(prompts) for text in shown)  # what the env showed, unfolded
    assert kind != "memagent" or reply in prompts[1]  # the memory, as written
    assert tokenizer.decode(back.conversations[0].response_ids[:-1]) == reply


def test_expert_replies_parse_back_to_the_expert_action_or_are_named(tokenizer):
    env = gym.make("memrl/Echo-v0", num_turns=2, reward="exact")
    wf = LastObservationWorkflow(tokenizer)
    expert = ExpertResponder(env, wf, tokenizer.eos_token_id)
    traj = asyncio.run(run_episode(env, wf, Task(seed=0, group_id="g", traj_id="t"), expert, max_calls=8,
                                   check_action=expert.check_action))
    assert traj.reward == 1.0  # the expert echoes exactly on both turns (each pays 1 / num_turns)
    assert all(c.response_ids[-1] == tokenizer.eos_token_id for c in traj.conversations)

    class Shouting(LastObservationWorkflow):
        def on_response(self, response_ids):
            return self.decode(response_ids).upper(), {}

    wf = Shouting(tokenizer)
    expert = ExpertResponder(env, wf, tokenizer.eos_token_id)
    with pytest.raises(ValueError, match="Shouting.expert_response.*must parse back to the expert action"):
        asyncio.run(run_episode(env, wf, Task(seed=0, group_id="g", traj_id="t"), expert, max_calls=8,
                                check_action=expert.check_action))


def test_batching_responder_sends_concurrent_requests_as_one_batch_and_fails_them_together(tokenizer):
    batches = []

    async def generate_batch(prompts):
        batches.append(prompts)
        if any(p == [666] for p in prompts):
            raise RuntimeError("engine down")
        return [_reply(tokenizer, str(len(p))) for p in prompts]

    async def main(prompts):
        respond = BatchingResponder(generate_batch)
        return await asyncio.gather(*(respond(p) for p in prompts), return_exceptions=True)

    outs = asyncio.run(main([[1], [1, 2], [1, 2, 3]]))
    assert batches == [[[1], [1, 2], [1, 2, 3]]]
    assert [tokenizer.decode(o.token_ids[:-1]) for o in outs] == ["1", "2", "3"]
    outs = asyncio.run(main([[5], [666]]))
    assert all(isinstance(o, RuntimeError) and "engine down" in str(o) for o in outs)


class _NotesFirst(LastObservationWorkflow):
    """Before each env action, one call of its own (its reply is kept as a note): the kind ReSum's summaries are."""

    def reset(self, observation, info):
        super().reset(observation, info)
        self.noting, self.notes = True, []

    def on_response(self, response_ids):
        if self.noting:
            self.noting = False
            self.notes.append(self.decode(response_ids))
            return None, {}
        self.noting = True
        return super().on_response(response_ids)


class _RowRewards(gym.Wrapper):
    """Echo whose last step gives each env step a reward of its own (as Mem-α's env does): 1, 2, 3, ..."""

    def reset(self, **kwargs):
        self.steps = 0
        return self.env.reset(**kwargs)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        if terminated or truncated:
            info = {**info, "row_rewards": [float(k) for k in range(1, self.steps + 1 + self.extra)]}
        return obs, reward, terminated, truncated, info


def test_a_workflows_own_calls_step_no_env_and_take_no_row_reward(tokenizer):
    env = _RowRewards(gym.make("memrl/Echo-v0", num_turns=3, reward="exact"))
    env.extra = 0
    replies = iter(["note 1", "a", "note 2", "b", "note 3", "c"])

    async def respond(prompt_ids):
        return _reply(tokenizer, next(replies))

    wf = _NotesFirst(tokenizer)
    traj = asyncio.run(run_episode(env, wf, Task(seed=5, group_id="g", traj_id="t"), respond, max_calls=10))
    assert wf.notes == ["note 1", "note 2", "note 3"] and env.steps == 3
    # Six calls, three of them the workflow's own: the env's row rewards go to the three that stepped it, in order.
    assert [c.reward for c in traj.conversations] == [0.0, 1.0, 0.0, 2.0, 0.0, 3.0]
    assert traj.metrics["num_calls"] == 6 and traj.metrics["internal_calls"] == 3
    # Own calls count towards max_calls.
    replies = iter(["note 1", "a", "note 2", "b"])
    traj = asyncio.run(run_episode(env, _NotesFirst(tokenizer), Task(seed=5, group_id="g", traj_id="t"), respond,
                                   max_calls=3))
    assert traj.metrics["num_calls"] == 3 and traj.metrics["truncated"] == 1 and env.steps == 1
    # Row rewards that do not match the env steps are named.
    env.extra = 1
    replies = iter(["note 1", "a", "note 2", "b", "note 3", "c"])
    with pytest.raises(RuntimeError, match="row_rewards has 4 entries for 3 env steps; it must give one per step"):
        asyncio.run(run_episode(env, _NotesFirst(tokenizer), Task(seed=5, group_id="g", traj_id="t"), respond,
                                max_calls=10))


def test_run_sync_returns_the_result_unformatted_and_raises_what_the_coroutine_raises():
    formatted = []

    class Batch:
        def __repr__(self):
            formatted.append(self)
            return "Batch()"

    async def sample(n: int):
        await asyncio.sleep(0)
        if n < 0:
            raise ValueError("no episodes")
        return Batch()

    # On the main thread, asyncio.run(sample(1)) formats the finished task's result as it restores Ctrl-C's handler.
    batch = run_sync(sample(1))
    assert isinstance(batch, Batch) and formatted == []
    with pytest.raises(ValueError, match="no episodes"):
        run_sync(sample(-1))

    async def inside_a_running_loop():  # a notebook's thread: the coroutine runs in a thread of its own
        return type(run_sync(sample(2))).__name__

    assert asyncio.run(inside_a_running_loop()) == "Batch" and formatted == []


def test_env_steps_that_wait_share_one_thread_pool():
    from memrl.rollout.loop import _io_threads

    assert _io_threads() is _io_threads()  # one pool per process, not one per step
