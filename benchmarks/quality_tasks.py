"""RULER-style long-context tasks over real text (Python standard library sources), generated from a seed.

Every item is a context (one user message: source code with "needle" comment lines planted at random depths), a
question asked only after the context was prefilled (and evicted), an answer prefix the reply continues, and the
expected answers. The multi-turn task is a whole conversation instead: facts first, tool-like filler turns, then
questions about the facts. Generation is deterministic in (task, seed, item index, sizes, tokenizer).
"""

from __future__ import annotations

import random
import sysconfig
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

WORDS = (
    "falcon otter maple cobalt ember quartz willow heron saffron glacier lantern cedar walrus orchid basalt "
    "marlin thistle comet juniper pewter badger canyon velvet osprey tundra walnut meadow harbor cricket jasper "
    "lilac mango nickel pelican raven sorrel topaz umber violet yarrow"
).split()
CONTEXT_TASKS = ("single_needle", "multi_key", "multi_value", "two_hop", "variable_tracking")
TASKS = (*CONTEXT_TASKS, "multi_turn")
INSTRUCTION = "Below is a Python source file. Read it carefully: it hides some facts in comments.\n\n"


@dataclass
class Question:
    """A question asked after everything before it was prefilled; the reply continues `prefix`."""

    text: str  # the user message
    prefix: str  # the start of the assistant reply (the model continues it)
    answers: list[str]  # expected strings, score = share found in the reply; [] = not scored (a first hop)
    max_new_tokens: int = 12  # decode budget of the reply


@dataclass
class Item:
    """One scored conversation: message batches prefilled (and evicted) in turn, then questions in turn."""

    task: str  # task name (TASKS)
    turns: list[list[dict]]  # message batches, each prefilled on the cache before the next
    questions: list[Question]  # asked one after another, each reply staying in the conversation
    evidence: list[str] = field(default_factory=list)  # sentences the answers depend on (their survival is measured)


@lru_cache(maxsize=1)
def stdlib_files() -> tuple[Path, ...]:
    """The standard library's top-level .py files of at least 4 kB, sorted (the haystack pool)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    return tuple(p for p in sorted(root.glob("*.py")) if p.stat().st_size >= 4096)


def excerpt(path: Path, rng: random.Random, tokenizer, n_tokens: int) -> tuple[list[str], int]:
    """Consecutive whole lines of `path` from a random start, at most `n_tokens` tokens; (lines, tokens)."""
    file_lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    start = rng.randrange(max(1, len(file_lines) - 400))
    lines: list[str] = []
    used = 0
    for line in file_lines[start : start + 400]:
        cost = len(tokenizer(line + "\n", add_special_tokens=False)["input_ids"])
        if used + cost > n_tokens:
            break
        lines.append(line)
        used += cost
    return lines, used


def haystack_lines(rng: random.Random, tokenizer, n_tokens: int) -> list[str]:
    """Excerpts of randomly picked stdlib files, one after another, totalling about `n_tokens` tokens."""
    files = stdlib_files()
    lines: list[str] = []
    used = 0
    while True:
        more, cost = excerpt(files[rng.randrange(len(files))], rng, tokenizer, n_tokens - used)
        if not more:
            return lines
        lines, used = lines + more, used + cost


def plant(lines: list[str], needles: list[str], rng: random.Random, ordered: bool = False) -> str:
    """Insert each needle as a comment line at a random depth in 5%..95% (in order when `ordered`)."""
    out = list(lines)
    depths = [rng.uniform(0.05, 0.95) for _ in needles]
    if ordered:
        depths.sort()
    spots = sorted(zip(depths, range(len(needles)), strict=False), key=lambda t: -t[0])  # insert deepest first
    for depth, i in spots:
        out.insert(int(depth * len(out)), f"# {needles[i]}")
    return "\n".join(out)


def _number(rng: random.Random) -> str:
    return str(rng.randrange(1_000_000, 10_000_000))


def _var(rng: random.Random) -> str:
    return "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ") for _ in range(5))


def _magic(key: str, value: str) -> str:
    return f"The special magic number for {key} is {value}."


def single_needle(rng: random.Random, lines: list[str]) -> Item:
    key, value = rng.choice(WORDS), _number(rng)
    q = Question(
        f"What is the special magic number for {key} mentioned in the file?",
        f"The special magic number for {key} is",
        [value],
    )
    return _item("single_needle", plant(lines, [_magic(key, value)], rng), q, evidence=[_magic(key, value)])


def multi_key(rng: random.Random, lines: list[str], keys: int = 4) -> Item:
    names = rng.sample(WORDS, keys)
    values = [_number(rng) for _ in names]
    ask = rng.randrange(keys)
    q = Question(
        f"What is the special magic number for {names[ask]} mentioned in the file?",
        f"The special magic number for {names[ask]} is",
        [values[ask]],
    )
    ctx = plant(lines, [_magic(k, v) for k, v in zip(names, values, strict=False)], rng)
    return _item("multi_key", ctx, q, evidence=[_magic(names[ask], values[ask])])


def multi_value(rng: random.Random, lines: list[str], values: int = 2) -> Item:
    key = rng.choice(WORDS)
    nums = [_number(rng) for _ in range(values)]
    q = Question(
        f"What are all the special magic numbers for {key} mentioned in the file?",
        f"The special magic numbers for {key} are:",
        nums,
        max_new_tokens=24,
    )
    needles = [_magic(key, v) for v in nums]
    return _item("multi_value", plant(lines, needles, rng), q, evidence=needles)


def two_hop(rng: random.Random, lines: list[str]) -> Item:
    """A bridge: the first needle names a drawer, a later one (not naming the person) gives that drawer's code."""
    person, drawer, decoy = rng.sample(WORDS, 3)
    code, decoy_code = _number(rng), _number(rng)
    needles = [
        f"{person.capitalize()} keeps the secret code in the {drawer} drawer.",
        f"The {drawer} drawer contains the secret code {code}.",
        f"The {decoy} drawer contains the secret code {decoy_code}.",
    ]
    ctx = plant(lines, needles[:2], rng, ordered=True)
    ctx = plant(ctx.splitlines(), needles[2:], rng)
    first = Question(
        f"In which drawer does {person.capitalize()} keep the secret code?",
        f"{person.capitalize()} keeps the secret code in the",
        [],
        6,
    )
    then = Question("What is the secret code in that drawer?", "The secret code in that drawer is", [code])
    return _item("two_hop", ctx, first, then, evidence=needles[:2])


def variable_tracking(rng: random.Random, lines: list[str], hops: int = 3) -> Item:
    """A chain VAR X1 = N, VAR X2 = VAR X1, ... in order; ask which variables hold N (RULER's form)."""
    names = [_var(rng) for _ in range(hops)]
    value = _number(rng)
    needles = [f"VAR {names[0]} = {value}"] + [f"VAR {names[i]} = VAR {names[i - 1]}" for i in range(1, hops)]
    q = Question(
        f"Find all variables that are assigned the value {value}, directly or through other VAR assignments.",
        f"The variables assigned the value {value} are: VAR",
        names,
        max_new_tokens=16,
    )
    return _item("variable_tracking", plant(lines, needles, rng, ordered=True), q, evidence=needles)


def _item(task: str, context: str, *questions: Question, evidence: list[str]) -> Item:
    return Item(task, [[{"role": "user", "content": INSTRUCTION + context}]], list(questions), evidence)


def conversation(rng: random.Random, tokenizer, n_tokens: int, chunk_tokens: int = 160) -> Item:
    """Facts in the first user turn, then tool-like turns (commands and file excerpts) up to about `n_tokens`
    tokens, then one question per fact (asked in turn, each answer staying in the conversation)."""
    key, server, branch = _number(rng), f"{rng.choice(WORDS)}-{rng.randrange(10, 100)}", rng.choice(WORDS)
    facts = (
        f"Remember these facts for later. The deploy key is {key}. The staging server is named {server}. "
        f"The release branch is called {branch}. Reply OK."
    )
    turns = [[{"role": "system", "content": "You are a coding assistant working in a Python repository."}]]
    turns.append([{"role": "user", "content": facts}, {"role": "assistant", "content": "OK."}])
    files, used = stdlib_files(), 120
    while used < n_tokens:
        path = files[rng.randrange(len(files))]
        text = "\n".join(excerpt(path, rng, tokenizer, chunk_tokens)[0])
        turns.append(
            [
                {"role": "assistant", "content": f"Let me read {path.name}.\n$ sed -n 1,80p Lib/{path.name}"},
                {"role": "tool", "content": text},
            ]
        )
        used += chunk_tokens + 30
    questions = [
        Question("What is the deploy key I gave you at the start?", "The deploy key is", [key]),
        Question(
            "What is the name of the staging server I told you about at the start?",
            "The staging server is named",
            [server],
        ),
        Question(
            "What is the release branch called, as I told you at the start?", "The release branch is called", [branch]
        ),
    ]
    evidence = [
        f"The deploy key is {key}.",
        f"The staging server is named {server}.",
        f"The release branch is called {branch}.",
    ]
    return Item("multi_turn", turns, questions, evidence)


GENERATORS = {
    "single_needle": single_needle,
    "multi_key": multi_key,
    "multi_value": multi_value,
    "two_hop": two_hop,
    "variable_tracking": variable_tracking,
}


def make_item(task: str, seed: int, index: int, tokenizer, context_tokens: int) -> Item:
    """Item `index` of `task` for `seed` with a haystack of about `context_tokens` tokens."""
    rng = random.Random(f"{task}/{seed}/{index}")
    if task == "multi_turn":
        return conversation(rng, tokenizer, context_tokens)
    return GENERATORS[task](rng, haystack_lines(rng, tokenizer, context_tokens))
