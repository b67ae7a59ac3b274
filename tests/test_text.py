"""The text protocol shared by envs and workflows: tagged blocks, the search action grammar, boxed answers."""

from memrl.text import extract_boxed, find_action, read_block


def test_read_block_needs_exactly_one_block_in_order():
    assert read_block("a<mem> m </mem>b", "mem") == (6, 9)
    assert read_block("</mem><mem>", "mem") is None and read_block("<mem>", "mem") is None
    assert read_block("<mem>a</mem><mem>b</mem>", "mem") is None


def test_find_action_reads_one_search_or_answer_block():
    assert find_action("<think>t</think><search> q </search>") == ("search", "q")
    assert find_action("<answer>a; b</answer>") == ("answer", "a; b")
    assert find_action("<search>q</search><answer>a</answer>") == ("invalid", "it holds both <search> and <answer>")
    assert find_action("<search>q") == ("invalid", "its <search> and </search> tags do not form exactly one block")


def test_extract_boxed_takes_the_last_box_and_balances_braces():
    assert extract_boxed("so \\boxed{Paris}") == "Paris"
    assert extract_boxed("\\boxed{a} then \\boxed{b}") == "b"
    assert extract_boxed("\\boxed{\\frac{1}{2}} done") == "\\frac{1}{2}"
    assert extract_boxed("\\boxed{}") == ""
    assert extract_boxed("no box here") is None
    assert extract_boxed("\\boxed{open") is None
    assert extract_boxed("\\boxed{x} and \\boxed{unclosed") is None  # only the last box counts, as in MemAgent's code


class _CountedReads(str):
    """A reply that counts how many characters are read one by one."""

    reads = 0

    def __getitem__(self, key):
        type(self).reads += 1
        return str.__getitem__(self, key)


def test_extract_boxed_reads_a_hostile_reply_once_however_many_boxes_it_opens():
    for opened in (200, 20_000):
        reply = _CountedReads("\\boxed{" * opened + "x" * 100)
        _CountedReads.reads = 0
        assert extract_boxed(reply) is None
        assert _CountedReads.reads <= len(reply)  # linear: a quadratic scan reads ~opened x len characters
