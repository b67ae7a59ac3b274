"""MemPO: the memory reward from the workflow's probes, and the memory advantage on exactly the <mem> tokens."""

from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from memrl_envs.search import SearchEnv
from memrl.learner.advantages import add_memory_advantages
from memrl.episode import Conversation, Trajectory
from memrl.learner.advantages import memory_rewards
from memrl.learner.batching import pad_rows
from memrl.learner.rows import build_rows
from memrl.workflows.search import PASSAGE, MemPOWorkflow
from memrl_tuned_examples.tasks.search import env_config, workflow_config


def test_memory_reward_is_the_gain_in_geometric_mean_probability():
    # Gold answer of two tokens: p = (0.5, 0.8) after the memory, (0.1, 0.4) after the context before it.
    reward = memory_rewards([np.log([0.5, 0.8])], [np.log([0.1, 0.4])])
    assert reward[0] == pytest.approx(np.sqrt(0.4) - np.sqrt(0.04))
    with pytest.raises(ValueError, match="same non-empty gold answer"):
        memory_rewards([np.log([0.5])], [np.log([0.1, 0.2])])
    with pytest.raises(ValueError, match="pairs"):
        memory_rewards([np.log([0.5])], [])


def _conversation(prompt, response, span=None, answer_prob=None):
    """A call; with a span, it wrote a memory whose probes score the gold answer [90, 91] (probability given by
    the fake scorer below through the memory probe's first token)."""
    conv = Conversation(prompt_ids=prompt, response_ids=response, logprobs=np.zeros(len(response)))
    if span is not None:
        conv.spans = {"mem": [span]}
        conv.probes = {"memory": [answer_prob, 1], "prefix": [0, 1], "answer": [90, 91]}
    return conv


def _fake_score(rows):
    """Per-token logprob log(p) where p is a probe context's first token in percent (prefix contexts start with 0,
    scored at p = 0.1)."""
    return [np.full(len(r["response_ids"]), np.log(r["prompt_ids"][0] / 100 if r["prompt_ids"][0] else 0.1))
            for r in rows]


@pytest.mark.parametrize("stitched, coef", [(False, 1.0), (True, 1.0), (True, 0.25)])
def test_memory_advantage_lands_on_exactly_the_mem_tokens(stitched, coef):
    # One group, two trajectories. Trajectory 0 writes a memory worth p = 0.9 (tokens 1..3 of its first reply)
    # and one worth 0.3; trajectory 1 one worth 0.4 and a final call without a memory.
    t0 = Trajectory([_conversation([1, 2], [10, 11, 12, 13, 14], span=(1, 4), answer_prob=90),
                     _conversation([1, 2, 5], [20, 21, 22], span=(0, 2), answer_prob=30)], reward=1.0, group_id="g")
    t1 = Trajectory([_conversation([1, 2], [30, 31, 32], span=(2, 3), answer_prob=40),
                     _conversation([1, 2, 6], [40, 41])], reward=0.0, group_id="g")
    trajectories = [t0, t1]
    batch = build_rows(trajectories, stitched=stitched)
    batch.assign_advantages(np.array([0.7, -0.7]))
    rows = batch.rows
    before = [row["advantages"].copy() for row in rows]
    figures = add_memory_advantages(trajectories, batch, _fake_score, coef)

    rewards = np.array([0.9, 0.3, 0.4]) - 0.1
    expected = coef * (rewards - rewards.mean()) / (rewards.std(ddof=1) + 1e-6)
    assert figures["memory_count"] == 3 and figures["memory_reward_mean"] == pytest.approx(rewards.mean())
    # Where each conversation's response sits in its row: plain rows are the conversations themselves; a stitched
    # row holds a trajectory's replies after the context tokens each later call added (here 1 token each).
    if stitched:
        places = {(0, 0): (0, 0), (0, 1): (0, 6), (1, 0): (1, 0), (1, 1): (1, 4)}
    else:
        places = {(0, 0): (0, 0), (0, 1): (1, 0), (1, 0): (2, 0), (1, 1): (3, 0)}
    spans = {(0, 0): (1, 4, expected[0]), (0, 1): (0, 2, expected[1]), (1, 0): (2, 3, expected[2])}
    added = [np.zeros_like(b) for b in before]
    for key, (start, end, advantage) in spans.items():
        row, offset = places[key]
        added[row][offset + start: offset + end] = advantage
    for row, old, extra in zip(rows, before, added, strict=True):
        np.testing.assert_allclose(row["advantages"], old + extra, rtol=1e-6, atol=1e-6)
    assert sum(int(np.count_nonzero(a)) for a in added) == 3 + 2 + 1  # the <mem> tokens, nothing else


def test_memory_advantage_coef_is_a_mempo_training_setting():
    from memrl.algorithms import MemPOConfig

    def config(**training):
        return MemPOConfig().environment("memrl/Search-v0").learners(model_path=str(WARM_START)).training(**training)

    cfg = config(memory_advantage_coef=0.25, lr=1e-4)
    cfg.validate()
    assert cfg.training_cfg.memory_advantage_coef == 0.25 and cfg.training_cfg.norm_adv_by_std  # GRPO's defaults kept
    assert MemPOConfig().training_cfg.memory_advantage_coef == 1.0  # the paper's A^T + A^M
    with pytest.raises(ValueError, match="memory_advantage_coef=-0.5 is not allowed; it must be >= 0"):
        config(memory_advantage_coef=-0.5).validate()


def test_no_probes_leave_advantages_alone():
    trajectories = [Trajectory([_conversation([1, 2], [3, 4])], reward=1.0, group_id="g")]
    batch = build_rows(trajectories)
    batch.assign_advantages(np.array([0.5]))
    assert add_memory_advantages(trajectories, batch, _fake_score) == {"memory_count": 0.0}
    np.testing.assert_allclose(batch.rows[0]["advantages"], [0.5, 0.5])


WARM_START = Path(__file__).resolve().parents[2] / "tuned_examples" / "checkpoints" / "mempo_search_sft"


def _score_with(model):
    def score(rows):
        batch = pad_rows(rows)
        with torch.no_grad():
            logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                           position_ids=batch.position_ids).logits
        return batch.split(batch.logprobs_and_entropy(batch.at_response(logits))[0])
    return score


def test_memory_holding_the_answer_earns_the_higher_reward():
    """Hand-built memories for real questions, scored by the shipped MemPO warm-start through the workflow's probes:
    a memory with the gold facts earns more than one without them, on average and on almost every question (the
    warm-start's last stage trained on the probe: the answers right after the questions and a memory)."""
    tokenizer = AutoTokenizer.from_pretrained(WARM_START)
    score = _score_with(AutoModelForCausalLM.from_pretrained(WARM_START, dtype=torch.float32).eval())
    rewards = {"with": [], "without": []}
    for seed in range(16):
        env = SearchEnv(**env_config())
        obs, info = env.reset(seed=seed)
        facts = []  # the passage each of the expert's searches finds first: every gold fact
        while not (action := env.expert_action()).startswith("<answer>"):
            facts.append(PASSAGE.search(env.step(action)[0]).group(1))
        for name, memory in (("with", "\n".join(facts)), ("without", "Nothing found yet.")):
            wf = MemPOWorkflow(tokenizer, **workflow_config("mempo"))
            wf.reset(obs, info)
            wf.prompt_ids()
            wf.on_response(tokenizer.encode(f"<mem>\n{memory}\n</mem>\n<think>\nx\n</think>\n<search>\ny\n</search>",
                                            add_special_tokens=False))
            (probe,) = wf.probes({"answers": [list(q.answers) for q in env.questions]})
            memory_lp, prefix_lp = score([{"prompt_ids": probe["memory"], "response_ids": probe["answer"]},
                                          {"prompt_ids": probe["prefix"], "response_ids": probe["answer"]}])
            rewards[name].append(memory_rewards([memory_lp], [prefix_lp])[0])
    with_facts, without = np.array(rewards["with"]), np.array(rewards["without"])
    assert with_facts.mean() > without.mean(), rewards
    assert (with_facts > without).sum() >= 14, rewards


@pytest.mark.slow
def test_mempo_iteration_from_the_warm_start(ray_session):
    """A real MemPO iteration: the warm-start writes <mem> blocks, the runners attach probes, the learners score them
    and train on stitched rows."""
    from memrl.algorithms import MemPOConfig
    from memrl_tuned_examples.tasks.search import MAX_TOKENS

    algo = (MemPOConfig()
            .environment("memrl/Search-v0", env_config={**env_config(), "reward": "answer_format"})
            .env_runners(num_env_runners=0, num_engines=0, num_envs_per_env_runner=4, workflow="mempo",
                         workflow_config=workflow_config("mempo"), engine="torch", max_tokens=MAX_TOKENS)
            .learners(model_path=str(WARM_START), num_learners=0, token_budget=8192)
            .training(lr=1e-5, tasks_per_iteration=2, group_size=4, stitch_trajectories=True)
            .debugging(seed=1)
            .build())
    result = algo.train()
    algo.stop()
    learners = result["learners"]
    assert learners["rows"] == 8  # one stitched row per trajectory
    # Most calls of the warm-start open with a <mem> block (after an invalid action it may answer at once), and each
    # becomes a scored memory.
    assert learners["memory_count"] >= 0.6 * result["env_runners"]["calls"]
    assert -1 <= learners["memory_reward_mean"] <= 1 and 0 < learners["memory_p_gold_mean"] <= 1
    assert learners["tokens"] == result["env_runners"]["new_tokens"]
