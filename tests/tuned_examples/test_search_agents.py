"""The search-agent examples: the CPU task, the MemPO presets, the warm-start build's short form and the Table-1
evaluation, run for real on small sizes."""

import json

import pytest
from transformers import AutoTokenizer

from memrl_envs.search import SearchEnv
from memrl.checkpoints import portable
from memrl.algorithms.sft import SUMMARY_FILE
from memrl.workflows import workflow_class
from memrl_tuned_examples import mem1_ppo, mempo_grpo, memsearcher_grpo, search_eval, search_sft
from memrl.experiment import train
from memrl_tuned_examples.search_agents import MAX_TOKENS, env_config, table_env_config, warm_start, workflow_config

WORKFLOWS = ("mem1", "memsearcher", "mempo", "react", "react_truncated")


@pytest.mark.parametrize("example, workflow, reward, turns", [(mem1_ppo, "mem1", "em_sum", 6),
                                                              (memsearcher_grpo, "memsearcher", "f1", 5),
                                                              (mempo_grpo, "mempo", "answer_format", 16)])
def test_paper_presets_sized_for_gpus(example, workflow, reward, turns):
    cfg = example.paper_config("/ckpt/Qwen2.5-7B-Instruct", num_gpus=8, qa_path="/data/q.jsonl",
                               retriever="http://127.0.0.1:8000/retrieve")
    cfg.validate()
    assert cfg.training_cfg.optimizer.lr == example.PAPER["lr"] == 1e-6
    assert cfg.environment_cfg.env_config == {"num_objectives": 2, "max_turns": turns, "reward": reward,
                                              "data": "file", "qa_path": "/data/q.jsonl",
                                              "retriever": "http://127.0.0.1:8000/retrieve"}
    assert cfg.env_runners_cfg.workflow == workflow and cfg.env_runners_cfg.max_calls_per_episode == turns
    assert "template" not in cfg.env_runners_cfg.workflow_config  # the paper's prompt
    assert cfg.learners_cfg.num_learners == 4 and cfg.env_runners_cfg.num_engines == 4


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


@pytest.mark.parametrize("example", [mem1_ppo, memsearcher_grpo, mempo_grpo])
def test_gpu_runs_need_a_model(example, monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["x", "--num-gpus", "2"])
    with pytest.raises(SystemExit):
        example.main()
    assert "--num-gpus needs --model" in capsys.readouterr().err


def test_cpu_task_names_bad_workflows():
    with pytest.raises(ValueError, match="workflow='memagent' is not allowed"):
        workflow_config("memagent")


@pytest.mark.slow
def test_warm_start_build_short_form(ray_session, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # earlier stages go under runs/
    stages = (search_sft.Stage(2, 4), search_sft.Stage(1, 6, objectives=(1, 3)))
    summary = search_sft.build_all("mempo", tmp_path / "mempo", stages, num_eval_tasks=4)
    written = json.loads((tmp_path / "mempo" / SUMMARY_FILE).read_text())
    config = written["config"]
    assert config["env_runners"]["workflow"] == "mempo" and written["final"]["step"] == summary["final"]["step"] == 1
    # The second stage continues from the first one's weights, on more episodes.
    (first,) = written["earlier_stages"]
    assert first["final"]["step"] == 2 and first["config"]["training"]["num_train_tasks"] == 4
    assert config["learners"]["model_path"] == first["out"]
    assert config["training"]["num_train_tasks"] == 6
    # ... and mixes one- and three-question episodes, each with the CPU task's turn budget for its size.
    assert first["config"]["training"]["task_options"] == []
    assert first["config"]["environment"]["env_config"]["num_objectives"] == 2
    assert config["environment"]["env_config"]["num_objectives"] == 3
    assert config["training"]["task_options"] == [{"num_objectives": 1, "max_turns": 4},
                                                  {"num_objectives": 3, "max_turns": 8}]
    # --multi's build goes on from a finished warm-start and keeps all its stages.
    multi = search_sft.build_multi("mempo", tmp_path / "multi", num_eval_tasks=4,
                                   stage=search_sft.Stage(1, 4, (1, 4), expert_notes=True), base=tmp_path / "mempo")
    assert json.loads((tmp_path / "multi" / SUMMARY_FILE).read_text()) == portable(multi)  # paths under the cwd
    assert multi["out"] == str(tmp_path / "multi") and portable(multi)["out"] == "multi"
    assert multi["config"]["learners"]["model_path"] == str((tmp_path / "mempo").resolve())
    assert [s["final"]["step"] for s in multi["earlier_stages"]] == [2, 1]
    assert [o["num_objectives"] for o in multi["config"]["training"]["task_options"]] == [1, 4]
    assert multi["config"]["environment"]["env_config"]["expert_notes"] is True  # the expert keeps per-question notes
    assert "expert_notes" not in config["environment"]["env_config"]


def test_table_one_measures_the_shipped_policies_of_every_question_count(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no RL runs here
    policies = search_eval.default_policies()
    assert [(name, workflow) for name, _, workflow in policies] == [
        ("MEM1", "mem1"), ("MemSearcher", "memsearcher"), ("MemPO", "mempo"), ("ReAct", "react"),
        ("ReAct (truncated)", "react_truncated")]
    for _, path, workflow in policies:
        assert path == warm_start(workflow.removesuffix("_truncated"), multi=True)
        summary = json.loads((path / SUMMARY_FILE).read_text())
        assert [o["num_objectives"] for o in summary["config"]["training"]["task_options"]] == [1, 2, 4, 8]
        assert summary["earlier_stages"]  # it went on from the two-question warm-start
    # The memory agents and the ReAct baselines they are compared with went through the same multi-count stage: steps x
    # batch, episodes and schedule.
    multi = search_sft.MULTI
    for workflow in ("mem1", "mempo", "memsearcher", "react"):
        train = json.loads((warm_start(workflow, multi=True) / SUMMARY_FILE).read_text())["config"]["training"]
        assert (train["steps"], train["batch_size"], train["num_train_tasks"], train["lr_schedule"]) == \
            (multi.steps, 32, multi.num_train_tasks, multi.lr_schedule)
        assert train["lr_decay_steps"] == multi.steps


@pytest.mark.slow
def test_table_one_rows_plot_and_ratio(ray_session, tiny_checkpoint, tmp_path):
    policies = [("MEM1", tiny_checkpoint, "mem1"), ("ReAct", tiny_checkpoint, "react")]
    result = search_eval.run(policies, [1, 2], num_tasks=3, engine="torch", out=tmp_path)
    rows = result["rows"]
    assert [(r["policy"], r["objectives"]) for r in rows] == [("MEM1", 1), ("MEM1", 2), ("ReAct", 1), ("ReAct", 2)]
    for r in rows:
        assert r["num_tasks"] == 3 and 0 <= r["em_ci_low"] <= r["em"] <= r["em_ci_high"] <= 1
        assert r["peak_tokens"] <= r["peak_tokens_max"] and r["dependency"] > 0 and r["seconds_per_task"] > 0
        assert r["context_overflow"] == 0.0  # two questions fit the tiny model's 4096 positions
    assert list(result["react_peak_ratio"]) == ["MEM1 @ 2"]
    assert list(result["peak_growth"]) == ["MEM1 1 -> 2", "ReAct 1 -> 2"]
    assert result["peak_growth"]["ReAct 1 -> 2"] == rows[3]["peak_tokens"] / rows[2]["peak_tokens"]
    table, budgets = (tmp_path / "search_table.md").read_text().split("\n\n")
    assert table.count("\n") == 2 + len(rows) - 1
    # Then what each policy was trained with (a freshly built model: nothing recorded).
    assert budgets.splitlines()[2:] == ["| MEM1 | not recorded |", "| ReAct | not recorded |"]
    assert result["budgets"] == {"MEM1": "not recorded", "ReAct": "not recorded"}
    assert (tmp_path / "search_table.png").stat().st_size > 10_000


@pytest.mark.slow
@pytest.mark.parametrize("example", [mem1_ppo, memsearcher_grpo, mempo_grpo])
def test_short_run_of_the_cpu_default(ray_session, tmp_path, example):
    cfg = (example.config()
           .env_runners(num_envs_per_env_runner=8)
           .training(tasks_per_iteration=2, group_size=1 if example is mem1_ppo else 4)
           .evaluation(evaluation_num_tasks=8, evaluation_num_envs_per_env_runner=8))
    summary = train(cfg, iterations=2, out=tmp_path)
    assert len(summary["reward_per_iteration"]) == 2
    # The shipped warm-start already follows the format: it searches and answers before any RL.
    assert summary["eval_before"]["format_ok_mean"] > 0.5 and summary["eval_before"]["num_searches_mean"] >= 1
    assert summary["eval_after"]["num_tasks"] == 8
    assert (tmp_path / "model" / "config.json").is_file()
