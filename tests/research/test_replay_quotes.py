"""research/replay_quotes.py: which replies of a recorded conversation copy earlier text, with the real Qwen3
tokenizer and chat template."""

from __future__ import annotations

from replay_quotes import quoted_share, reply_quotes
from sessionlib import qwen_tokenizer

from kvstore.session.render import ChatRenderer

SCRIPT = "\n".join(f"value_{i} = compute_thing({i}, name='item {i}')" for i in range(12))


def test_a_run_counts_only_where_it_occurs_in_the_source() -> None:
    source = {(1, 2, 3)}
    assert quoted_share([9, 1, 2, 3, 9], source, 3) == 0.6
    assert quoted_share([1, 2, 9, 3], source, 3) == 0.0 and quoted_share([], source, 3) == 0.0


def test_a_reply_rewriting_the_agents_script_quotes_an_earlier_reply_and_crlf_task_text_still_matches() -> None:
    messages = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Fix this bug:\r\n" + SCRIPT.replace("\n", "\r\n")},
        {"role": "assistant", "content": "Let me look around first."},
        {"role": "user", "content": "README.md setup.py src"},
        {"role": "assistant", "content": "I will write the script:\n" + SCRIPT.replace("item", "entry")},
        {"role": "user", "content": "ok"},
        {"role": "assistant", "content": "Again, with a fix:\n" + SCRIPT.replace("item", "entry") + "\nprint(1)"},
    ]
    shares = reply_quotes(messages, ChatRenderer(qwen_tokenizer()), 10_000, 8)
    task, reply, tool = zip(*(shares[t] for t in (1, 2, 3)), strict=True)
    assert reply[0] == 0.0 and reply[1] < 0.3 and reply[2] > 0.8  # the third rewrites the second
    assert task[0] == 0.0 and task[1] > 0.3  # the second copies the task's code (its CRLF line ends aside)
    assert max(tool) == 0.0
    assert reply_quotes(messages, ChatRenderer(qwen_tokenizer()), 50, 8) == {}  # not even the opening fits
