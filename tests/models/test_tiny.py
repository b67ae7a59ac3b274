"""The embedded model's tokenizer fits the envs: every multihop entity name is one token."""

from envs import multihop
from memrl.models.tiny import DEFAULT_VOCAB_SIZE, build_tokenizer, default_model_corpus


def test_multihop_names_are_single_tokens():
    tok = build_tokenizer(default_model_corpus(), vocab_size=DEFAULT_VOCAB_SIZE)
    names = set()
    for seed in range(100):
        for doc in multihop.make_task(seed).documents:
            names.update(w.strip(".") for w in doc.split()[2:] if w[0].isupper())
    assert len(names) > 50
    multi = [n for n in names if len(tok(" " + n, add_special_tokens=False)["input_ids"]) != 1]
    assert multi == []
