"""The search workflows' prompts (memrl.workflows.search): the papers' instructions in our words, and MemSearcher's
tool schema. Each task prompt has a {questions} field (literal braces doubled); a workflow's `template` argument
replaces it.
"""

MEM1_TEMPLATE = (
    "You will answer one or more complex questions by reasoning step by step, keeping a summary, and searching.\n\n"
    "At each step you see the questions, your cumulative summary of what is known so far, your latest search query "
    "and the results it returned (on the first step you see only the questions). At each step:\n\n"
    "1. Reason, and update a concise, cumulative summary inside <think> ... </think>. This summary is your only "
    "persistent memory: it must keep every essential fact from your previous <think> and from the <information> "
    "you were given.\n\n"
    "2. Then take exactly one action:\n"
    "- If any question is still unanswered, write one query for one question inside <search> ... </search>, as "
    "keywords or a short phrase. Search for one question at a time.\n"
    "- If every question is answered, give the final answers, separated by semicolons, inside "
    "<answer> answer1; answer2; ... </answer>. Keep each answer short: only the necessary words, no explanation.\n\n"
    "Important:\n"
    "- After the questions or an <information> block, always reply as <think> ... </think><search> ... </search> "
    "or <think> ... </think><answer> ... </answer>.\n"
    "- Never search several queries or questions at once.\n\n"
    "Answer the following questions:\n{questions}"
)
"""MEM1's multi-objective QA prompt (paper, appendix B.3, Prompt 1), in our words; the questions go at the end."""

MEMPO_TEMPLATE = (
    "You will answer one or more complex questions by reasoning step by step, keeping a summary, and searching. "
    "At each step you see the questions, a cumulative summary of the relevant information, and the results of the "
    "latest search (on the first step you see only the questions). At each step:\n\n"
    "1. Update a concise, cumulative summary inside <mem>\n...\n</mem>, then reason inside <think>\n...\n</think>. "
    "<mem> must keep every essential fact from the previous <mem> and the latest <information>.\n\n"
    "2. Then take exactly one action:\n"
    "- If any question is still unanswered, write one query for one question inside <search>\n...\n</search>.\n"
    "- If every question is answered, give the final answers, separated by semicolons, inside "
    "<answer>\nanswer1; answer2; ...\n</answer>. Keep each answer short, a word or a short phrase, with no "
    "explanation.\n\n"
    "Important:\n"
    "- The summary holds only concise, essential information about the questions taken from what you have seen; "
    "never your own background knowledge or your reasoning.\n"
    "- Follow exactly one of these structures: <mem>\n...\n</mem>\n<think>\n...\n</think>\n<search>\n...\n</search> "
    "or <mem>\n...\n</mem>\n<think>\n...\n</think>\n<answer>\n...\n</answer>.\n"
    "- Never search several queries or questions at once. Keep searching until you have found clear information "
    "that gives each answer.\n\n"
    "Answer the following questions:\n{questions}"
)
"""MemPO's training prompt (paper, Table 6), in our words; search results arrive in <information> blocks."""

REACT_TEMPLATE = (
    "Answer the following questions. Whenever you receive new information, first reason inside <think> ... "
    "</think>. If you lack knowledge, search by writing <search> query </search>; the results come back inside "
    "<information> ... </information>. Search for one question at a time, as often as you need. When you know "
    "every answer, write the answers, separated by semicolons and in the order of the questions, inside "
    "<answer> answer1; answer2; ... </answer>, without explanations.\n\n"
    "Questions:\n{questions}"
)
"""The full-history baselines' prompt: Search-R1's ReAct-style instructions with MEM1's multi-answer format."""

SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "wikipedia_search",
        "description": "Search Wikipedia and return the passages most relevant to the query.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "What to search for."}},
            "required": ["query"],
        },
    },
}
"""MemSearcher's search tool, as a JSON schema. The env fixes how many passages come back (its top_k), so the
authors' `top_n` argument is not offered; a call that passes it anyway still works."""

MEMSEARCHER_SYSTEM = (
    "You are a helpful assistant that answers questions by searching Wikipedia.\n\n"
    "# Tools\n\n"
    "You may call the function described inside <tools></tools>:\n"
    "<tools>\n{tool}\n</tools>\n\n"
    "To call it, write one JSON object with the function name and its arguments inside <tool_call></tool_call>:\n"
    '<tool_call>{{"name": "wikipedia_search", "arguments": {{"query": "..."}}}}</tool_call>\n\n'
    "The user gives the question inside <question></question> and your memory inside <memory></memory>: all you "
    "have found so far that helps to answer it. First think inside <think></think>; then either call the tool "
    "once, or, when you know the answer, write it inside \\boxed{{}}. If there are several questions, put all "
    "answers in one \\boxed{{}}, in the order of the questions, separated by semicolons.\n\n"
    "Each tool result comes back inside <tool_response></tool_response>. Then first write the updated memory "
    "inside <memory></memory>, at most {memory_tokens} tokens: keep every relevant detail of the previous memory "
    "and add the new information that helps to answer the question. Then think and act again."
)
"""MemSearcher's system prompt: the search tool, the call format, the \\boxed{} answer and the memory rule."""

MEMSEARCHER_USER = "<question>{question}</question>\n\n<memory>{memory}</memory>"
"""MemSearcher's user message (paper, section 3.1): the question and the memory, which starts empty."""

TOOL_RESPONSE = (
    "<tool_response>{observation}</tool_response>\n\n"
    "Read the tool response carefully and update the memory with any new information that helps to answer the "
    "question, keeping every relevant detail of the previous memory. Return the updated memory inside "
    "<memory></memory>, then think and take your next action."
)
"""How MemSearcher hands back a search result: inside <tool_response>, with the request for the updated memory."""

MEMORY_PROBE = "Give the final answers now, from your summary alone."
"""The observation that closes MemPO's memory probe: the context holds the questions and one memory, nothing else."""
