"""The Python blocks of the README and docs/python.md (fenced as `python`) run as written;
blocks that need a GPU and torch are fenced as `py` and not run here (the README's Rust
blocks are checked by tests/tests/readme.rs)."""

import os
import re

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
DOCS = ("README.md", "docs/python.md")


def python_blocks(doc):
    with open(os.path.join(ROOT, doc)) as f:
        text = f.read()
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.S | re.M)


def test_each_doc_has_a_python_block():
    for doc in DOCS:
        assert len(python_blocks(doc)) >= 1, doc


def test_every_python_block_runs():
    for doc in DOCS:
        for i, block in enumerate(python_blocks(doc)):
            scope = {"__name__": f"doc_block_{i}"}
            exec(compile(block, f"{doc} python block {i}", "exec"), scope)
