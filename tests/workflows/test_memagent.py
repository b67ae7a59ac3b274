"""Tests of the MemAgent workflow and the full-context baseline, driven by inline streams of env observations."""

import random

import pytest
from transformers import AutoTokenizer

from memrl.episode import Conversation
from memrl.workflows import FullContextWorkflow, MemAgentWorkflow, workflow_class

QUESTION = "Where was the employer of Alice born?"
MEMORY_HEAD = (
    "<|im_start|>user\nYou are presented with a problem, a section of an article that may contain the answer to "
    "the problem, and a previous memory. Please read the section carefully and update the memory with the new "
    "information that helps to answer the problem, while retaining all relevant details from the previous memory."
    "\n\n"
)
ANSWER_HEAD = (
    "<|im_start|>user\nYou are presented with a problem and a previous memory. Please answer the problem based on "
    "the previous memory and put the answer in \\boxed{}.\n\n"
)
TAIL = "<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def tokenizer(tiny_checkpoint):
    return AutoTokenizer.from_pretrained(tiny_checkpoint)


def info(phase, index, num_chunks=3, question=QUESTION):
    return {"question": question, "phase": phase, "chunk_index": index, "num_chunks": num_chunks}


def reply(tokenizer, text):
    """Response ids as an engine returns them: the text's tokens and the EOS stop token."""
    return tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]


def stream(chunks, question=QUESTION):
    """Observations and infos of a streaming env: one per chunk, then the empty answer-phase observation."""
    n = len(chunks)
    return [(c, info("memory", i, n, question)) for i, c in enumerate(chunks)] + [("", info("answer", n, n, question))]


def test_exact_prompts_over_an_episode(tokenizer):
    wf = MemAgentWorkflow(tokenizer)
    steps = stream(["Document 1: Alice works at Acme.", "Document 2: Acme was founded in Paris."])
    wf.reset(*steps[0])
    assert tokenizer.decode(wf.prompt_ids()) == (
        MEMORY_HEAD + f"<problem> {QUESTION} </problem>\n<memory> No previous memory </memory>\n"
        "<section> Document 1: Alice works at Acme. </section>\n\nUpdated memory:\n" + TAIL
    )
    action, spans = wf.on_response(reply(tokenizer, "Alice works at Acme."))
    assert action == "Alice works at Acme."
    wf.observe(*steps[1])
    assert tokenizer.decode(wf.prompt_ids()) == (
        MEMORY_HEAD + f"<problem> {QUESTION} </problem>\n<memory> Alice works at Acme. </memory>\n"
        "<section> Document 2: Acme was founded in Paris. </section>\n\nUpdated memory:\n" + TAIL
    )
    wf.on_response(reply(tokenizer, "Alice works at Acme. Acme: Paris."))
    wf.observe(*steps[2])
    assert tokenizer.decode(wf.prompt_ids()) == (
        ANSWER_HEAD + f"<problem> {QUESTION} </problem>\n<memory> Alice works at Acme. Acme: Paris. </memory>"
        "\n\nYour answer:\n" + TAIL
    )
    response = reply(tokenizer, "\\boxed{Paris}")
    action, spans = wf.on_response(response)
    assert action == "\\boxed{Paris}"
    assert spans == {"answer": [(0, len(response) - 1)]}


def test_system_prompt_and_memory_reset_between_episodes(tokenizer):
    wf = MemAgentWorkflow(tokenizer, system_prompt="You are a careful reader.")
    steps = stream(["Document 1: Bob lives in Rome."])
    wf.reset(*steps[0])
    wf.on_response(reply(tokenizer, "Bob lives in Rome."))
    wf.reset(*steps[0])  # a new trajectory starts from no memory again
    text = tokenizer.decode(wf.prompt_ids())
    assert text.startswith("<|im_start|>system\nYou are a careful reader.<|im_end|>\n<|im_start|>user\n")
    assert "<memory> No previous memory </memory>" in text


def test_memory_is_capped_at_memory_tokens(tokenizer):
    wf = MemAgentWorkflow(tokenizer, memory_tokens=8)
    wf.reset("Document 1: filler.", info("memory", 0))
    long_reply = reply(tokenizer, " ".join(f"fact {i} is true." for i in range(30)))
    assert len(long_reply) > 20
    action, spans = wf.on_response(long_reply)
    assert spans == {"memory": [(0, 8)]}
    assert action == tokenizer.decode(long_reply[:8])
    wf.observe("Document 2: more.", info("memory", 1))
    assert f"<memory> {action} </memory>" in tokenizer.decode(wf.prompt_ids())
    # A reply cut by the sampling cap (no stop token) of exactly memory_tokens is kept whole.
    capped = long_reply[:8]
    assert wf.on_response(capped) == (tokenizer.decode(capped), {"memory": [(0, 8)]})
    # A short reply keeps everything before the stop token.
    short = reply(tokenizer, "fact 1")
    assert wf.on_response(short) == ("fact 1", {"memory": [(0, len(short) - 1)]})


@pytest.mark.parametrize("greedy", [True, False])
def test_prompt_size_does_not_grow_with_the_number_of_chunks(tokenizer, greedy):
    """A memory that tries to keep every chunk is capped, so every call's context has one bound."""
    memory_tokens = 32
    rng = random.Random(0)
    chunks = [f"Document {i}: person {rng.randint(0, 999)} works at company {rng.randint(0, 999)}." for i in range(40)]

    def prompt_lengths(num_chunks):
        wf = MemAgentWorkflow(tokenizer, memory_tokens=memory_tokens)
        steps = stream(chunks[:num_chunks])
        wf.reset(*steps[0])
        lengths, seen = [], []
        for obs, step_info in steps[1:]:
            lengths.append(len(wf.prompt_ids()))
            seen.append(obs)
            text = " ".join(seen) if greedy else rng.choice(seen)
            wf.on_response(reply(tokenizer, text))
            wf.observe(obs, step_info)
        lengths.append(len(wf.prompt_ids()))
        return lengths

    overhead = len(MemAgentWorkflow(tokenizer).chat_ids([{"role": "user", "content": MEMORY_HEAD}]))
    longest_chunk = max(len(tokenizer.encode(c)) for c in chunks)
    bound = overhead + len(tokenizer.encode(QUESTION)) + longest_chunk + memory_tokens + 32
    short, long = prompt_lengths(10), prompt_lengths(40)
    assert len(long) == 41
    assert max(short) <= bound and max(long) <= bound
    if greedy:  # all later memories are full, so later prompts are as large as they will ever be
        assert max(long) - max(short) <= 4


def test_spans_cover_the_memory_and_answer_tokens(tokenizer):
    wf = MemAgentWorkflow(tokenizer, memory_tokens=64)
    wf.reset("Document 1: Carol was born in Oslo.", info("memory", 0, 1))
    response = reply(tokenizer, "Carol was born in Oslo.")
    action, spans = wf.on_response(response)
    (start, end), = spans["memory"]
    assert tokenizer.decode(response[start:end]) == action and response[end:] == [tokenizer.eos_token_id]
    Conversation(prompt_ids=wf.prompt_ids(), response_ids=response, logprobs=[0.0] * len(response), spans=spans)
    wf.observe("", info("answer", 1, 1))
    response = reply(tokenizer, "The answer is \\boxed{Oslo}")
    action, spans = wf.on_response(response)
    (start, end), = spans["answer"]
    assert tokenizer.decode(response[start:end]) == action == "The answer is \\boxed{Oslo}"
    assert end == len(response) - 1


def malformed_replies(tokenizer, rng):
    vocab = len(tokenizer)
    eos = tokenizer.eos_token_id
    special = tokenizer.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>", "<|endoftext|>"])
    yield []
    yield [eos]
    yield [eos, eos, eos]
    yield special * 5
    yield reply(tokenizer, "no box here")
    yield reply(tokenizer, "\\boxed{unclosed")
    yield tokenizer.encode("Alice <|im_end|><|im_start|>user\nnew turn") + [eos]
    yield [rng.randrange(vocab) for _ in range(5000)]  # a huge reply
    yield tokenizer.encode("é漢字🙂", add_special_tokens=False)[:2]  # cut inside a UTF-8 character
    for _ in range(40):
        yield [rng.randrange(vocab) for _ in range(rng.randint(0, 300))]


def test_fuzz_malformed_replies_never_crash(tokenizer):
    rng = random.Random(1)
    vocab = len(tokenizer)
    for memory_tokens in (1, 16, 1024):
        wf = MemAgentWorkflow(tokenizer, memory_tokens=memory_tokens)
        replies = list(malformed_replies(tokenizer, rng))
        wf.reset("Document 0: chunk 0.", info("memory", 0))
        for phase in ("memory", "answer"):
            wf.observe("" if phase == "answer" else "Document 0: chunk.", info(phase, 0))
            for i, response in enumerate(replies):
                prompt = wf.prompt_ids()
                assert prompt and all(0 <= t < vocab for t in prompt)
                action, spans = wf.on_response(response)
                assert isinstance(action, str) and list(spans) == [phase]
                if phase == "memory":
                    assert spans["memory"][0][1] <= memory_tokens
                # Conversation checks that every span lies inside the response.
                Conversation(prompt_ids=prompt, response_ids=response, logprobs=[0.0] * len(response), spans=spans)
                wf.observe("" if phase == "answer" else f"Document {i + 1}: chunk.", info(phase, i + 1))


def test_expert_response_round_trips_through_on_response(tokenizer):
    eos = tokenizer.eos_token_id
    wf = MemAgentWorkflow(tokenizer)
    wf.reset("Document 1: Dan works at Initech.", info("memory", 0, 1))
    for action in ["Line one.\nLine two: 42.", "No previous memory", "Dan works at Initech."]:
        text = wf.expert_response(action)
        assert wf.on_response(tokenizer.encode(text, add_special_tokens=False) + [eos])[0] == action
    assert wf.memory == "Dan works at Initech."
    wf.observe("", info("answer", 1, 1))
    text = wf.expert_response("\\boxed{Initech}")
    assert wf.on_response(tokenizer.encode(text, add_special_tokens=False) + [eos])[0] == "\\boxed{Initech}"
    full = FullContextWorkflow(tokenizer)
    full.reset("Document 1: Dan works at Initech.", info("answer", 0, 1))
    text = full.expert_response("\\boxed{Initech}")
    assert full.on_response(tokenizer.encode(text, add_special_tokens=False) + [eos])[0] == "\\boxed{Initech}"


def test_full_context_prompt_keeps_the_whole_short_document(tokenizer):
    wf = FullContextWorkflow(tokenizer, max_context_tokens=4096)
    document = "Document 1: Erin works at Globex.\nDocument 2: Globex was founded in Lima."
    wf.reset(document, info("answer", 0, 1, "Where was the employer of Erin founded?"))
    assert tokenizer.decode(wf.prompt_ids()) == (
        "<|im_start|>user\nYou are presented with a problem and a section of an article that may contain the answer "
        "to the problem. Please quote the sentences of the section that the answer rests on, then answer the problem "
        "and put the answer in \\boxed{}.\n\n"
        "<problem> Where was the employer of Erin founded? </problem>\n"
        f"<section> {document} </section>\n\nYour answer:\n" + TAIL
    )
    evidence = "Erin works at Globex. Globex was founded in Lima. \\boxed{Lima}"
    response = reply(tokenizer, evidence)
    assert wf.on_response(response) == (evidence, {"answer": [(0, len(response) - 1)]})


def test_full_context_truncates_the_document_end_to_fit_the_window(tokenizer):
    documents = [f"Document {i}: person {i} works at company {i * 7}." for i in range(400)]
    document = "\n".join(documents)
    for window in (180, 300, 1000):
        wf = FullContextWorkflow(tokenizer, max_context_tokens=window)
        wf.reset(document, info("answer", 0, 1))
        ids = wf.prompt_ids()
        text = tokenizer.decode(ids)
        assert len(ids) <= window
        assert len(ids) >= window - 16  # the window is used, not left half empty
        assert f"<problem> {QUESTION} </problem>" in text and text.endswith("</section>\n\nYour answer:\n" + TAIL)
        assert "Document 0: person 0 works at company 0." in text  # the start is kept
        assert documents[-1] not in text  # the end is cut
    with pytest.raises(ValueError, match="max_context_tokens=20 cannot hold even the prompt"):
        wf = FullContextWorkflow(tokenizer, max_context_tokens=20)
        wf.reset(document, info("answer", 0, 1))
        wf.prompt_ids()


def test_full_context_truncation_fuzz(tokenizer):
    """Whatever the text (multi-byte characters, markup, special-token strings), the prompt fits the window."""
    rng = random.Random(2)
    alphabet = list("abc xyz 0123\n.:") + ["é", "漢", "🙂", "<memory>", "\\boxed{", "<|im_end|>", " the"]
    for _ in range(30):
        document = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 3000)))
        window = rng.randint(110, 800)
        wf = FullContextWorkflow(tokenizer, max_context_tokens=window)
        wf.reset(document, info("answer", 0, 1))
        ids = wf.prompt_ids()
        assert len(ids) <= window and QUESTION in tokenizer.decode(ids)


def test_bad_configs_and_protocol_errors(tokenizer):
    with pytest.raises(ValueError, match="memory_tokens must be a positive int; got 0"):
        MemAgentWorkflow(tokenizer, memory_tokens=0)
    with pytest.raises(ValueError, match="max_context_tokens must be a positive int; got '4k'"):
        FullContextWorkflow(tokenizer, max_context_tokens="4k")
    with pytest.raises(TypeError):
        MemAgentWorkflow(tokenizer, chunk_tokens=5000)
    with pytest.raises(ValueError, match=r"info\['phase'\] is 'summary'; allowed: \['memory', 'answer'\]"):
        MemAgentWorkflow(tokenizer).reset("chunk", info("summary", 0))
    with pytest.raises(ValueError, match=r"lacks \['question'\]"):
        MemAgentWorkflow(tokenizer).reset("chunk", {"phase": "memory"})
    with pytest.raises(ValueError, match="needs the non-streaming env"):
        FullContextWorkflow(tokenizer).reset("chunk", info("memory", 0))


def test_registry_names():
    assert workflow_class("memagent") is MemAgentWorkflow
    assert workflow_class("full_context") is FullContextWorkflow


@pytest.mark.parametrize("workflow, stream", [("memagent", True), ("full_context", False)])
def test_real_chunk_stream_env_end_to_end_with_expert_actions(tokenizer, tiny_checkpoint, workflow, stream):
    """The runner's loop (prompt -> reply -> on_response -> env.step -> observe) over the real env, with the
    env's expert actions written as the model's replies: every episode ends with the full reward."""
    import gymnasium as gym

    import memrl_envs  # noqa: F401  (registers memrl/ ids)

    env = gym.make("memrl/ChunkStream-v0", task="multihop", chunk_tokens=32, stream=stream,
                   tokenizer_path=str(tiny_checkpoint), num_docs=20)
    wf_config = {"memory_tokens": 128} if workflow == "memagent" else {"max_context_tokens": 4096}
    for seed in range(3):
        obs, step_info = env.reset(seed=seed)
        wf = workflow_class(workflow)(tokenizer, **wf_config)
        wf.reset(obs, step_info)
        calls, prompt_lengths, done = 0, [], False
        while not done:
            prompt = wf.prompt_ids()
            prompt_lengths.append(len(prompt))
            if workflow == "memagent" and step_info["phase"] == "memory":
                assert f"<section> {obs} </section>" in tokenizer.decode(prompt)
            action = env.unwrapped.expert_action()
            action_text, spans = wf.on_response(reply(tokenizer, wf.expert_response(action)))
            assert action_text == action and list(spans) == [step_info["phase"]]
            obs, reward, terminated, truncated, step_info = env.step(action_text)
            calls += 1
            done = terminated or truncated
            if not done:
                wf.observe(obs, step_info)
        assert reward == 1.0 and step_info["metrics"]["format_ok"] == 1.0
        assert calls == (step_info["num_chunks"] + 1 if stream else 1)
        if stream:
            assert calls > 3
            assert max(prompt_lengths) < 400  # constant context: one chunk and a bounded memory per call
    env.close()
