"""The search-agent examples (MEM1, MemSearcher, MemPO, ReSum) and their CPU task: the paper presets, the experts within
the task's limits, and short runs of the CPU defaults."""

import json

import pytest
from transformers import AutoTokenizer

from memrl_envs.search import SearchEnv
from memrl.workflows import workflow_class
from memrl.experiment import train, use_engine
from memrl_tuned_examples import mem1_ppo, mempo_grpo, memsearcher_grpo, resum_grpo
from memrl_tuned_examples.warm_starts import search_sft
from memrl_tuned_examples.tasks.search import MAX_TOKENS, env_config, table_env_config, workflow_config


WORKFLOWS = ("mem1", "memsearcher", "mempo", "react", "react_truncated", "resum")


@pytest.mark.parametrize("example, workflow, reward, turns", [(mem1_ppo, "mem1", "em_sum", 6),
                                                              (memsearcher_grpo, "memsearcher", "f1", 5),
                                                              (mempo_grpo, "mempo", "answer_format", 16),
                                                              (resum_grpo, "resum", "em_sum", 60)])
def test_paper_presets_sized_for_gpus(example, workflow, reward, turns):
    cfg = example.paper_config("/ckpt/Qwen2.5-7B-Instruct", num_gpus=8, qa_path="/data/q.jsonl",
                               retriever="http://127.0.0.1:8000/retrieve")
    cfg.validate()
    assert cfg.training_cfg.optimizer.lr == example.PAPER["lr"] == 1e-6
    assert cfg.environment_cfg.env_config == {"num_objectives": 2, "max_turns": turns, "reward": reward,
                                              "data": "file", "qa_path": "/data/q.jsonl",
                                              "retriever": "http://127.0.0.1:8000/retrieve"}
    assert cfg.env_runners_cfg.workflow == workflow and cfg.env_runners_cfg.max_calls_per_episode == turns
    assert not {"template", "summary_prompt"} & set(cfg.env_runners_cfg.workflow_config)  # the paper's prompts
    # 8 GPUs asked for, 8 given: PPO's critic learners come out of the training half.
    learners = 2 if cfg.has_critic else 4
    assert cfg.learners_cfg.num_learners == learners and cfg.env_runners_cfg.num_engines == 4
    assert cfg.resources()[0]["GPU"] == 8


def test_resums_preset_runs_its_agents_settings_and_takes_a_summary_model():
    cfg = resum_grpo.paper_config("/ckpt/m", num_gpus=8, qa_path=None, retriever=None)
    run = cfg.env_runners_cfg
    assert run.workflow_config == {"max_context_tokens": 32 * 1024 - 1000}  # the policy summarizes
    assert (run.sampling.temperature, run.sampling.top_p, run.max_calls_per_episode) == (0.6, 0.95, 60)
    cfg = resum_grpo.paper_config("/ckpt/m", num_gpus=8, qa_path=None, retriever=None,
                                  summarizer="http://127.0.0.1:6002/v1", summarizer_model="ReSum-Tool-30B-A3B")
    assert cfg.env_runners_cfg.workflow_config == {"max_context_tokens": 31768,
                                                   "summarizer": "http://127.0.0.1:6002/v1",
                                                   "summarizer_model": "ReSum-Tool-30B-A3B"}
    cfg.validate()


def test_paper_presets_without_data_files_use_the_synthetic_encyclopedia_and_bm25():
    env = mem1_ppo.paper_config("/ckpt/m", num_gpus=2, qa_path=None, retriever=None).environment_cfg.env_config
    assert env == {"num_objectives": 2, "max_turns": 6, "reward": "em_sum"}


def test_paper_preset_on_mem1_multi_objective_rows_asks_each_rows_questions(tmp_path):
    row = {"prompt": [{"role": "user", "content": "Answer the following questions: a?; b?; c?\n"}],
           "reward_model": {"ground_truth": {"target": [["x"], ["y"], ["z"]]}}}
    (tmp_path / "train.jsonl").write_text(json.dumps(row) + "\n")
    env = mem1_ppo.paper_config("/ckpt/m", num_gpus=2, qa_path=str(tmp_path / "train.jsonl"),
                                retriever=None).environment_cfg.env_config
    assert env["num_objectives"] == 3 and env["data"] == "file"


def _expert_episode(tokenizer, workflow: str, env: SearchEnv, seed: int) -> tuple[float, dict, list[int], list[int]]:
    """One episode of the env's scripted expert written by `workflow` (with the env's expert memory, as SFT does):
    the reward, the final info, and each call's prompt and reply lengths in tokens."""
    obs, info = env.reset(seed=seed)
    wf = workflow_class(workflow)(tokenizer, **workflow_config(workflow))
    wf.reset(obs, info)
    prompts, replies, done = [], [], False
    while not done:
        prompts.append(len(wf.prompt_ids()))
        reply = tokenizer.encode(wf.expert_response(env.expert_action(), memory=env.expert_memory()),
                                 add_special_tokens=False)
        replies.append(len(reply))
        action, _ = wf.on_response(reply + [tokenizer.eos_token_id])
        if action is None:  # ReSum's summary call: no env step
            continue
        obs, reward, terminated, truncated, info = env.step(action)
        done = terminated or truncated
        if not done:
            wf.observe(obs, info)
    return reward, info, prompts, replies


@pytest.mark.parametrize("workflow", WORKFLOWS)
def test_cpu_task_experts_earn_full_reward_within_the_token_limits(tiny_checkpoint, workflow):
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    for seed in range(5):
        reward, _, prompts, replies = _expert_episode(tokenizer, workflow, SearchEnv(**env_config()), seed)
        assert max(prompts) < 600
        assert max(replies) < MAX_TOKENS  # the stop token still fits
        assert reward == 2.0  # em_sum over the two questions


@pytest.mark.parametrize("workflow", WORKFLOWS)
def test_table_task_asks_one_hop_questions_that_the_noting_expert_answers_in_full(tiny_checkpoint, workflow):
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    assert search_sft.MULTI.table_task and search_sft.MULTI.expert_notes and max(search_sft.MULTI.objectives) == 8
    for seed in range(3):
        env = SearchEnv(**table_env_config(8), expert_notes=True)
        reward, info, *_ = _expert_episode(tokenizer, workflow, env, seed)
        assert all(len(q.queries) == 1 for q in env.questions)  # one hop each
        # Eight searches at most and the answer, well inside the 2N + 2 = 18 turns.
        assert reward == 8.0 and info["metrics"]["num_turns"] == info["metrics"]["num_searches"] + 1 <= 9


@pytest.mark.parametrize("example", [mem1_ppo, memsearcher_grpo, mempo_grpo, resum_grpo])
def test_gpu_runs_need_a_model(example, monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["x", "--num-gpus", "2"])
    with pytest.raises(SystemExit):
        example.main()
    assert "--num-gpus needs --model" in capsys.readouterr().err


def test_cpu_task_names_bad_workflows():
    with pytest.raises(ValueError, match="workflow='memagent' is not allowed"):
        workflow_config("memagent")


@pytest.mark.slow
@pytest.mark.parametrize("example", [mem1_ppo, memsearcher_grpo, mempo_grpo, resum_grpo])
def test_short_run_of_the_cpu_default(ray_session, tmp_path, example):
    # On the torch engine, the env runner and the learner, all in this process: the example's env, workflow, reward and
    # evaluation are the point here; vLLM serving training end to end is tests/algorithms/test_algorithm.py's, learner
    # actors and ZeRO-3 over two ranks tests/learner's and tests/algorithms', runner actors tests/rollout's.
    cfg = (use_engine(example.config(), "torch")
           .env_runners(num_env_runners=0, num_engines=0, num_envs_per_env_runner=8)
           .learners(num_learners=0)
           .training(tasks_per_iteration=2, group_size=1 if example is mem1_ppo else 4)
           .evaluation(evaluation_num_tasks=4, evaluation_num_envs_per_env_runner=4))
    summary = train(cfg, iterations=2, out=tmp_path)
    assert len(summary["reward_per_iteration"]) == 2
    # The shipped warm-start already follows the format: it searches and answers before any RL.
    assert summary["eval_before"]["format_ok_mean"] > 0.5 and summary["eval_before"]["num_searches_mean"] >= 1
    assert summary["eval_after"]["num_tasks"] == 4
    assert (tmp_path / "model" / "config.json").is_file()
